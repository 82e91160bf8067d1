--[[
  settleTokens: replace a reservation with the tokens a call really used.

  Idempotent per reservation id: the reservation is removed as it is
  settled, so a settle re-sent after a lost reply (or one for a reservation
  already dropped as expired) changes nothing.

  A tenant's daily budget (a hash with a `day`) starts the day again here too,
  as reserveTokens does: a call settled after midnight is the new day's.

  KEYS[1] budget hash      rf:{job}:budget (or a tenant's: rf:spend:{tenant})

  ARGV[1] reservation id (as given to reserveTokens)
  ARGV[2] tokens the call used (input + output)
  ARGV[3] what it cost, in micro-dollars, at the prices of the route that answered

  Returns {code, data, events}
     1  data = limit, used, reserved, settled (1 when this call settled it, else 0)
]]
--- @include "common"

local key, field = KEYS[1], 'r:' .. ARGV[1]
local day = redis.call('HGET', key, 'day')
if day then
  local today = tostring(math.floor(nowMs() / 86400000))
  if day ~= today then redis.call('HSET', key, 'day', today, 'used', 0, 'used_usd', 0) end
end
local held = redis.call('HGET', key, field)
local settled = false
if held then
  local tokens, _, cost = string.match(held, '^(%d+) (%d+) ?(%d*)$')
  redis.call('HINCRBY', key, 'reserved', 0 - tonumber(tokens))  -- never "-0"
  redis.call('HINCRBY', key, 'used', tonumber(ARGV[2]))
  -- (Lua writes minus zero as "-0", which HINCRBY refuses: nothing to give back then.)
  if cost ~= '' and tonumber(cost) > 0 then
    redis.call('HINCRBY', key, 'reserved_usd', 0 - tonumber(cost))
  end
  redis.call('HINCRBY', key, 'used_usd', tonumber(ARGV[3] or 0))
  redis.call('HDEL', key, field)
  settled = true
end
local b = redis.call('HMGET', key, 'limit', 'used', 'reserved')
return reply(1, {limit = tonumber(b[1] or '0'), used = tonumber(b[2] or '0'),
  reserved = tonumber(b[3] or '0'), settled = settled})
