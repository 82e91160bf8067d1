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

  The chain of (scope, key) has at most one version marked current. The new
  version becomes current when there is none, when the current one has
  expired, or when its authority is at least the current one's (which is
  marked superseded); a newer claim of lower authority is kept as contested
  and the current one stays. A claim equal to the current one (same digest)
  adds no version (the job is counted as having seen it) unless the current
  one has expired or the new source has more authority: then it is a new
  version that supersedes it.

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
local current, cur
for _, member in ipairs(chain) do
  local m = redis.call('HMGET', p .. 'item:' .. member, 'status', 'authority', 'valid_until', 'digest',
    'version', 'observed_at')
  if m[1] == 'current' then current, cur = member, m end
end
local curExpired = cur and (tonumber(cur[3]) or 0) > 0 and tonumber(cur[3]) <= now
-- A repeat adds nothing, unless it renews an expired claim or a stronger source confirms it.
if cur and cur[4] == ARGV[15] and not curExpired and authority <= tonumber(cur[2]) then
  return reply(1, {id = current, status = 'current', version = tonumber(cur[5]),
    observed_at = tonumber(cur[6]), supersedes = '', duplicate = true, seen = seen})
end

local status = 'current'
if cur then
  if curExpired or authority >= tonumber(cur[2]) then
    redis.call('HSET', p .. 'item:' .. current, 'status', 'superseded', 'superseded_by', id)
    redis.call('XADD', p .. 'changes', 'MAXLEN', '~', tonumber(ARGV[17]), '*', 'op', 'put', 'id', current)
  else
    status = 'contested'
  end
end

local validFor, reverify = tonumber(ARGV[13]), tonumber(ARGV[14])
local version = #chain + 1
local shingles = {}
runs(words, math.min(6, #words), shingles)
redis.call('HSET', itemKey, 'id', id, 'scope', scope, 'key', key, 'text', ARGV[4], 'kind', ARGV[5],
  'user', ARGV[6], 'source_kind', ARGV[7], 'source_ref', ARGV[8], 'job', job, 'task', ARGV[10],
  'actor', ARGV[11], 'authority', authority, 'observed_at', now, 'status', status,
  'version', version, 'supersedes', (status == 'current' and current) or '',
  'contests', (status == 'contested' and current) or '', 'promoted_from', ARGV[16],
  'valid_until', (validFor > 0 and now + validFor) or 0,
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
redis.call('XADD', p .. 'changes', 'MAXLEN', '~', tonumber(ARGV[17]), '*', 'op', 'put', 'id', id)

return reply(1, {id = id, status = status, version = version, observed_at = now,
  supersedes = (status == 'current' and current) or '', seen = seen})
