--[[
  admitCall: let one model call through its route's shared limits, or say how
  long to wait — for every worker process of the fleet at once.

  A route is a provider's model at one endpoint. Its limits are requests and
  tokens per minute (token buckets refilled on Redis time, each holding
  BURST_S seconds' worth, a new route full) and calls at once (each admitted
  call holds a slot until it settles, or until its lease runs out: a caller
  that died gives its slot back). A route the provider told to slow down (a
  429 or an overload, settleCall) admits nothing until its cool-down ends.

  Waiting is fair between tenants and ordered by priority: each caller takes
  a ticket when it first asks, in its priority's band (0-9, higher first),
  stamped with its tenant's virtual time — the later of the route's and the
  tenant's own last stamp, plus 1/weight — so that tenants of weights 1 and
  3 go 1:3 however many calls each has waiting, and a burst of one tenant
  cannot starve another's single call (weighted fair queueing). Only the
  lowest ticket may go; the others are told to come back about when their
  turn will be (their place times the time one call's worth takes to
  refill), never sooner than asked and never later than MAX_WAIT_MS, so they
  do not spin, and a waiter that stopped asking (a dead process) loses its
  ticket after STALE_MS. The virtual clocks start again whenever no call
  waits. A tenant at its cap of calls at once is told to wait and gives its
  ticket up, so that it blocks no other tenant.

  KEYS[1] the route's hash       rf:route:{<route>}   limits, buckets, cool-down, counters
  KEYS[2] calls in flight        rf:route:{<route>}:inflight   call id -> lease end (ms)
  KEYS[3] tickets                rf:route:{<route>}:waiting    call id -> first asked (ms)
  KEYS[4] last asked             rf:route:{<route>}:asked      call id -> last asked (ms)
  KEYS[5] virtual clocks         rf:route:{<route>}:vclock     'now', each tenant's, and
                                 when each waiting call first asked

  ARGV[1] call id: "<tenant>|<id>" (chosen by the caller: a re-sent ask is not counted
          twice; its tenant's calls in flight are counted by it)
  ARGV[2] the call's tokens, estimated (input and the output it may write)
  ARGV[3] ms an admitted call may hold its slot before it is given back
  ARGV[4] the tenant's weight (>= 1)    ARGV[5] the job's priority (0-9)
  ARGV[6] the tenant's cap of calls at once on the route (0: none)

  Returns {code, data, events} (no events)
     1  admitted; data = waited_ms (since its first ask)
     2  not yet; data = wait_ms (when to ask again), due_ms (about when its turn
        comes: a cool-down's whole length; a caller with less time left gives up
        now), why ('cooling', 'queued', 'concurrency', 'tenant cap', 'requests' or
        'tokens'), place (0 first)
]]
--- @include "common"

local BURST_S, MAX_WAIT_MS, STALE_MS = 10, 2000, 10000
local route, inflight, waiting, asked, vclock = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, want, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local weight, priority, cap = math.max(1, tonumber(ARGV[4])), tonumber(ARGV[5]), tonumber(ARGV[6])
local tenant = string.match(id, '^(.*)|') or ''
local now = nowMs()

if redis.call('ZSCORE', inflight, id) then
  return reply(1, {waited_ms = 0})  -- admitted already: a re-sent ask
end
-- Calls whose lease ended (their process died) give their slot back, and their tenant's.
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', inflight, '-inf', now)) do
  redis.call('ZREM', inflight, gone)
  redis.call('HINCRBY', route, 'in:' .. (string.match(gone, '^(.*)|') or ''), -1)
end
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', asked, '-inf', now - STALE_MS)) do
  redis.call('ZREM', waiting, gone)
  redis.call('ZREM', asked, gone)
  redis.call('HDEL', vclock, 'since:' .. gone)
end
if cap > 0 and tonumber(redis.call('HGET', route, 'in:' .. tenant) or 0) >= cap then
  redis.call('ZREM', waiting, id)
  redis.call('ZREM', asked, id)
  return reply(2, {wait_ms = 100, due_ms = 100, why = 'tenant cap', place = 0})
end
if not redis.call('ZSCORE', waiting, id) then
  if redis.call('ZCARD', waiting) == 0 then redis.call('DEL', vclock) end
  local v = redis.call('HMGET', vclock, 'now', 'v:' .. tenant)
  local stamp = math.max(tonumber(v[1]) or 0, tonumber(v[2]) or 0) + 1 / weight
  redis.call('HSET', vclock, 'v:' .. tenant, stamp)
  redis.call('ZADD', waiting, (9 - priority) * 1e9 + stamp, id)
  redis.call('HSET', vclock, 'since:' .. id, now)
end
redis.call('ZADD', asked, now, id)

local c = redis.call('HMGET', route, 'rpm', 'tpm', 'concurrency', 'cool_until', 'req', 'req_at',
  'tok', 'tok_at')
local rpm, tpm, slots = tonumber(c[1]) or 0, tonumber(c[2]) or 0, tonumber(c[3]) or 0
local coolUntil = tonumber(c[4]) or 0

-- A bucket's level now: what it held, refilled since, up to its capacity.
local function level(held, at, limit)
  local cap = math.max(1, limit * BURST_S / 60)
  if not held then return cap, cap end
  return math.min(cap, tonumber(held) + (now - tonumber(at)) * limit / 60000), cap
end
local req, reqCap, tok, tokCap
if rpm > 0 then req, reqCap = level(c[5], c[6], rpm) end
if tpm > 0 then tok, tokCap = level(c[7], c[8], tpm) end

-- How long the oldest ticket must still wait, and why (0: it may go now).
local wait, why = 0, ''
if coolUntil > now then
  wait, why = coolUntil - now, 'cooling'
elseif slots > 0 and redis.call('ZCARD', inflight) >= slots then
  wait, why = 50, 'concurrency'  -- a slot frees when a call settles: ask again soon
elseif req and req < 1 then
  wait, why = math.ceil((1 - req) * 60000 / rpm), 'requests'
elseif tok and tok < math.min(want, tokCap) then
  wait, why = math.ceil((math.min(want, tokCap) - tok) * 60000 / tpm), 'tokens'
end

local place = redis.call('ZRANK', waiting, id)
if place > 0 or wait > 0 then
  -- Behind the head: about when this one's turn comes.
  local step = 0
  if rpm > 0 then step = 60000 / rpm end
  if tpm > 0 then step = math.max(step, want * 60000 / tpm) end
  if slots > 0 then step = math.max(step, 50 / slots) end
  local due = wait + place * step
  if place > 0 and why == '' then why = 'queued' end
  return reply(2, {wait_ms = math.max(5, math.min(MAX_WAIT_MS, math.ceil(due))),
    due_ms = math.ceil(due), why = why, place = place})
end

if req then redis.call('HSET', route, 'req', req - 1, 'req_at', now) end
if tok then redis.call('HSET', route, 'tok', tok - want, 'tok_at', now) end
redis.call('ZADD', inflight, now + lease, id)
redis.call('HINCRBY', route, 'in:' .. tenant, 1)
local stamp = tonumber(redis.call('ZSCORE', waiting, id)) % 1e9
local vnow = tonumber(redis.call('HGET', vclock, 'now') or 0)
if stamp > vnow then redis.call('HSET', vclock, 'now', stamp) end
redis.call('ZREM', waiting, id)
redis.call('ZREM', asked, id)
local first = redis.call('HGET', vclock, 'since:' .. id) or now
redis.call('HDEL', vclock, 'since:' .. id)
redis.call('HINCRBY', route, 'admitted', 1)
redis.call('HINCRBY', route, 'admitted:' .. tenant, 1)
local waited = now - tonumber(first)
if waited > 0 then
  redis.call('HINCRBY', route, 'waited_ms', waited)
  redis.call('HINCRBY', route, 'waits', 1)
end
return reply(1, {waited_ms = waited})
