--[[
  ownerRow(taskKey, ...)  HMGET of the task's status, token, task_id, owner,
                          then the extra fields named: what an owner's write
                          decides by, read once.
  fence(t, job, stream, token, worker, op)
                          check that the caller still owns the task of row
                          `t` with this fencing token. Returns nil when it
                          does. Otherwise records a task.fenced event (with
                          the stale and the current token) and returns the
                          reply for code -3 (FENCED), or -1 (NOT_FOUND) when
                          the task does not exist.
  ownedTask(token, worker, op, ...)
                          the start of an owner's write that goes on only
                          while the job runs: ownerRow (with the extra
                          fields), readJob, fence, then endIfJobFinished, on
                          the standard task KEYS (task, job, events, leases,
                          and queued if given). Returns the reply that ends
                          the script (nil to go on), the row and the job.
]]
local function ownerRow(taskKey, ...)
  return redis.call('HMGET', taskKey, 'status', 'token', 'task_id', 'owner', ...)
end

local function fence(t, job, stream, token, worker, op)
  if not t[1] then return reply(-1) end
  if t[1] == 'claimed' and t[2] == token then return nil end
  emit(stream, job.maxlen, {'event', 'task.fenced', 'task_id', t[3], 'worker', worker,
    'token', token, 'current_token', t[2], 'status', t[1], 'op', op})
  return reply(-3, {status = t[1], token = t[2], owner = t[4]})
end

local function ownedTask(token, worker, op, ...)
  local t = ownerRow(KEYS[1], ...)
  local job = readJob(KEYS[2])
  local refused = fence(t, job, KEYS[3], token, worker, op)
    or endIfJobFinished(KEYS[1], t[3], job, KEYS[4], KEYS[5])
  return refused, t, job
end
