--[[
  swapEnvelope: a task slot took an envelope off its role's queue whose job is
  at its fair share (workers/fair_share.py) while another job's waits under
  its own: take that one instead, and put the first back where it was, at the
  head of the queue. Nothing is sent again: both stay the same RQ jobs, the
  queue keeps its order, and the one given back is the next a slot takes.

  A swap re-sent after a lost reply finds its own record and answers 1 again
  (the record lives a minute, longer than the client's retries): without it
  the re-send would find ARGV[2] gone and the slot would run ARGV[1] while it
  waits at the head of the queue, leaving ARGV[2] to nobody.

  KEYS[1] the role's RQ queue (variable: RQ names it, rq:queue:<role>)
  KEYS[2] its intermediate list, where RQ's dequeue moved the envelope taken
          (variable: rq:queue:<role>:intermediate)
  KEYS[3] RQ's first-seen mark of ARGV[1] in that list (variable): dropped, so
          its next stay there gets RQ's full minute before it is taken for stuck
  KEYS[4] this swap's record (variable: rf:swap:<ARGV[1]>:<ARGV[2]>)

  ARGV[1] the RQ job id of the envelope taken (in the intermediate list)
  ARGV[2] the RQ job id of the one to take instead (waiting in the queue)

  Returns {code, data, events} (no events)
     1  swapped (now, or by this call before its reply was lost): ARGV[2] is
        in the intermediate list in ARGV[1]'s place, ARGV[1] at the head of
        the queue
    -1  ARGV[2] waits no longer (another slot took it): nothing changed
]]
--- @include "common"

local queue, intermediate, firstSeen, record = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local taken, instead = ARGV[1], ARGV[2]
if redis.call('EXISTS', record) == 1 then
  return reply(1, {})
end
if redis.call('LREM', queue, 1, instead) == 0 then
  return reply(-1, {})
end
redis.call('RPUSH', intermediate, instead)
-- Given back only from where this slot's dequeue put it (never a copy another slot runs).
if redis.call('LREM', intermediate, 1, taken) == 1 then
  redis.call('LPUSH', queue, taken)
  redis.call('DEL', firstSeen)
end
redis.call('SET', record, '1', 'PX', 60000)
return reply(1, {})
