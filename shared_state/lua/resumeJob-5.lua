--[[
  resumeJob: start a new round of a finished job from its records: the root
  planner task is queued at the stage the resumption checks chose, and the
  job runs again with the same id, under its (possibly new) criteria.

  The tasks of earlier rounds keep their records (their waves are named by
  round, so nothing of theirs is taken for the new round's); any of them not
  finished (a cancelled job's claimed, queued or blocked tasks) is cancelled
  now, its token bumped, so its owner's next write is fenced and it never
  counts in the new round's fan-in. The job's keys and its tasks stop expiring.

  KEYS[1] job hash         rf:{job}:job
  KEYS[2] job event stream rf:{job}:events
  KEYS[3] lease index      rf:{job}:leases
  KEYS[4] queued index     rf:{job}:queued
  KEYS[5] task set         rf:{job}:tasks
  KEYS[6 .. 5+n]           the job's other keys, to stop expiring
  KEYS[6+n ..]             the job's task hashes (the root's among them)

  ARGV[1] n, the number of other job keys
  ARGV[2] the job's resume count the caller read (a re-sent resume of that round
          is answered from the record)
  ARGV[3] the root task's stage for the new round
  ARGV[4] the goal ('' keeps it)
  ARGV[5] the constraints (the caller's encoding)   ARGV[6] the criteria version
  ARGV[7] 1 if the criteria changed (their time is recorded), else 0
  ARGV[8] the new round's feature list artifact id   ARGV[9] its checks artifact id
  ARGV[10] the resume's id, chosen by the caller: a resume re-sent after a lost
           reply is answered from the record, even once its round has ended

  Returns {code, data, events}
     1  data = stage, replayed
    -1  no such job
    -4  the job has not finished (data = job_status)
    error  a key in KEYS belongs to another job

  Events: job.resumed, task.queued (the root).
]]
--- @include "common"

local wrong = sameJob()
if wrong then return wrong end
local jobKey, stream, leasesKey, queuedKey, tasksKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local job = readJob(jobKey)
if not job.status then return reply(-1) end
local expected = tonumber(ARGV[2])
if redis.call('HGET', jobKey, 'resume_request') == ARGV[10] then
  return reply(1, {stage = redis.call('HGET', jobKey, 'resume_stage'), replayed = true})
end
if not isTerminalJob(job.status) then
  local done = redis.call('HMGET', jobKey, 'resumes', 'resume_stage')
  if tonumber(done[1] or '0') == expected + 1 and done[2] == ARGV[3] then
    return reply(1, {stage = done[2], replayed = true})
  end
  return reply(-4, {job_status = job.status})
end

local n = tonumber(ARGV[1])
local now = nowMs()
for i = 1, 5 + n do redis.call('PERSIST', KEYS[i]) end
local root = redis.call('HGET', jobKey, 'root_task')
for i = 6 + n, #KEYS do
  redis.call('PERSIST', KEYS[i])
  local t = redis.call('HMGET', KEYS[i], 'task_id', 'role', 'status', 'token')
  if t[1] == root then
    redis.call('HSET', KEYS[i], 'status', 'queued', 'stage', ARGV[3], 'attempt', 1, 'owner', '',
      'lease_until', 0, 'result', '', 'error', '', 'pending', 0, 'finished_ms', 0,
      'queued_ms', now, 'not_before', 0, 'token', tonumber(t[4] or '0') + 1, 'approved_for', '',
      'approval_note', '', 'approval_stage', '')
    redis.call('ZREM', leasesKey, root)
    redis.call('ZADD', queuedKey, now, root)
  elseif t[3] ~= 'succeeded' and t[3] ~= 'dead' and t[3] ~= 'cancelled' then
    redis.call('HSET', KEYS[i], 'status', 'cancelled', 'owner', '', 'lease_until', 0,
      'token', tonumber(t[4] or '0') + 1, 'finished_ms', now)
    redis.call('ZREM', leasesKey, t[1])
    redis.call('ZREM', queuedKey, t[1])
  end
end
local round = redis.call('HINCRBY', jobKey, 'resumes', 1)
redis.call('HSET', jobKey, 'status', 'running', 'reason', '', 'finished_ms', 0, 'result', '',
  'resume_stage', ARGV[3], 'constraints', ARGV[5], 'criteria_version', ARGV[6],
  'blocked_tasks', 0, 'resumed_ms', now, 'resume_features', ARGV[8], 'resume_checks', ARGV[9],
  'resume_request', ARGV[10])
if ARGV[4] ~= '' then redis.call('HSET', jobKey, 'goal', ARGV[4]) end
if ARGV[7] == '1' then redis.call('HSET', jobKey, 'criteria_ms', now) end
emit(stream, job.maxlen, {'event', 'job.resumed', 'job_id', redis.call('HGET', jobKey, 'job_id'),
  'round', round, 'stage', ARGV[3]})
emit(stream, job.maxlen, {'event', 'task.queued', 'task_id', root, 'role', 'planner',
  'reason', 'resumed'})
return reply(1, {stage = ARGV[3], replayed = false})
