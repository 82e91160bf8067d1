--[[
  Helpers shared by every script (inlined by the loader at `--- @include`).

  emit(stream, maxlen, fields)  XADD an event to the job stream (capped with
                                MAXLEN ~) and remember it for the reply, so the
                                caller can mirror it to the global stream.
  nowMs()                       Redis server time in milliseconds: leases never
                                depend on a worker's clock. Read once per script:
                                every decision of one call sees the same instant.
  nowUs()                       the same instant in microseconds (fencing tokens).
  sameJob()                     nil when every key in KEYS carries the hash tag of
                                KEYS[1] (one job's keys), else an error reply: a
                                caller cannot make a job's script write elsewhere.
  reply(code, data)             {code, data, events}: the shape every script
                                returns, all of it plain RESP (nothing to
                                encode here or decode in the client). data
                                is a flat name/value list; a value is a
                                string, an integer (booleans as 1/0) or a
                                hash as HGETALL returns it, passed through.
                                events: one list per event, its stream id
                                first, then its field/value pairs.
  readJob(jobKey)               the job fields scripts decide by, in one read:
                                status, maxlen, retention, maxAttempts; as the
                                strings they are stored as (maxlen and retention
                                only go back to Redis, as XADD's and PEXPIRE's
                                arguments, where a Lua number is formatted again
                                each time: that and the tonumber cost a few
                                thousand instructions an argument; maxAttempts is
                                compared, by tonumber).
  expireTask / expireJob        start the retention clock of a finished task,
                                or of a finished job's own keys.
  cancelTask                    end a task of a finished job (status cancelled).
  endIfJobFinished              for an owner's write: if the job has finished, end
                                the task with it and return the -4 reply.
]]
local emitted = {}

local function emit(stream, maxlen, fields)
  local id = redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', unpack(fields))
  emitted[#emitted + 1] = {id, unpack(fields)}
end

local timeMs, timeUs

local function nowMs()
  if not timeMs then
    local t = redis.call('TIME')
    timeUs = tonumber(t[1]) * 1000000 + tonumber(t[2])
    timeMs = math.floor(timeUs / 1000)
  end
  return timeMs
end

local function nowUs()
  nowMs()
  return timeUs
end

local function sameJob()
  local tag = string.match(KEYS[1], '^[^{]*{[^}]*}:')
  if not tag then return redis.error_reply('KEYS[1] is not a key of a job: ' .. KEYS[1]) end
  for i = 2, #KEYS do
    if string.sub(KEYS[i], 1, #tag) ~= tag then
      return redis.error_reply('KEYS[' .. i .. '] is not a key of the job of KEYS[1]')
    end
  end
  return nil
end

local function reply(code, data)
  local flat = {}
  for name, value in pairs(data or {}) do
    -- false would reach the client as a null, true as 1: say both as integers.
    if value == true then value = 1 elseif value == false then value = 0 end
    flat[#flat + 1] = name
    flat[#flat + 1] = value
  end
  return {code, flat, emitted}
end

local function readJob(jobKey)
  local j = redis.call('HMGET', jobKey, 'status', 'stream_maxlen', 'retention_ms', 'max_attempts')
  return {status = j[1], maxlen = j[2] or '10000', retention = j[3] or '604800000',
    maxAttempts = j[4] or '3'}
end

local function isTerminalJob(status)
  return status == 'succeeded' or status == 'failed' or status == 'cancelled'
end

local function expireTask(taskKey, job)
  redis.call('PEXPIRE', taskKey, job.retention)
end

local function expireJob(job, jobKey, stream, leasesKey, queuedKey, tasksKey)
  for _, key in ipairs({jobKey, stream, leasesKey, queuedKey, tasksKey}) do
    redis.call('PEXPIRE', key, job.retention)
  end
end

local function cancelTask(taskKey, job, leasesKey, queuedKey, taskId, now)
  redis.call('HSET', taskKey, 'status', 'cancelled', 'owner', '', 'lease_until', 0,
    'finished_ms', now)
  redis.call('ZREM', leasesKey, taskId)
  if queuedKey then redis.call('ZREM', queuedKey, taskId) end
  expireTask(taskKey, job)
end

local function endIfJobFinished(taskKey, taskId, job, leasesKey, queuedKey)
  if not isTerminalJob(job.status) then return nil end
  cancelTask(taskKey, job, leasesKey, queuedKey, taskId, nowMs())
  return reply(-4, {job_status = job.status})
end
