--[[
  ownerRow(taskKey, ...)  HMGET of the task's status, token, task_id, owner,
                          lease_until, then the extra fields named (t[6]...):
                          what an owner's write decides by, read once.
  fence(t, job, stream, token, worker, op)
                          check that the caller still owns the task of row
                          `t`: its worker id is the owner and its fencing
                          token the current one, and the lease has not run
                          out by Redis time. Returns nil when it
                          does. A retry of the owner's last write (the same
                          token, worker and op after that write ended the
                          claim: its reply was lost) gets that write's reply
                          again, from `ended`. Otherwise records a
                          task.fenced event (with the stale and the current
                          token) and returns the reply for code -3 (FENCED),
                          -4 (JOB_FINISHED) to the owner of a task its
                          job's end cancelled (endTasks keeps its owner and
                          token), or -1 (NOT_FOUND) when it does not exist.
  ended(token, worker, op, data)
                          record on the task that `op` by this token ended
                          the claim, with its reply data (flat strings), so
                          that a retry is answered by fence, not refused.
  ownedTask(token, worker, op, ...)
                          the start of an owner's write that goes on only
                          while the job runs: sameJob, ownerRow (with the
                          extra fields), readJob, fence, then
                          endIfJobFinished, on the standard task KEYS (task,
                          job, events, leases, and queued if given). Returns
                          the reply that ends the script (nil to go on), the
                          row and the job.
]]
local function ownerRow(taskKey, ...)
  return redis.call('HMGET', taskKey, 'status', 'token', 'task_id', 'owner', 'lease_until', ...)
end

local function replayed(token, worker, op)
  local e = redis.call('HMGET', KEYS[1], 'ended_token', 'ended_by', 'ended_op', 'ended_reply')
  if e[1] ~= token or e[2] ~= worker or e[3] ~= op then return nil end
  local data = {}
  for name, value in string.gmatch(e[4] or '', '([^\t]*)\t([^\t]*)\t') do data[name] = value end
  return reply(1, data)
end

local function ended(token, worker, op, data)
  local flat = {}
  for name, value in pairs(data) do
    if value == true then value = 1 elseif value == false then value = 0 end
    flat[#flat + 1] = name .. '\t' .. value .. '\t'
  end
  redis.call('HSET', KEYS[1], 'ended_token', token, 'ended_by', worker, 'ended_op', op,
    'ended_reply', table.concat(flat))
end

local function fence(t, job, stream, token, worker, op)
  if not t[1] then return reply(-1) end
  local status = t[1]
  -- Owner and token both: after acknowledged writes are lost (a power-loss rollback, an
  -- asynchronous replica promoted) a task's hash can rewind, and a claim then taken by
  -- another worker must not leave the first one's writes valid.
  if status == 'claimed' and t[2] == token and t[4] == worker then
    if tonumber(t[5]) > nowMs() then return nil end
    status = 'expired' -- still ours on paper, but a successor may take it any moment
  else
    local again = replayed(token, worker, op)
    if again then return again end
    if status == 'cancelled' and t[2] == token and t[4] == worker and isTerminalJob(job.status)
    then
      -- Its job ended while it ran (endTasks): told as such, not as a lost claim.
      return reply(-4, {job_status = job.status})
    end
  end
  emit(stream, job.maxlen, {'event', 'task.fenced', 'task_id', t[3], 'worker', worker,
    'token', token, 'current_token', t[2], 'status', status, 'op', op})
  return reply(-3, {status = status, token = t[2], owner = t[4]})
end

local function ownedTask(token, worker, op, ...)
  local wrong = sameJob()
  if wrong then return wrong end
  local t = ownerRow(KEYS[1], ...)
  local job = readJob(KEYS[2])
  local refused = fence(t, job, KEYS[3], token, worker, op)
    or endIfJobFinished(KEYS[1], t[3], job, KEYS[4], KEYS[5])
  return refused, t, job
end
