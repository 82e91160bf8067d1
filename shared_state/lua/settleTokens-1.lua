--[[
  settleTokens: replace a reservation with the tokens a call really used.

  Idempotent per reservation id: the reservation is removed as it is
  settled, so a settle re-sent after a lost reply (or one for a reservation
  already dropped as expired) changes nothing. A call whose usage is
  recorded settles its job's reservation in recordUsage instead (the same
  step, `settleHeld`); this settles the rest: a tenant's day, a call that
  failed, a reservation given back unused.

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
--- @include "settle"

local key = KEYS[1]
local day = redis.call('HGET', key, 'day')
if day then
  local today = tostring(math.floor(nowMs() / 86400000))
  if day ~= today then redis.call('HSET', key, 'day', today, 'used', 0, 'used_usd', 0) end
end
local settled = settleHeld(key, ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3] or 0))
local b = redis.call('HMGET', key, 'limit', 'used', 'reserved')
return reply(1, {limit = tonumber(b[1] or '0'), used = tonumber(b[2] or '0'),
  reserved = tonumber(b[3] or '0'), settled = settled})
