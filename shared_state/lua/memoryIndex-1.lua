--[[
  memoryIndex: keep a snapshot of a tenant's recall index, so that a process
  that starts (a CLI call) loads it instead of indexing every item.

  KEYS[1] the tenant's memory prefix   rf:mem:{tenant}:

  ARGV[1] the tenant's forget generation when the index was read (the
          'forgets' counter, '0' when there is none)
  ARGV[2] the id of the last change the index has taken in ('' none)
  ARGV[3] the name of the embedder of its vectors ('' none)
  ARGV[4] how many items it holds
  ARGV[5] the snapshot (bytes)

  A forget deletes the snapshot and moves the generation on (memoryForget):
  an index read before a forget may still hold what was forgotten, and is
  refused. One that covers no more changes than the stored one is not stored.

  Returns {code, data, events}
     1  data = stored (1, or 0), why ('forgotten', 'older' or '')
]]
--- @include "common"

local p = KEYS[1]
local snapshot = p .. 'index'

local function streamId(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms) or 0, tonumber(seq) or 0
end

if (redis.call('GET', p .. 'forgets') or '0') ~= ARGV[1] then
  return reply(1, {stored = 0, why = 'forgotten'})
end
local held = redis.call('HGET', snapshot, 'upto')
if held then
  local heldMs, heldSeq = streamId(held)
  local ms, seq = streamId(ARGV[2])
  if ms < heldMs or (ms == heldMs and seq <= heldSeq) then
    return reply(1, {stored = 0, why = 'older'})
  end
end
redis.call('HSET', snapshot, 'upto', ARGV[2], 'generation', ARGV[1], 'embedder', ARGV[3],
  'items', ARGV[4], 'blob', ARGV[5])
return reply(1, {stored = 1, why = ''})
