--[[
  settleCall: end an admitted call on its route — give its slot back, charge
  the tokens it really used — and pass on what the provider said: a 429 or an
  overload cools the route down for the whole fleet (and empties its
  buckets); the rate-limit headers' remaining requests and tokens are kept
  to show; a failure to answer cools it for a backoff that grows
  with each failure in a row (the policy's base and cap, from the caller).

  KEYS[1] the route's hash    rf:route:{<route>}
  KEYS[2] calls in flight     rf:route:{<route>}:inflight
  KEYS[3] settled calls       rf:route:{<route>}:settled (the never admitted, for 10 min)

  ARGV[1] call id, "<tenant>|<id>" (a call the route never admitted, on an
          unlimited route, has an id of its settle's own)
  ARGV[2] tokens it was admitted for    ARGV[3] tokens it used
  ARGV[4] outcome: 'ok', 'limited' (429, 529: the provider asks to slow down)
          or 'failed' (no answer: a connection error, a 5xx)
  ARGV[5] the provider's Retry-After, ms ('limited'; 0: none given)
  ARGV[6] the backoff's base (ms)     ARGV[7] its cap (ms), which bounds a
          Retry-After too: a route is tried again at least that often
  ARGV[8] requests the provider says remain ('' not said)
  ARGV[9] tokens the provider says remain ('' not said)
  ARGV[10] '1': the call was admitted (it holds a slot in flight); '': not

  Idempotent per call id: a settle re-sent after a lost reply finds the call
  gone from the in-flight set (or, never admitted, its id among those
  settled) and changes nothing.

  Returns {code, data, events} (no events)
     1  data = settled (1, or 0: already settled), cool_until (ms, 0 none)
]]
--- @include "common"

local route, inflight, settled = KEYS[1], KEYS[2], KEYS[3]
local id, admitted, used, outcome = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local now = nowMs()
local SETTLED_MS = 600000

local function already()
  return reply(1, {settled = 0, cool_until = tonumber(redis.call('HGET', route, 'cool_until') or 0)})
end
if ARGV[10] == '1' then
  if redis.call('ZREM', inflight, id) == 0 then return already() end
  redis.call('HINCRBY', route, 'in:' .. (string.match(id, '^(.*)|') or ''), -1)
else
  redis.call('ZREMRANGEBYSCORE', settled, '-inf', now - SETTLED_MS)
  if redis.call('ZADD', settled, 'NX', now, id) == 0 then return already() end
end
local c = redis.call('HMGET', route, 'rpm', 'tpm', 'tok', 'cool_until')
local rpm, tpm = tonumber(c[1]) or 0, tonumber(c[2]) or 0
local coolUntil = tonumber(c[4]) or 0
if tpm > 0 and c[3] and admitted ~= used then
  -- The estimate was charged at admission: give back what was not used, or take the rest.
  redis.call('HINCRBYFLOAT', route, 'tok', admitted - used)
end

local function cool(ms, why)
  if now + ms > coolUntil then
    coolUntil = now + ms
    redis.call('HSET', route, 'cool_until', coolUntil, 'cool_why', why)
  end
end
if outcome == 'ok' then
  redis.call('HSET', route, 'failures', 0)
  redis.call('HINCRBY', route, 'ok', 1)
elseif outcome == 'limited' then
  redis.call('HINCRBY', route, 'limited', 1)
  local n = redis.call('HINCRBY', route, 'failures', 1)
  local ms = tonumber(ARGV[5])
  if ms <= 0 then ms = tonumber(ARGV[6]) * 2 ^ (n - 1) end
  cool(math.min(tonumber(ARGV[7]), ms), 'limited')
  -- The provider has nothing left now: the buckets start again empty.
  if rpm > 0 then redis.call('HSET', route, 'req', 0, 'req_at', coolUntil) end
  if tpm > 0 then redis.call('HSET', route, 'tok', 0, 'tok_at', coolUntil) end
else
  redis.call('HINCRBY', route, 'failed', 1)
  local n = redis.call('HINCRBY', route, 'failures', 1)
  cool(math.min(tonumber(ARGV[7]), tonumber(ARGV[6]) * 2 ^ (n - 1)), 'unavailable')
end
-- What the provider says is left, shown beside the limits (limits show).
if ARGV[8] ~= '' then redis.call('HSET', route, 'learned_requests', ARGV[8], 'learned_at', now) end
if ARGV[9] ~= '' then redis.call('HSET', route, 'learned_tokens', ARGV[9], 'learned_at', now) end
return reply(1, {settled = 1, cool_until = coolUntil})
