--[[
  failAttempt: end the current attempt of a claimed task.

  Below max_attempts the task goes back to `queued` with attempt + 1
  (event task.requeued); at max_attempts it is `dead` (event task.dead) and
  its job fails with the reason (event job.failed); `final` skips retries.
  In a job that has already finished, the task is cancelled instead.
  Used by failTask, reapTask and claimTask (taking over an expired lease).
  Expects the standard task KEYS: task, job, events, leases, queued, tasks,
  then retries (rf:{job}:retries, task id -> due ms), and `job` as readJob
  returns it.

  `backoff` (shared_state/backoff.py, the one policy): the base and cap in
  ms and a jitter in [0, 1) from the caller. The retry waits
  min(cap, base * 2^(attempt - 1)) * (1 + jitter) / 2 — half fixed, half
  random — as the task's `not_before`: its queued score is then the time it
  is due (so no lost-delivery check meets it before), it is listed in the
  retries index for the reaper to deliver, and a claim before then is refused.

  Returns 'requeued', 'dead' or 'cancelled', and the retry's delay in ms.
]]
local function failAttempt(reason, now, final, job, backoff)
  local taskKey, jobKey, stream, leasesKey, queuedKey, tasksKey =
    KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
  local t = redis.call('HMGET', taskKey, 'task_id', 'job_id', 'role', 'attempt', 'token', 'owner')
  local taskId, jobId, role = t[1], t[2], t[3]
  local attempt = tonumber(t[4])
  local maxlen = job.maxlen
  if isTerminalJob(job.status) then
    cancelTask(taskKey, job, leasesKey, queuedKey, taskId, now)
    return 'cancelled'
  end
  redis.call('ZREM', leasesKey, taskId)
  if final or attempt >= tonumber(job.maxAttempts) then
    redis.call('HSET', taskKey, 'status', 'dead', 'owner', '', 'lease_until', 0,
      'error', reason, 'finished_ms', now)
    redis.call('ZREM', queuedKey, taskId)
    expireTask(taskKey, job)
    emit(stream, maxlen, {'event', 'task.dead', 'task_id', taskId, 'role', role,
      'worker', t[6], 'token', t[5], 'attempt', attempt, 'reason', reason})
    do
      local why = 'task ' .. taskId .. ' (' .. role .. ') dead after ' .. attempt ..
        ' attempt(s): ' .. reason
      redis.call('HSET', jobKey, 'status', 'failed', 'reason', why, 'finished_ms', now)
      emit(stream, maxlen, {'event', 'job.failed', 'job_id', jobId, 'reason', why})
      expireJob(job, jobKey, stream, leasesKey, queuedKey, tasksKey)
    end
    return 'dead'
  end
  local delay = 0
  if backoff and backoff.base > 0 then
    delay = math.floor(math.min(backoff.cap, backoff.base * 2 ^ (attempt - 1)) *
      (1 + backoff.jitter) / 2)
  end
  local due = now + delay
  redis.call('HSET', taskKey, 'status', 'queued', 'owner', '', 'lease_until', 0,
    'attempt', attempt + 1, 'error', reason, 'queued_ms', now, 'not_before', due)
  redis.call('ZADD', queuedKey, due, taskId)
  if delay > 0 then redis.call('ZADD', KEYS[7], due, taskId) end
  emit(stream, maxlen, {'event', 'task.requeued', 'task_id', taskId, 'role', role,
    'worker', t[6], 'token', t[5], 'attempt', attempt + 1, 'reason', reason,
    'retry_in_ms', delay})
  return 'requeued', delay
end

-- The backoff of ARGV[at], ARGV[at + 1], ARGV[at + 2] (base ms, cap ms, jitter).
local function backoffArgs(at)
  return {base = tonumber(ARGV[at] or '0') or 0, cap = tonumber(ARGV[at + 1] or '0') or 0,
    jitter = tonumber(ARGV[at + 2] or '0') or 0}
end
