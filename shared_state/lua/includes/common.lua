--[[
  Helpers shared by every script (inlined by the loader at `--- @include`).

  emit(stream, maxlen, fields)  XADD an event to the job stream (capped with
                                MAXLEN ~) and remember it for the reply, so the
                                caller can mirror it to the global stream.
  nowMs()                       Redis server time in milliseconds: leases never
                                depend on a worker's clock.
  reply(code, data)             {code, data, emitted}: the shape every script
                                returns; data is a flat field/value list.
]]
local emitted = {}

local function emit(stream, maxlen, fields)
  local id = redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', unpack(fields))
  local entry = {id}
  for i = 1, #fields do entry[#entry + 1] = fields[i] end
  emitted[#emitted + 1] = entry
  return id
end

local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function reply(code, data)
  return {code, data or {}, emitted}
end

local function jobMaxlen(jobKey)
  return tonumber(redis.call('HGET', jobKey, 'stream_maxlen') or '10000')
end

local function isTerminalJob(status)
  return status == 'succeeded' or status == 'failed' or status == 'cancelled'
end
