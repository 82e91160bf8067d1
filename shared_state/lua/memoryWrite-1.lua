--[[
  memoryWrite: store one version of a claim in a tenant's memory and settle
  its chain: authority first, then recency, history kept.

  Idempotent: the item id is chosen by the caller, and a write re-sent with
  the same id (a retry after a lost reply) finds the item and writes nothing.

  KEYS[1] the tenant's memory prefix   rf:mem:{tenant}:
          (item, chain, derived, seen, scope, user and jobitems keys are named from it)

  ARGV[1] item id           ARGV[2] scope        ARGV[3] claim key
  ARGV[4] text              ARGV[5] kind         ARGV[6] user ('' none)
  ARGV[7] source kind       ARGV[8] source ref   ARGV[9] job ('' none)
  ARGV[10] task ('' none)   ARGV[11] actor       ARGV[12] authority (0-4)
  ARGV[13] valid for (ms, 0: no expiry)          ARGV[14] reverify after (ms, 0: never)
  ARGV[15] digest of the claim (key and normalized text)
  ARGV[16] promoted from (item id, '' none)      ARGV[17] changes stream maxlen
  ARGV[18] the embedder of ARGV[19] ('' none)    ARGV[19] the item's vector (float32 bytes)
  ARGV[20 ..] ids of the items this one is derived from

  The chain of (scope, key) has at most one version that holds: marked
  current, unexpired, not shadowed. The new version holds when none does, or
  when its authority is at least that one's — or, in a user: scope, when the
  user of that scope says it (a person is the authority on themselves). A
  newer claim that does not win is kept as contested and the current one
  stays. When the new one wins, a temporary value (valid for a time) shadows
  the lasting one until it expires — which then holds again with no write —
  and supersedes any other; a lasting value supersedes every version marked
  current. A claim equal to the one that holds (same digest) adds no version
  (the job is counted as having seen it) unless the new source has more
  authority: then it is a new version that supersedes it.

  Shingles: the digests of a text's runs of n words (n = 1..6, ASCII letters
  and digits, lower-cased), tagged with n. An item keeps those of its own
  length (n = its word count, at most 6); a forget puts them in the fence. A
  write holding any fenced run (of any length), or derived from a forgotten
  item, is refused — unless the user says it again, which lifts the fence
  for those runs.

  Returns {code, data, events}
     1  data = id, status, version, observed_at, supersedes, existed, duplicate, seen
    -1  a parent in derived_from does not exist; data = what
    -7  forgotten; data = what ('text' or the parent's id)
]]
--- @include "common"
--- @include "forgotten"

local p, id = KEYS[1], ARGV[1]
local itemKey = p .. 'item:' .. id
local fence = p .. 'forgotten'

local known = redis.call('HMGET', itemKey, 'status', 'version', 'observed_at', 'supersedes')
if known[1] then
  return reply(1, {id = id, status = known[1], version = tonumber(known[2]),
    observed_at = tonumber(known[3]), supersedes = known[4] or '', existed = true})
end

local words = wordsOf(ARGV[4])
if fencedText(fence, words, ARGV[7] == 'user') then return reply(-7, {what = 'text'}) end
local parents = {}
for i = 20, #ARGV do
  local parent = ARGV[i]
  if redis.call('SISMEMBER', fence, 'id:' .. parent) == 1 then return reply(-7, {what = parent}) end
  if redis.call('EXISTS', p .. 'item:' .. parent) == 0 then return reply(-1, {what = parent}) end
  parents[#parents + 1] = parent
end

local now = nowMs()
local scope, key, job = ARGV[2], ARGV[3], ARGV[9]
local authority = tonumber(ARGV[12])
local seenKey = p .. 'seen:' .. ARGV[15]
if job ~= '' then redis.call('SADD', seenKey, job) end
local seen = redis.call('SCARD', seenKey)

local chainKey = p .. 'chain:' .. scope .. '|' .. key
local chain = redis.call('LRANGE', chainKey, 0, -1)
local changes, maxlen = p .. 'changes', tonumber(ARGV[17])
-- The version that holds now: marked current, unexpired and not shadowed. Others marked
-- current are expired temporary values, or the value a temporary one shadows (it holds
-- again once that one expires).
local current, cur
local marked = {}
for _, member in ipairs(chain) do
  local m = redis.call('HMGET', p .. 'item:' .. member, 'status', 'authority', 'valid_until', 'digest',
    'version', 'observed_at', 'shadowed_until')
  if m[1] == 'current' then
    marked[#marked + 1] = {member, tonumber(m[3]) or 0}
    local untilMs, shadow = tonumber(m[3]) or 0, tonumber(m[7]) or 0
    if (untilMs == 0 or untilMs > now) and shadow <= now then current, cur = member, m end
  end
end
-- A repeat adds nothing, unless a stronger source confirms it.
if cur and cur[4] == ARGV[15] and authority <= tonumber(cur[2]) then
  return reply(1, {id = current, status = 'current', version = tonumber(cur[5]),
    observed_at = tonumber(cur[6]), supersedes = '', duplicate = true, seen = seen})
end

local validFor, reverify = tonumber(ARGV[13]), tonumber(ARGV[14])
local validUntil = (validFor > 0 and now + validFor) or 0
-- Authority, then recency; but a person is the authority on themselves: in their own
-- user: scope, what they say later wins over any earlier version, a verified one too.
local own = ARGV[7] == 'user' and ARGV[6] ~= '' and scope == 'user:' .. ARGV[6] .. ':'
local status = 'current'
if cur and not own and authority < tonumber(cur[2]) then
  status = 'contested'
else
  -- A temporary value shadows the lasting one until it expires; anything else is
  -- superseded (a lasting value supersedes all, the shadowed one too).
  for _, held in ipairs(marked) do
    local member, lasting = held[1], held[2] == 0
    if validUntil > 0 and lasting then
      redis.call('HSET', p .. 'item:' .. member, 'shadowed_until', validUntil, 'shadowed_by', id)
    else
      redis.call('HSET', p .. 'item:' .. member, 'status', 'superseded', 'superseded_by', id,
        'shadowed_until', 0)
    end
    redis.call('XADD', changes, 'MAXLEN', '~', maxlen, '*', 'op', 'put', 'id', member)
  end
end

local version = #chain + 1
local shingles = {}
runs(words, math.min(6, #words), shingles)
redis.call('HSET', itemKey, 'id', id, 'scope', scope, 'key', key, 'text', ARGV[4], 'kind', ARGV[5],
  'user', ARGV[6], 'source_kind', ARGV[7], 'source_ref', ARGV[8], 'job', job, 'task', ARGV[10],
  'actor', ARGV[11], 'authority', authority, 'observed_at', now, 'status', status,
  'version', version, 'supersedes', (status == 'current' and current) or '',
  'contests', (status == 'contested' and current) or '', 'promoted_from', ARGV[16],
  'valid_until', validUntil,
  'reverify_after', (reverify > 0 and now + reverify) or 0,
  'digest', ARGV[15], 'shingles', table.concat(shingles, ' '),
  'derived_from', table.concat(parents, ' '))
if ARGV[18] ~= '' then redis.call('HSET', itemKey, 'vec_model', ARGV[18], 'vec', ARGV[19]) end
redis.call('ZADD', p .. 'items', now, id)
redis.call('SADD', p .. 'scope:' .. scope, id)
local kind_ = string.match(scope, '^(%a+):')
if job ~= '' and (kind_ == 'job' or kind_ == 'temp') then
  redis.call('SADD', p .. 'jobitems:' .. job, id)  -- what goes when the job's records do
end
if ARGV[6] ~= '' then redis.call('SADD', p .. 'user:' .. ARGV[6], id) end
redis.call('RPUSH', chainKey, id)
for _, parent in ipairs(parents) do redis.call('SADD', p .. 'derived:' .. parent, id) end
redis.call('XADD', changes, 'MAXLEN', '~', maxlen, '*', 'op', 'put', 'id', id)

return reply(1, {id = id, status = status, version = version, observed_at = now,
  supersedes = (status == 'current' and current) or '', seen = seen})
