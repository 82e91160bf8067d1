--[[
  redeliverTask: send a queued task again: its delivery was lost, or its retry is due.

  The reaper calls it after finding no live RQ envelope for a task queued
  longer than the grace period, and for a retry whose not-before time has
  come (grace 0: no envelope was sent for it). Checked again here so that two
  reapers, or a claim in between, never cause a second delivery: it succeeds
  only if the task is still queued, due, and queued since before the grace
  period (a delayed retry counts from its due time), and restarts that clock.
  The task leaves the retries index, now or when it is found not queued.

  KEYS[1] task hash        rf:{job}:task:<task_id>
  KEYS[2] job hash         rf:{job}:job
  KEYS[3] job event stream rf:{job}:events
  KEYS[4] queued index     rf:{job}:queued
  KEYS[5] retries index    rf:{job}:retries

  ARGV[1] grace period in ms
  ARGV[2] reason

  Returns {code, data, events}
     1  the caller must enqueue a new envelope; data = role
    -2  not queued any more, not due yet, or queued too recently
    error  a key in KEYS belongs to another job

  Events: task.requeued (a lost delivery), task.due (a retry).
]]
--- @include "common"

local wrong = sameJob()
if wrong then return wrong end
local taskKey, jobKey, stream, queuedKey, retriesKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local taskId = string.match(taskKey, ':task:(.+)$')
local t = redis.call('HMGET', taskKey, 'status', 'task_id', 'role', 'attempt', 'not_before')
local now = nowMs()
local job = readJob(jobKey)
if t[1] ~= 'queued' or isTerminalJob(job.status) then
  redis.call('ZREM', retriesKey, taskId)
  return reply(-2)
end
if tonumber(t[5] or '0') > now then return reply(-2) end
local since = tonumber(redis.call('ZSCORE', queuedKey, t[2]) or '0')
if now - since < tonumber(ARGV[1]) then return reply(-2) end
local due = redis.call('ZREM', retriesKey, t[2]) == 1
redis.call('ZADD', queuedKey, now, t[2])
redis.call('HSET', taskKey, 'queued_ms', now)
emit(stream, job.maxlen, {'event', due and 'task.due' or 'task.requeued', 'task_id', t[2],
  'role', t[3], 'attempt', t[4], 'reason', ARGV[2]})
return reply(1, {role = t[3]})
