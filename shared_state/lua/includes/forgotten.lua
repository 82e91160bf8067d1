--[[
  The fence a forget leaves on a tenant's memory, read by every write of text.

  wordsOf(text)       a text's words: runs of ASCII letters and digits, lower-cased.
  runs(words, n, out) append to `out` the digests of the runs of n words, each
                      tagged with n (the shingles a forget puts in the fence).
  fencedText(fence, words, userSays)
                      whether a shingle of the words (n = 1..6) is in the fence,
                      so the write is refused. The user saying the text again
                      (`userSays`) lifts the fence for those runs instead.
]]
local function wordsOf(text)
  local words = {}
  for w in string.gmatch(string.lower(text), '%w+') do words[#words + 1] = w end
  return words
end

local function runs(words, n, out)
  for i = 1, #words - n + 1 do
    out[#out + 1] = n .. ':' .. string.sub(redis.sha1hex(table.concat(words, ' ', i, i + n - 1)), 1, 24)
  end
end

local function fencedText(fence, words, userSays)
  if redis.call('SCARD', fence) == 0 then return false end
  for n = 1, math.min(6, #words) do
    local candidates = {}
    runs(words, n, candidates)
    for _, digest in ipairs(candidates) do
      if userSays then
        redis.call('SREM', fence, digest)
      elseif redis.call('SISMEMBER', fence, digest) == 1 then
        return true
      end
    end
  end
  return false
end
