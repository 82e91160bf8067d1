--[[
  reapTask: end an attempt whose lease has expired (its worker is lost).

  Checked again here, atomically, against Redis time: a lease renewed since
  the reaper looked is left alone. The task is re-queued with attempt + 1,
  or dead at max attempts (and its job failed).

  KEYS[1] task hash        rf:{job}:task:<task_id>
  KEYS[2] job hash         rf:{job}:job
  KEYS[3] job event stream rf:{job}:events
  KEYS[4] lease index      rf:{job}:leases
  KEYS[5] queued index     rf:{job}:queued
  KEYS[6] task set         rf:{job}:tasks
  KEYS[7] retries index    rf:{job}:retries

  ARGV[1..3] the retry's backoff: base ms, cap ms, jitter in [0, 1) (failAttempt)

  Returns {code, data, events}
     1  data = outcome ('requeued' | 'dead' | 'cancelled': the job had finished), role,
        retry_in_ms
    -1  no such task (its lease entry, left without it, is dropped)
    -2  nothing to reap (not claimed, or lease still live)
    error  a key in KEYS belongs to another job

  Events: task.requeued, or task.dead + job.failed.
]]
--- @include "common"
--- @include "failAttempt"

local wrong = sameJob()
if wrong then return wrong end
local taskKey, leasesKey = KEYS[1], KEYS[4]
local t = redis.call('HMGET', taskKey, 'status', 'lease_until', 'owner', 'task_id', 'role')
if not t[1] then
  -- A lease entry whose task's record is gone (evicted, deleted): nothing to reap, ever.
  redis.call('ZREM', leasesKey, string.match(taskKey, ':task:(.+)$'))
  return reply(-1)
end
local now = nowMs()
if t[1] ~= 'claimed' or tonumber(t[2]) > now then
  if t[1] ~= 'claimed' then redis.call('ZREM', leasesKey, t[4]) end
  return reply(-2, {status = t[1], lease_until = t[2]})
end
local outcome, delay = failAttempt('lease expired (owner ' .. t[3] .. ')', now, false,
  readJob(KEYS[2]), backoffArgs(1))
return reply(1, {outcome = outcome, role = t[5], retry_in_ms = delay or 0})
