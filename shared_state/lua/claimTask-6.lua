--[[
  claimTask: take ownership of a task (compare-and-set) and start its lease.

  Succeeds only when the task is `queued`, or `claimed` with a lease that has
  expired by Redis time (the old attempt is then ended first, as the reaper
  would: attempt + 1, or dead at max attempts). Each success increments the
  task's fencing token; every later write by the owner must carry it.
  Idempotent for its owner: a claim re-sent by the same worker (a client
  retry after a lost reply) while its lease is live returns the same claim.

  KEYS[1] task hash        rf:{job}:task:<task_id>
  KEYS[2] job hash         rf:{job}:job
  KEYS[3] job event stream rf:{job}:events
  KEYS[4] lease index      rf:{job}:leases   (zset task_id -> lease deadline ms)
  KEYS[5] queued index     rf:{job}:queued   (zset task_id -> queued since ms)
  KEYS[6] task set         rf:{job}:tasks

  ARGV[1] worker id
  ARGV[2] lease length in ms

  Returns {code, data, events}
     1  claimed; data = {task = the task's fields after the claim,
                         job = the job's fields}
    -1  no such task
    -2  not claimable; data = status, owner, lease_until
    -4  the job has finished; the task is marked cancelled

  Events: task.claimed; on takeover also task.requeued or task.dead/job.failed.
]]
--- @include "common"
--- @include "failAttempt"

local taskKey, jobKey, stream, leasesKey, queuedKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local worker, leaseMs = ARGV[1], tonumber(ARGV[2])

-- Read everything once: the reply is built from these maps, not read again.
local task = hashToMap(redis.call('HGETALL', taskKey))
local status, taskId = task['status'], task['task_id']
if not status then return reply(-1) end
local now = nowMs()

local jobStatus = redis.call('HGET', jobKey, 'status')
if isTerminalJob(jobStatus) then
  if status == 'queued' or status == 'claimed' or status == 'waiting' then
    cancelTask(taskKey, jobKey, leasesKey, queuedKey, taskId, now)
  end
  return reply(-4, {job_status = jobStatus})
end

local leaseLeft = tonumber(task['lease_until']) - now
if status == 'claimed' and task['owner'] == worker and leaseLeft > 0 then
  return reply(1, {task = task, job = hashToMap(redis.call('HGETALL', jobKey))})
end

if status == 'claimed' and leaseLeft <= 0 then
  local outcome = failAttempt('lease expired (owner ' .. task['owner'] .. ')', now, false)
  if outcome ~= 'requeued' then
    return reply(-2, {status = outcome, owner = '', lease_until = 0})
  end
  task = hashToMap(redis.call('HGETALL', taskKey))
  status = 'queued'
end

if status ~= 'queued' then
  return reply(-2, {status = status, owner = task['owner'], lease_until = task['lease_until']})
end

local leaseUntil = now + leaseMs
local token = tonumber(task['token']) + 1
redis.call('HSET', taskKey, 'status', 'claimed', 'owner', worker, 'lease_until', leaseUntil,
  'claimed_ms', now, 'token', token)
redis.call('ZADD', leasesKey, leaseUntil, taskId)
redis.call('ZREM', queuedKey, taskId)
local job = hashToMap(redis.call('HGETALL', jobKey))
if jobStatus == 'queued' then
  redis.call('HSET', jobKey, 'status', 'running', 'started_ms', now)
  job['status'] = 'running'
end
task['status'], task['owner'], task['lease_until'] = 'claimed', worker, leaseUntil
task['claimed_ms'], task['token'] = now, token
emit(stream, tonumber(job['stream_maxlen'] or '10000'), {'event', 'task.claimed',
  'task_id', taskId, 'worker', worker, 'token', token, 'lease_until', leaseUntil,
  'attempt', task['attempt']})
return reply(1, {task = task, job = job})
