--[[
  settleTokens: replace a reservation with the tokens a call really used.

  KEYS[1] budget hash      rf:{job}:budget

  ARGV[1] tokens reserved for the call
  ARGV[2] tokens the call used (input + output)

  Returns {code, data, events}
     1  data = limit, used, reserved
]]
--- @include "common"

local reserved = redis.call('HINCRBY', KEYS[1], 'reserved', -tonumber(ARGV[1]))
local used = redis.call('HINCRBY', KEYS[1], 'used', tonumber(ARGV[2]))
local limit = tonumber(redis.call('HGET', KEYS[1], 'limit') or '0')
return reply(1, {limit = limit, used = used, reserved = reserved})
