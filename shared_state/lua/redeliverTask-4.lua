--[[
  redeliverTask: note that a queued task's delivery was lost and is re-sent.

  The reaper calls it after finding no live RQ envelope for a task queued
  longer than the grace period. Checked again here so that two reapers, or a
  claim in between, never cause a second redelivery: it succeeds only if the
  task is still queued since before the grace period, and restarts that clock.

  KEYS[1] task hash        rf:{job}:task:<task_id>
  KEYS[2] job hash         rf:{job}:job
  KEYS[3] job event stream rf:{job}:events
  KEYS[4] queued index     rf:{job}:queued

  ARGV[1] grace period in ms
  ARGV[2] reason

  Returns {code, data, events}
     1  the caller must enqueue a new envelope; data = role
    -2  not queued any more, or queued too recently
    error  a key in KEYS belongs to another job

  Events: task.requeued.
]]
--- @include "common"

local wrong = sameJob()
if wrong then return wrong end
local taskKey, jobKey, stream, queuedKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local t = redis.call('HMGET', taskKey, 'status', 'task_id', 'role', 'attempt')
local now = nowMs()
local job = readJob(jobKey)
if t[1] ~= 'queued' or isTerminalJob(job.status) then
  return reply(-2)
end
local since = tonumber(redis.call('ZSCORE', queuedKey, t[2]) or '0')
if now - since < tonumber(ARGV[1]) then return reply(-2) end
redis.call('ZADD', queuedKey, now, t[2])
redis.call('HSET', taskKey, 'queued_ms', now)
emit(stream, job.maxlen, {'event', 'task.requeued', 'task_id', t[2], 'role', t[3],
  'attempt', t[4], 'reason', ARGV[2]})
return reply(1, {role = t[3]})
