--[[
  completeTask: finish a task the caller owns, and fan in to its parent.

  Fenced by token, and idempotent for its owner: a completion re-sent by the
  same worker with the same token after it succeeded (a retry after a lost
  reply) gets the first call's reply again — the parent it re-queued, whether
  the job finished — and the fan-in is not repeated. The last child of a waiting parent to complete
  re-queues the parent: the pending counter is decremented here, atomically, so
  exactly one child sees it reach zero. Completing the root task (no parent)
  completes the job. Finished tasks and jobs start their retention clock.

  KEYS[1] task hash        rf:{job}:task:<task_id>
  KEYS[2] job hash         rf:{job}:job
  KEYS[3] job event stream rf:{job}:events
  KEYS[4] lease index      rf:{job}:leases
  KEYS[5] queued index     rf:{job}:queued
  KEYS[6] task set         rf:{job}:tasks
  KEYS[7] parent task hash rf:{job}:task:<parent_id> (the task's own key for a root task)

  ARGV[1] fencing token
  ARGV[2] worker id
  ARGV[3] result (short text; payloads travel as artifact references)

  Returns {code, data, events}
     1  completed; data = parent_requeued (parent id or ''), parent_role,
        job_finished (1 when the job succeeded with this task, else 0)
    -1  no such task
    -3  fenced (event task.fenced)
    -4  the job has already finished; the task is marked cancelled
    error  a key in KEYS belongs to another job, or KEYS[7] is not the parent

  Events: task.succeeded; task.queued for a re-queued parent; job.succeeded.
]]
--- @include "common"
--- @include "fence"

local taskKey, jobKey, stream, leasesKey, queuedKey, tasksKey, parentKey =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local token, worker, result = ARGV[1], ARGV[2], ARGV[3]

local wrong = sameJob()
if wrong then return wrong end
local t = ownerRow(taskKey, 'parent_id', 'role', 'job_id')
local taskId, parentId, role = t[3], t[6], t[7]
local job = readJob(jobKey)
local refused = fence(t, job, stream, token, worker, 'complete')
if refused then return refused end
local finished = endIfJobFinished(taskKey, taskId, job, leasesKey, queuedKey)
if finished then return finished end

local parent
if parentId ~= '' then
  parent = redis.call('HMGET', parentKey, 'task_id', 'status', 'role')
  if parent[1] ~= parentId then
    -- Checked before any write: a wrong key must not leave a half-done completion.
    return redis.error_reply('KEYS[7] is not the parent of ' .. taskId)
  end
end

local now = nowMs()
redis.call('HSET', taskKey, 'status', 'succeeded', 'lease_until', 0, 'result', result,
  'finished_ms', now)
redis.call('ZREM', leasesKey, taskId)
expireTask(taskKey, job)
emit(stream, job.maxlen, {'event', 'task.succeeded', 'task_id', taskId, 'role', role,
  'worker', worker, 'token', token})

local done = {parent_requeued = '', parent_role = '', job_finished = false}
if parent then
  local pending = redis.call('HINCRBY', parentKey, 'pending', -1)
  if pending == 0 and parent[2] == 'waiting' then
    redis.call('HSET', parentKey, 'status', 'queued', 'queued_ms', now)
    redis.call('ZADD', queuedKey, now, parentId)
    done.parent_requeued, done.parent_role = parentId, parent[3]
    emit(stream, job.maxlen, {'event', 'task.queued', 'task_id', parentId,
      'role', parent[3], 'reason', 'children done'})
  end
else
  redis.call('HSET', jobKey, 'status', 'succeeded', 'finished_ms', now, 'result', result)
  emit(stream, job.maxlen, {'event', 'job.succeeded', 'job_id', t[8]})
  expireJob(job, jobKey, stream, leasesKey, queuedKey, tasksKey)
  done.job_finished = true
end
ended(token, worker, 'complete', done)
return reply(1, done)
