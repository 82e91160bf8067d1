--[[
  claimTask: take ownership of a task (compare-and-set) and start its lease.

  Succeeds only when the task is `queued` and due (a retry's `not_before`
  has passed), or `claimed` with a lease that has expired by Redis time (the
  old attempt is then ended first, as the reaper would: attempt + 1 after
  the lost worker's backoff, or dead at max attempts). Each success raises the
  task's fencing token above both its last token and the Redis time in
  microseconds, so a token never repeats even after lost writes rewound the
  task's hash; every later write by the owner must carry it and its worker id.
  Idempotent for its owner: a claim re-sent by the same worker (a client
  retry after a lost reply) while its lease is live returns the same claim,
  its lease counted again from now.

  A claim may open its run too (ARGV[7]): the records a run starts from come
  back with it — its checkpoint, its own journal entries, its input's text and
  whether the job has a budget — so that starting a run is one round trip, not
  a claim and then a read.

  KEYS[1] task hash        rf:{job}:task:<task_id>
  KEYS[2] job hash         rf:{job}:job
  KEYS[3] job event stream rf:{job}:events
  KEYS[4] lease index      rf:{job}:leases   (zset task_id -> lease deadline ms)
  KEYS[5] queued index     rf:{job}:queued   (zset task_id -> queued since ms)
  KEYS[6] task set         rf:{job}:tasks
  KEYS[7] retries index    rf:{job}:retries  (zset task_id -> due ms)
  KEYS[8] checkpoints      rf:{job}:checkpoints (hash task_id -> its last checkpoint)
  KEYS[9] journal          rf:{job}:journal  (hash "<task_id>:<target>:<stage>" -> entry)
  The journal's names, rf:{job}:journal:names, are KEYS[9]'s with ':names' (``journalOf``).
  The input artifact's hash, rf:{job}:artifact:<input>, is named from the task's
  `input`, and the budget hash, rf:{job}:budget, from the job's tag (the same
  slot as KEYS).

  ARGV[1] worker id
  ARGV[2] lease length in ms
  ARGV[3] '1' to have the job's fields in the reply (a caller that has not
          seen the job yet), else ''
  ARGV[4..6] the backoff of a retry after taking over an expired lease: base
          ms, cap ms, jitter in [0, 1) (failAttempt)
  ARGV[7] '1' to open the run: the reply carries its records (below), else ''

  Returns {code, data, events}
     1  claimed; data = task (the task's hash after the claim), resumes (the
        job's resume count), and job (the job's hash) when asked for; when
        the run is opened, journal (the task's entries, as HGETALL gives
        them), checkpoint (absent: none), input (its input artifact's
        content; absent: no input, or one a forget redacted to a copy) and
        budgeted (1 if the job has a token or money budget: its calls reserve
        from it; set only at submit and at a retry, which claims see anew)
    -1  no such task
    -2  not claimable; data = status, owner, lease_until, not_before (a retry
        not yet due: the reaper delivers it then)
    -4  the job has finished; the task (queued, waiting, or claimed with an
        expired lease or by this worker) is marked cancelled
    error  a key in KEYS belongs to another job

  Events: task.claimed; on takeover also task.requeued or task.dead/job.failed.
]]
--- @include "common"
--- @include "journal"
--- @include "failAttempt"

local taskKey, jobKey, stream, leasesKey, queuedKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local worker, leaseMs, withJob = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local opening = ARGV[7] == '1'

-- Only what the decision needs is read first: most refused claims (duplicate
-- deliveries, racing workers) end after one small read and TIME.
local function row()
  return redis.call('HMGET', taskKey, 'status', 'owner', 'lease_until', 'task_id', 'token',
    'attempt', 'role', 'not_before')
end

-- The run's records, into ``data``: its checkpoint, its own journal entries (by their
-- names: ``journalOf``), its input's text and whether the job has a budget.
local function open(data, task, taskId)
  data.checkpoint = redis.call('HGET', KEYS[8], taskId) or nil
  data.journal = journalOf(KEYS[9], taskId)
  local tag = string.match(KEYS[2], '^([^{]*{[^}]*}:)job$')
  for i = 1, #task, 2 do
    if task[i] == 'input' and task[i + 1] ~= '' then
      local a = redis.call('HMGET', tag .. 'artifact:' .. task[i + 1], 'content', 'redacted_to')
      if a[1] and not a[2] then data.input = a[1] end
    end
  end
  local limits = redis.call('HMGET', tag .. 'budget', 'limit', 'limit_usd')
  data.budgeted = tonumber(limits[1] or '0') > 0 or tonumber(limits[2] or '0') > 0
end

local function claimed(taskId)
  local job = withJob and redis.call('HGETALL', jobKey) or nil
  -- Always: a resumed job has a new spec (goal, constraints), and a worker that
  -- kept the old one must know to read it again.
  local round = tonumber(redis.call('HGET', jobKey, 'resumes') or '0')
  local task = redis.call('HGETALL', taskKey)
  local data = {task = task, job = job, resumes = round}
  if opening then open(data, task, taskId) end
  return reply(1, data)
end

local wrong = sameJob()
if wrong then return wrong end
local t = row()
local status, owner, taskId = t[1], t[2], t[4]
if not status then return reply(-1) end

local function refuse()
  return reply(-2, {status = status, owner = owner, lease_until = t[3],
    not_before = t[8] or 0})
end

if status ~= 'queued' and status ~= 'claimed' and status ~= 'waiting' then return refuse() end

local now = nowMs()
local leaseLeft = tonumber(t[3]) - now
if status == 'claimed' and leaseLeft > 0 and owner ~= worker then
  -- Another worker's live claim; should the job have finished, that worker's
  -- next write finds out and ends the task.
  return refuse()
end

local job = readJob(jobKey)
if isTerminalJob(job.status) then
  cancelTask(taskKey, job, leasesKey, queuedKey, taskId, now)
  return reply(-4, {job_status = job.status})
end
if status == 'waiting' then return refuse() end
if status == 'queued' and tonumber(t[8] or '0') > now then return refuse() end

if status == 'claimed' then
  if leaseLeft > 0 then
    -- The owner's own claim, re-sent (a retry after a lost reply, or a duplicate
    -- delivery to the same worker): the same token, and a lease counted from now,
    -- as the caller counts it.
    local leaseUntil = now + leaseMs
    redis.call('HSET', taskKey, 'lease_until', leaseUntil)
    redis.call('ZADD', leasesKey, leaseUntil, taskId)
    return claimed(taskId)
  end
  local outcome, delay = failAttempt('lease expired (owner ' .. owner .. ')', now, false, job,
    backoffArgs(4))
  if outcome ~= 'requeued' or delay > 0 then
    return reply(-2, {status = outcome == 'requeued' and 'queued' or outcome, owner = '',
      lease_until = 0, not_before = now + (delay or 0)})
  end
  t = row()
end

local leaseUntil = now + leaseMs
-- Above the last token and at least Redis time in microseconds: a hash rewound by lost
-- writes (a rollback, a failover) cannot hand out a token it handed out before, since
-- the clock has moved on since then. (2^53 us is the year 2255: exact in a Lua number.)
local token = math.max(tonumber(t[5]) + 1, nowUs())
redis.call('HSET', taskKey, 'status', 'claimed', 'owner', worker, 'lease_until', leaseUntil,
  'claimed_ms', now, 'token', token)
redis.call('ZADD', leasesKey, leaseUntil, taskId)
redis.call('ZREM', queuedKey, taskId)
redis.call('ZREM', KEYS[7], taskId)  -- a retry taken up, by its due delivery or another
if job.status == 'queued' then
  redis.call('HSET', jobKey, 'status', 'running', 'started_ms', now)
end
emit(stream, job.maxlen, {'event', 'task.claimed', 'task_id', taskId, 'role', t[7],
  'worker', worker, 'token', token, 'lease_until', leaseUntil, 'attempt', t[6]})
return claimed(taskId)
