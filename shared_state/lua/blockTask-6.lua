--[[
  blockTask: the owner parks its task for a person: a question is stated and
  the task waits, without a lease, until `redfleet approve` or `reject`.

  Fenced by token, and idempotent for its owner (a re-sent block is answered
  from the record). The job is `blocked` while any of its tasks is.

  KEYS[1] task hash        rf:{job}:task:<task_id>
  KEYS[2] job hash         rf:{job}:job
  KEYS[3] job event stream rf:{job}:events
  KEYS[4] lease index      rf:{job}:leases
  KEYS[5] queued index     rf:{job}:queued
  KEYS[6] task set         rf:{job}:tasks

  ARGV[1] fencing token    ARGV[2] worker id
  ARGV[3] the question for the person
  ARGV[4] what an approval is for: the digest of the call it would let through
  ARGV[5] the stage the task resumes at

  Returns {code, data, events}
     1  blocked
    -1  no such task
    -3  fenced
    -4  the job has finished (the task is cancelled)

  Events: task.blocked, and job.blocked when it is the job's first.
]]
--- @include "common"
--- @include "fence"

local token, worker = ARGV[1], ARGV[2]
local refused, t, job = ownedTask(token, worker, 'block', 'role')
if refused then return refused end
local taskKey, jobKey, stream, leasesKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local taskId = t[3]
local now = nowMs()
redis.call('HSET', taskKey, 'status', 'blocked', 'owner', '', 'lease_until', 0,
  'question', ARGV[3], 'approval_for', ARGV[4], 'stage', ARGV[5], 'blocked_ms', now,
  'approved_for', '', 'approval_note', '')
redis.call('ZREM', leasesKey, taskId)
emit(stream, job.maxlen, {'event', 'task.blocked', 'task_id', taskId, 'role', t[6],
  'worker', worker, 'token', token, 'question', ARGV[3]})
if redis.call('HINCRBY', jobKey, 'blocked_tasks', 1) == 1 then
  redis.call('HSET', jobKey, 'status', 'blocked')
  emit(stream, job.maxlen, {'event', 'job.blocked', 'job_id', redis.call('HGET', jobKey, 'job_id'),
    'task_id', taskId, 'question', ARGV[3]})
end
ended(token, worker, 'block', {})
return reply(1, {})
