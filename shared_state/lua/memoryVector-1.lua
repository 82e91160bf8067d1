--[[
  memoryVector: store the vectors an embedder made for items, beside their
  text, only on items that still exist (one forgotten meanwhile gets none:
  a vector is deleted with its item, never left behind on its own).

  KEYS[1] the tenant's memory prefix   rf:mem:{tenant}:

  ARGV[1] the embedder's name (stored as vec_model: a vector is compared only
          with vectors of the same embedder)
  ARGV[2 ..] pairs: an item id, its vector (float32 bytes)

  Returns {code, data, events}
     1  data = stored (how many items got their vector)
]]
--- @include "common"

local p, model, stored = KEYS[1], ARGV[1], 0
for i = 2, #ARGV, 2 do
  local itemKey = p .. 'item:' .. ARGV[i]
  if redis.call('EXISTS', itemKey) == 1 then
    redis.call('HSET', itemKey, 'vec_model', model, 'vec', ARGV[i + 1])
    stored = stored + 1
  end
end
return reply(1, {stored = stored})
