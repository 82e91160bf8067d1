--[[
  failAttempt: end the current attempt of a claimed task.

  Below max_attempts the task goes back to `queued` with attempt + 1
  (event task.requeued); at max_attempts it is `dead` (event task.dead) and
  its job fails with the reason (event job.failed); `final` skips retries.
  In a job that has already finished, the task is cancelled instead.
  Used by failTask, reapTask and claimTask (taking over an expired lease).
  Expects the standard task KEYS: task, job, events, leases, queued, tasks,
  and `job` as readJob returns it.

  Returns 'requeued', 'dead' or 'cancelled'.
]]
local function failAttempt(reason, now, final, job)
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
  if final or attempt >= job.maxAttempts then
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
  redis.call('HSET', taskKey, 'status', 'queued', 'owner', '', 'lease_until', 0,
    'attempt', attempt + 1, 'error', reason, 'queued_ms', now)
  redis.call('ZADD', queuedKey, now, taskId)
  emit(stream, maxlen, {'event', 'task.requeued', 'task_id', taskId, 'role', role,
    'worker', t[6], 'token', t[5], 'attempt', attempt + 1, 'reason', reason})
  return 'requeued'
end
