--[[
  memoryForget: delete items and everything derived from them, and leave a
  fence so that what was forgotten cannot be written back.

  KEYS[1] the tenant's memory prefix   rf:mem:{tenant}:

  ARGV[1] changes stream maxlen
  ARGV[2] N > 0: forget (follow derived items, fence the text of those of at
          least N characters: a shorter one, "y" or "is", would fence the
          same word in every later write); 0: expire (only the items named,
          no fence: a job's own items going with the job, while what was
          promoted from them stays)
  ARGV[3 ..] the ids to remove

  Forgetting follows the derived sets breadth first, so a promoted copy, an
  episode quoting the item and anything derived from those go too. Each
  removed item leaves its id in the fence, and its shingle digests (never its
  text) if its text is long enough. The recall index's snapshot is deleted and
  the tenant's forget generation moves on. Where a removed version was its chain's current one, the best
  version left (authority, then recency, unexpired) becomes current.

  Returns {code, data, events}
     1  data = removed (the ids, space separated, in removal order)
]]
--- @include "common"

local p = KEYS[1]
local fence = p .. 'forgotten'
local minFenced = tonumber(ARGV[2])
local follow = minFenced > 0
-- Characters, not bytes (UTF-8 continuation bytes are not counted), of the trimmed text.
local function chars(text)
  local _, n = string.gsub(string.match(text, '^%s*(.-)%s*$'), '[^\128-\191]', '')
  return n
end
local queue, visited, removed, settle = {}, {}, {}, {}
for i = 3, #ARGV do queue[#queue + 1] = ARGV[i] end

local head = 1
while head <= #queue do
  local id = queue[head]
  head = head + 1
  if not visited[id] then
    visited[id] = true
    local itemKey, derivedKey = p .. 'item:' .. id, p .. 'derived:' .. id
    local m = redis.call('HMGET', itemKey, 'scope', 'key', 'user', 'shingles', 'status', 'derived_from',
      'job', 'text')
    if m[1] then
      if follow then
        for _, child in ipairs(redis.call('SMEMBERS', derivedKey)) do queue[#queue + 1] = child end
        if chars(m[8] or '') >= minFenced then
          for s in string.gmatch(m[4] or '', '%S+') do redis.call('SADD', fence, s) end
        end
        redis.call('SADD', fence, 'id:' .. id)
      end
      redis.call('DEL', derivedKey)
      for parent in string.gmatch(m[6] or '', '%S+') do
        redis.call('SREM', p .. 'derived:' .. parent, id)
      end
      redis.call('DEL', itemKey)
      redis.call('ZREM', p .. 'items', id)
      redis.call('SREM', p .. 'scope:' .. m[1], id)
      if m[3] and m[3] ~= '' then redis.call('SREM', p .. 'user:' .. m[3], id) end
      if m[7] and m[7] ~= '' then redis.call('SREM', p .. 'jobitems:' .. m[7], id) end
      local chainKey = p .. 'chain:' .. m[1] .. '|' .. m[2]
      redis.call('LREM', chainKey, 0, id)
      if m[5] == 'current' then settle[chainKey] = true end
      redis.call('XADD', p .. 'changes', 'MAXLEN', '~', tonumber(ARGV[1]), '*', 'op', 'forget', 'id', id)
      removed[#removed + 1] = id
    end
  end
end

local now = nowMs()
for chainKey in pairs(settle) do
  local best, bestAuthority, bestAt
  for _, member in ipairs(redis.call('LRANGE', chainKey, 0, -1)) do
    local m = redis.call('HMGET', p .. 'item:' .. member, 'authority', 'observed_at', 'valid_until')
    local a, at, until_ = tonumber(m[1]), tonumber(m[2]), tonumber(m[3]) or 0
    if a and (until_ == 0 or until_ > now) and
        (not best or a > bestAuthority or (a == bestAuthority and at >= bestAt)) then
      best, bestAuthority, bestAt = member, a, at
    end
  end
  if best then
    redis.call('HSET', p .. 'item:' .. best, 'status', 'current', 'contests', '', 'shadowed_until', 0)
    redis.call('XADD', p .. 'changes', 'MAXLEN', '~', tonumber(ARGV[1]), '*', 'op', 'put', 'id', best)
    -- One version holds: another still marked current (the value a removed temporary one
    -- shadowed, when a stronger one is best) is superseded by it.
    for _, member in ipairs(redis.call('LRANGE', chainKey, 0, -1)) do
      local itemKey = p .. 'item:' .. member
      if member ~= best and redis.call('HGET', itemKey, 'status') == 'current' then
        redis.call('HSET', itemKey, 'status', 'superseded', 'superseded_by', best, 'shadowed_until', 0)
        redis.call('XADD', p .. 'changes', 'MAXLEN', '~', tonumber(ARGV[1]), '*', 'op', 'put', 'id', member)
      end
    end
  end
end

-- The recall index's snapshot holds the words and vectors of what was removed: it goes,
-- and a snapshot read before this forget is refused (memoryIndex).
redis.call('DEL', p .. 'index')
redis.call('INCR', p .. 'forgets')

return reply(1, {removed = table.concat(removed, ' ')})
