--[[
  settleTokens: replace a reservation with the tokens a call really used.

  Idempotent per reservation id: the reservation is removed as it is
  settled, so a settle re-sent after a lost reply (or one for a reservation
  already dropped as expired) changes nothing.

  KEYS[1] budget hash      rf:{job}:budget

  ARGV[1] reservation id (as given to reserveTokens)
  ARGV[2] tokens the call used (input + output)

  Returns {code, data, events}
     1  data = limit, used, reserved, settled (1 when this call settled it, else 0)
]]
--- @include "common"

local key, field = KEYS[1], 'r:' .. ARGV[1]
local held = redis.call('HGET', key, field)
local settled = false
if held then
  local tokens = tonumber(string.match(held, '^(%d+)'))
  redis.call('HINCRBY', key, 'reserved', -tokens)
  redis.call('HINCRBY', key, 'used', tonumber(ARGV[2]))
  redis.call('HDEL', key, field)
  settled = true
end
local b = redis.call('HMGET', key, 'limit', 'used', 'reserved')
return reply(1, {limit = tonumber(b[1] or '0'), used = tonumber(b[2] or '0'),
  reserved = tonumber(b[3] or '0'), settled = settled})
