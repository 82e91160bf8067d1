--[[
  swapEnvelope: a task slot took an envelope off its role's queue whose job is
  at its fair share (workers/fair_share.py) while another job's waits under
  its own: take that one instead, and put the first back where it was, at the
  head of the queue. Nothing is sent again: both stay the same RQ jobs, the
  queue keeps its order, and the one given back is the next a slot takes.

  KEYS[1] the role's RQ queue (variable: RQ names it, rq:queue:<role>)
  KEYS[2] its intermediate list, where RQ's dequeue moved the envelope taken
          (variable: rq:queue:<role>:intermediate)

  ARGV[1] the RQ job id of the envelope taken (in the intermediate list)
  ARGV[2] the RQ job id of the one to take instead (waiting in the queue)

  Returns {code, data, events} (no events)
     1  swapped: ARGV[2] is in the intermediate list in ARGV[1]'s place, and
        ARGV[1] at the head of the queue
    -1  ARGV[2] waits no longer (another slot took it): nothing changed
]]
--- @include "common"

local queue, intermediate, taken, instead = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
if redis.call('LREM', queue, 1, instead) == 0 then
  return reply(-1, {})
end
redis.call('LREM', intermediate, 1, taken)
redis.call('RPUSH', intermediate, instead)
redis.call('LPUSH', queue, taken)
return reply(1, {})
