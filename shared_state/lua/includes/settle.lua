--[[
  settleHeld(key, id, used, cost)
                          replace the reservation `r:<id>` in the budget hash
                          `key` with what the call used: its tokens give back
                          what they held and count `used`; its money, `cost`
                          micro-dollars. True when this call settled it; false
                          when there was nothing held (settled already, or
                          dropped as expired): a settle re-sent changes nothing.
]]
local function settleHeld(key, id, used, cost)
  local field = 'r:' .. id
  local held = redis.call('HGET', key, field)
  if not held then return false end
  local tokens, _, heldUsd = string.match(held, '^(%d+) (%d+) ?(%d*)$')
  redis.call('HINCRBY', key, 'reserved', 0 - tonumber(tokens))  -- never "-0"
  redis.call('HINCRBY', key, 'used', used)
  -- (Lua writes minus zero as "-0", which HINCRBY refuses: nothing to give back then.)
  if heldUsd ~= '' and tonumber(heldUsd) > 0 then
    redis.call('HINCRBY', key, 'reserved_usd', 0 - tonumber(heldUsd))
  end
  redis.call('HINCRBY', key, 'used_usd', cost)
  redis.call('HDEL', key, field)
  return true
end
