--[[
  redactRecord: write what a forget redacted into one record, only where the
  record still holds what the forget read; or rebuild a stream without the
  entries that quoted the forgotten text.

  KEYS[1] the record (variable): a hash, a list, or a stream
  KEYS[2] stream mode: a scratch key beside the stream (variable)

  ARGV[1] 'hash', 'list' or 'stream'
  hash:   ARGV[2 ..] triples: a field, the value the forget read, the value
          to write. A field whose value changed since it was read (its owner
          wrote a newer checkpoint) is left as it is and named in the reply:
          the caller reads it again and redacts what is there now, so an older
          value never goes back over a newer one.
  list:   ARGV[2 ..] pairs: an element the forget read, the element to write
          in its place, wherever it is now (a list of kept versions, which a
          new version pushed since the read has shifted).
  stream: ARGV[2 ..] the ids of the entries to remove. XDEL only marks an
          entry deleted inside its node, whose bytes stay (in DUMP, in the
          append-only file's next rewrite, in a replica's sync); the stream is
          rebuilt from the entries kept, with the same ids and the same last id,
          and takes the old one's place, so nothing of the removed ones stays.

  Returns {code, data, events} (no events)
     1  data = changed (fields written or entries removed), moved (the fields
        that changed since they were read, space separated)
]]

local key = KEYS[1]
if ARGV[1] == 'hash' then
  local changed, moved = 0, {}
  for i = 2, #ARGV, 3 do
    local field, read, clean = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    local now = redis.call('HGET', key, field)
    if now == read then
      redis.call('HSET', key, field, clean)
      changed = changed + 1
    elseif now then
      moved[#moved + 1] = field
    end
  end
  return {1, {'changed', tostring(changed), 'moved', table.concat(moved, ' ')}, {}}
end

if ARGV[1] == 'list' then
  local changed = 0
  for i = 2, #ARGV, 2 do
    -- By value, not index: a version pushed since the read moved every index.
    for _, at in ipairs(redis.call('LPOS', key, ARGV[i], 'COUNT', 0)) do
      redis.call('LSET', key, at, ARGV[i + 1])
      changed = changed + 1
    end
  end
  return {1, {'changed', tostring(changed), 'moved', ''}, {}}
end

local scratch = KEYS[2]
if redis.call('EXISTS', key) == 0 then
  return {1, {'changed', '0', 'moved', ''}, {}}
end
local drop = {}
for i = 2, #ARGV do drop[ARGV[i]] = true end
local info = redis.call('XINFO', 'STREAM', key)
local last = '0-0'
for i = 1, #info, 2 do
  if info[i] == 'last-generated-id' then last = info[i + 1] end
end
redis.call('DEL', scratch)
local removed, kept = 0, 0
for _, entry in ipairs(redis.call('XRANGE', key, '-', '+')) do
  if drop[entry[1]] then
    removed = removed + 1
  else
    redis.call('XADD', scratch, entry[1], unpack(entry[2]))
    kept = kept + 1
  end
end
if removed == 0 then
  redis.call('DEL', scratch)
  return {1, {'changed', '0', 'moved', ''}, {}}
end
if kept == 0 then
  -- An empty stream that still knows its last id: one entry at that id, trimmed away.
  redis.call('XADD', scratch, last, 'x', '')
  redis.call('XTRIM', scratch, 'MAXLEN', 0)
end
redis.call('XSETID', scratch, last)
redis.call('RENAME', scratch, key)
return {1, {'changed', tostring(removed), 'moved', ''}, {}}
