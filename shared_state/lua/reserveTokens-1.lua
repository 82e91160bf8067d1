--[[
  reserveTokens: reserve tokens from a job's budget before a model call.

  Every call of every worker and subagent of a job reserves here, atomically,
  before it is sent; a call that would overrun the budget is refused, so the
  budget is never overspent however many processes call at once. After the
  call, settleTokens replaces the reservation with what was really used.

  Each reservation has an id chosen by the caller and is kept in the budget
  hash as `r:<id>` = "<tokens> <expires at ms>". A reservation re-sent with
  the same id (a retry after a lost reply) is not counted twice. One whose
  caller never settled it (the worker died mid-call) is dropped once it
  expires, by the next reservation of the job, so the budget cannot leak.
  Looking for those reads the whole hash (every call in flight), so it is
  done only once `sweep_at` has passed: no later than the earliest expiry
  of the reservations held (a settle leaves it as it was, early at worst),
  set anew by each sweep. A reservation is then O(1) however many calls of
  the job are in flight, and an expired one is still dropped on time.

  The same for money, where the job has a budget in USD: each call reserves
  its cost at its route's prices (micro-dollars: limit_usd, used_usd,
  reserved_usd), and is refused when either budget would be overrun.

  A tenant's daily money budget is the same hash under the tenant's key,
  reserved from in the same round trip (ARGV[5] = 'day'): what it used is
  counted from 0 again on the first reservation or settlement of each day
  (UTC, on Redis time); reservations held over midnight are settled into the
  new day.

  KEYS[1] budget hash      rf:{job}:budget   (limit, used, reserved, limit_usd, used_usd,
                                              reserved_usd, sweep_at, r:<id>; a limit 0 =
                                              none),
                           or rf:spend:{tenant} (the same, and day)

  ARGV[1] reservation id
  ARGV[2] tokens to reserve
  ARGV[3] ms after which an unsettled reservation is dropped
  ARGV[4] micro-dollars to reserve (its cost at the route's prices; 0: none)
  ARGV[5] 'day' for a tenant's daily budget, else absent

  Returns {code, data, events}
     1  reserved (or already reserved under this id); data = limit, used, reserved
    -5  over budget; data = limit, used, reserved, remaining, which ('tokens' or 'usd')
]]
--- @include "common"

local key, field = KEYS[1], 'r:' .. ARGV[1]
local want, ttl, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4] or 0)

local function current()
  local b = redis.call('HMGET', key, 'limit', 'used', 'reserved')
  return tonumber(b[1] or '0'), tonumber(b[2] or '0'), tonumber(b[3] or '0')
end

if redis.call('HEXISTS', key, field) == 1 then
  local limit, used, reserved = current()
  return reply(1, {limit = limit, used = used, reserved = reserved})
end

local now = nowMs()
if ARGV[5] == 'day' then
  local day = tostring(math.floor(now / 86400000))
  if redis.call('HGET', key, 'day') ~= day then
    redis.call('HSET', key, 'day', day, 'used', 0, 'used_usd', 0)
  end
end
-- Drop the reservations of calls that can no longer be settled, once one may have expired.
local sweepAt = tonumber(redis.call('HGET', key, 'sweep_at') or '0')
if sweepAt <= now then
  local all, earliest = redis.call('HGETALL', key), nil
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'r:' then
      local tokens, expires, held = string.match(all[i + 1], '^(%d+) (%d+) ?(%d*)$')
      expires = tonumber(expires)
      if expires <= now then
        redis.call('HINCRBY', key, 'reserved', 0 - tonumber(tokens))  -- never "-0"
        if held ~= '' and tonumber(held) > 0 then
          redis.call('HINCRBY', key, 'reserved_usd', 0 - tonumber(held))
        end
        redis.call('HDEL', key, all[i])
      elseif not earliest or expires < earliest then
        earliest = expires
      end
    end
  end
  sweepAt = earliest or (now + ttl)
  redis.call('HSET', key, 'sweep_at', sweepAt)  -- kept even if this call is refused
end

local limit, used, reserved = current()
if limit > 0 and used + reserved + want > limit then
  return reply(-5, {limit = limit, used = used, reserved = reserved,
    remaining = limit - used - reserved, which = 'tokens'})
end
local m = redis.call('HMGET', key, 'limit_usd', 'used_usd', 'reserved_usd')
local limitUsd, usedUsd, reservedUsd = tonumber(m[1] or 0), tonumber(m[2] or 0), tonumber(m[3] or 0)
if limitUsd > 0 and usedUsd + reservedUsd + cost > limitUsd then
  return reply(-5, {limit = limitUsd, used = usedUsd, reserved = reservedUsd,
    remaining = limitUsd - usedUsd - reservedUsd, which = 'usd'})
end
reserved = redis.call('HINCRBY', key, 'reserved', want)
redis.call('HINCRBY', key, 'reserved_usd', cost)
redis.call('HSET', key, field, want .. ' ' .. (now + ttl) .. ' ' .. cost)
if now + ttl < sweepAt then redis.call('HSET', key, 'sweep_at', now + ttl) end
return reply(1, {limit = limit, used = used, reserved = reserved})
