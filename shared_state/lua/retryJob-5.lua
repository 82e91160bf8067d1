--[[
  retryJob: give a failed job's dead and cancelled tasks fresh attempts and
  set the job running again, with the same id.

  Tasks that succeeded stay succeeded (nothing runs twice); a parent that was
  waiting on its children when the job ended (endTasks cancelled it) waits
  again with its pending counter, so fan-in goes on where it stopped. Of a resumed job, only the current round's tasks (created since the
  resume) and the root are given new attempts. The job's keys and its tasks stop expiring.

  KEYS[1] job hash         rf:{job}:job
  KEYS[2] job event stream rf:{job}:events
  KEYS[3] lease index      rf:{job}:leases
  KEYS[4] queued index     rf:{job}:queued
  KEYS[5] task set         rf:{job}:tasks
  KEYS[6 .. 5+n]           the job's other keys (budget, usage, artifacts index, journal,
                           checkpoints, workspace), to stop expiring
  KEYS[6+n ..]             the job's task hashes

  ARGV[1] n, the number of other job keys
  ARGV[2] the job's retry count the caller read (a re-sent retry of that round is
          answered from the record, not refused)

  Returns {code, data, events}
     1  data = requeued (task ids, space separated), queued (those still queued: the
        caller delivers both)
    -1  no such job
    -4  the job has not failed; data = job_status
    error  a key in KEYS belongs to another job

  Events: job.retried, then task.queued for each task given a fresh attempt.
]]
--- @include "common"

local wrong = sameJob()
if wrong then return wrong end
local jobKey, stream, leasesKey, queuedKey, tasksKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local job = readJob(jobKey)
if not job.status then return reply(-1) end
if job.status ~= 'failed' then
  local done = redis.call('HMGET', jobKey, 'retries', 'retry_requeued', 'retry_queued')
  if tonumber(done[1] or '0') == tonumber(ARGV[2]) + 1 and done[2] then
    return reply(1, {requeued = done[2], queued = done[3] or '', replayed = true})
  end
  return reply(-4, {job_status = job.status})
end

local n = tonumber(ARGV[1])
local now = nowMs()
for i = 1, 5 + n do redis.call('PERSIST', KEYS[i]) end
local requeued, queued, events = {}, {}, {}
local resumedMs = tonumber(redis.call('HGET', jobKey, 'resumed_ms') or '0')
local root = redis.call('HGET', jobKey, 'root_task')
for i = 6 + n, #KEYS do
  local taskKey = KEYS[i]
  redis.call('PERSIST', taskKey)
  local t = redis.call('HMGET', taskKey, 'task_id', 'role', 'status', 'error', 'retries',
    'created_ms', 'pending')
  -- Only this round's tasks: an earlier round's, resumed past, stay as they ended.
  local thisRound = (tonumber(t[6] or '0') >= resumedMs) or t[1] == root
  if thisRound and t[3] == 'cancelled' and tonumber(t[7] or '0') > 0 then
    -- Ended while it waited on its children (endTasks): it waits for them again.
    redis.call('HSET', taskKey, 'status', 'waiting', 'finished_ms', 0)
  elseif thisRound and (t[3] == 'dead' or t[3] == 'cancelled') then
    redis.call('HSET', taskKey, 'status', 'queued', 'attempt', 1, 'owner', '', 'lease_until', 0,
      'queued_ms', now, 'not_before', 0, 'finished_ms', 0, 'last_error', t[4] or '',
      'retries', (tonumber(t[5]) or 0) + 1)
    redis.call('ZADD', queuedKey, now, t[1])
    requeued[#requeued + 1] = t[1]
    events[#events + 1] = {'event', 'task.queued', 'task_id', t[1], 'role', t[2], 'retry', 1}
  elseif t[3] == 'queued' then
    -- Sent again now: a retry that was waiting out its backoff waits no more.
    redis.call('HSET', taskKey, 'not_before', 0)
    queued[#queued + 1] = t[1]
  end
end
local round = redis.call('HINCRBY', jobKey, 'retries', 1)
redis.call('HSET', jobKey, 'status', 'running', 'reason', '', 'finished_ms', 0, 'blocked_tasks', 0,
  'retry_requeued', table.concat(requeued, ' '), 'retry_queued', table.concat(queued, ' '))
emit(stream, job.maxlen, {'event', 'job.retried', 'job_id', redis.call('HGET', jobKey, 'job_id'),
  'tasks', #requeued, 'retry', round})
for _, fields in ipairs(events) do emit(stream, job.maxlen, fields) end
return reply(1, {requeued = table.concat(requeued, ' '), queued = table.concat(queued, ' ')})
