--[[
  reserveTokens: reserve tokens from a job's budget before a model call.

  Every call of every worker and subagent of a job reserves here, atomically,
  before it is sent; a call that would overrun the budget is refused, so the
  budget is never overspent however many processes call at once. After the
  call, settleTokens replaces the reservation with what was really used.

  KEYS[1] budget hash      rf:{job}:budget   (limit, used, reserved; limit 0 = none)

  ARGV[1] tokens to reserve

  Returns {code, data, events}
     1  reserved; data = limit, used, reserved
    -5  over budget; data = limit, used, reserved, remaining
]]
--- @include "common"

local b = redis.call('HMGET', KEYS[1], 'limit', 'used', 'reserved')
local limit, used, reserved = tonumber(b[1] or '0'), tonumber(b[2] or '0'), tonumber(b[3] or '0')
local want = tonumber(ARGV[1])
if limit > 0 and used + reserved + want > limit then
  return reply(-5, {limit = limit, used = used, reserved = reserved,
    remaining = limit - used - reserved})
end
reserved = redis.call('HINCRBY', KEYS[1], 'reserved', want)
return reply(1, {limit = limit, used = used, reserved = reserved})
