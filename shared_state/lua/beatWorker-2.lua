--[[
  beatWorker: record a worker's heartbeat, stamped with Redis time.

  KEYS[1] worker hash      rf:{workers}:<worker_id>
  KEYS[2] worker index     rf:{workers}:index (zset worker id -> last heartbeat ms)

  ARGV[1] heartbeat ttl in ms (the hash expires if the worker stops beating)
  ARGV[2] worker id
  ARGV[3..] field/value pairs (pid, host, role, state, task_id, job_id)

  Returns {code, data, events}
     1  data = heartbeat_ms
]]
--- @include "common"

local now = nowMs()
redis.call('HSET', KEYS[1], 'heartbeat_ms', now, unpack(ARGV, 3))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], now, ARGV[2])
return reply(1, {heartbeat_ms = now})
