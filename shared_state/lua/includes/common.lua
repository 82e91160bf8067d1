--[[
  Helpers shared by every script (inlined by the loader at `--- @include`).

  emit(stream, maxlen, fields)  XADD an event to the job stream (capped with
                                MAXLEN ~) and remember it for the reply, so the
                                caller can mirror it to the global stream.
  nowMs()                       Redis server time in milliseconds: leases never
                                depend on a worker's clock.
  reply(code, data)             {code, json(data), json(events)}: the shape
                                every script returns. JSON keeps the reply
                                three elements long, cheap for clients to parse.
  expireTask / expireJob        start the retention clock of a finished task,
                                or of a finished job's own keys.
  cancelTask                    end a task of a finished job (status cancelled).
  endIfJobFinished              for an owner's write: if the job has finished, end
                                the task with it and return the -4 reply.
]]
local emitted = {}

local function emit(stream, maxlen, fields)
  local id = redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', unpack(fields))
  local entry = {id = id}
  for i = 1, #fields, 2 do entry[fields[i]] = fields[i + 1] end
  emitted[#emitted + 1] = entry
  return id
end

local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function reply(code, data)
  return {code, cjson.encode(data or {}), cjson.encode(emitted)}
end

local function jobMaxlen(jobKey)
  return tonumber(redis.call('HGET', jobKey, 'stream_maxlen') or '10000')
end

local function isTerminalJob(status)
  return status == 'succeeded' or status == 'failed' or status == 'cancelled'
end

local function retentionMs(jobKey)
  return tonumber(redis.call('HGET', jobKey, 'retention_ms') or '604800000')
end

local function expireTask(taskKey, jobKey)
  redis.call('PEXPIRE', taskKey, retentionMs(jobKey))
end

local function expireJob(jobKey, stream, leasesKey, queuedKey, tasksKey)
  local ms = retentionMs(jobKey)
  for _, key in ipairs({jobKey, stream, leasesKey, queuedKey, tasksKey}) do
    redis.call('PEXPIRE', key, ms)
  end
end

local function hashToMap(flat)
  local map = {}
  for i = 1, #flat, 2 do map[flat[i]] = flat[i + 1] end
  return map
end

local function cancelTask(taskKey, jobKey, leasesKey, queuedKey, taskId, now)
  redis.call('HSET', taskKey, 'status', 'cancelled', 'owner', '', 'lease_until', 0,
    'finished_ms', now)
  redis.call('ZREM', leasesKey, taskId)
  if queuedKey then redis.call('ZREM', queuedKey, taskId) end
  expireTask(taskKey, jobKey)
end

local function endIfJobFinished(taskKey, jobKey, leasesKey, queuedKey)
  local jobStatus = redis.call('HGET', jobKey, 'status')
  if not isTerminalJob(jobStatus) then return nil end
  cancelTask(taskKey, jobKey, leasesKey, queuedKey, redis.call('HGET', taskKey, 'task_id'), nowMs())
  return reply(-4, {job_status = jobStatus})
end
