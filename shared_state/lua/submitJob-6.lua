--[[
  submitJob: write a new job's records and its queued root planner task.

  Idempotent: the job id is chosen by the caller, and a submit re-sent with
  the same id (a retry after a lost reply) finds the job and writes nothing,
  so the caller still learns the id of the one job it created. The job
  registry and the active-jobs set are cross-job keys: the caller adds the id
  to them before this script, and delivers the root task after it.

  KEYS[1] job hash         rf:{job}:job
  KEYS[2] root task hash   rf:{job}:task:<root_id>
  KEYS[3] budget hash      rf:{job}:budget
  KEYS[4] task set         rf:{job}:tasks
  KEYS[5] queued index     rf:{job}:queued
  KEYS[6] job event stream rf:{job}:events

  ARGV[1] root task id
  ARGV[2] token budget (0: no limit)
  ARGV[3] the root task's brief (the goal, cut short)
  ARGV[4] when the caller indexed the id (ms, Redis time)
  ARGV[5] how late after that the records may still be written (ms)
  ARGV[6..] the job hash's field/value pairs (created_ms is added here)

  A job's records are written only within ARGV[5] of its indexing: past that
  the reaper may have dropped the id as a submit that never completed, and a
  job written then would run unwatched.

  Returns {code, data, events}
     1  data = created_ms, existed (1 when this id had been submitted already)
    -2  too late: nothing written; data = late_ms
    error  a key in KEYS belongs to another job

  Events: job.submitted, task.queued (none when the job existed).
]]
--- @include "common"

local wrong = sameJob()
if wrong then return wrong end
local jobKey, taskKey, budgetKey, tasksKey, queuedKey, stream =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local root, brief = ARGV[1], ARGV[3]

local created = redis.call('HGET', jobKey, 'created_ms')
if created then return reply(1, {created_ms = tonumber(created), existed = true}) end

local now = nowMs()
local late = now - tonumber(ARGV[4])
if late > tonumber(ARGV[5]) then return reply(-2, {late_ms = late}) end
redis.call('HSET', jobKey, 'created_ms', now, unpack(ARGV, 6))
local job = readJob(jobKey)
redis.call('HSET', taskKey, 'task_id', root, 'job_id', redis.call('HGET', jobKey, 'job_id'),
  'role', 'planner', 'parent_id', '', 'brief', brief, 'status', 'queued', 'attempt', 1,
  'token', 0, 'owner', '', 'lease_until', 0, 'pending', 0, 'stage', '', 'created_ms', now,
  'queued_ms', now)
-- The money budget in micro-dollars, from the job's own field (budget_usd, USD).
local usd = math.floor(tonumber(redis.call('HGET', jobKey, 'budget_usd') or 0) * 1e6 + 0.5)
redis.call('HSET', budgetKey, 'limit', tonumber(ARGV[2]), 'used', 0, 'reserved', 0,
  'limit_usd', usd, 'used_usd', 0, 'reserved_usd', 0)
redis.call('SADD', tasksKey, root)
redis.call('ZADD', queuedKey, now, root)
emit(stream, job.maxlen, {'event', 'job.submitted', 'goal', brief,
  'scenario', redis.call('HGET', jobKey, 'scenario')})
emit(stream, job.maxlen, {'event', 'task.queued', 'task_id', root, 'role', 'planner'})
return reply(1, {created_ms = now, existed = false})
