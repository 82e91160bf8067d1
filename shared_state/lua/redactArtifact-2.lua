--[[
  redactArtifact: replace an artifact that quoted forgotten text by its
  redacted copy, a new artifact with its own content address, in one call.

  An artifact's id is the address of its content: redacting it in place would
  leave an id that no longer names what it holds, and storing the original
  again would bring the text back under it. So the copy is stored under its
  own id, joins the job's index at the original's score (with its expiry),
  and the original's hash keeps only where it went: every reference
  to the old id follows to the copy (ArtifactStore reads follow it), and
  storing the original content again stores nothing (storeArtifact).

  KEYS[1] the artifact hash          rf:{job}:artifact:<id>
  KEYS[2] the job's artifact index   rf:{job}:artifacts
  KEYS[3] the copy's hash (variable) rf:{job}:artifact:<new id>

  ARGV[1] the artifact's id     ARGV[2] the copy's id
  ARGV[3] the sha256 the forget read (the artifact is left alone when it no
          longer holds that content: it is already redacted, or gone)
  ARGV[4 ..] the copy's hash: field/value pairs (its handle and content)

  Returns {code, data, events} (no events)
     1  data = replaced (1, or 0: the artifact no longer held what was read)
    error  a key in KEYS belongs to another job
]]
--- @include "common"
local wrong = sameJob()
if wrong then return wrong end
local old, index, copy = KEYS[1], KEYS[2], KEYS[3]
if redis.call('HGET', old, 'sha256') ~= ARGV[3] then return reply(1, {replaced = 0}) end
local ttl = redis.call('PTTL', old)
redis.call('HSET', copy, unpack(ARGV, 4))
if ttl > 0 then redis.call('PEXPIRE', copy, ttl) end
-- The original stays in the index too (its expiry is set with the job's, and evidence that
-- names it keeps its age); listings skip it, as it has no handle left.
local score = redis.call('ZSCORE', index, ARGV[1])
if score then redis.call('ZADD', index, score, ARGV[2]) end
redis.call('DEL', old)
redis.call('HSET', old, 'redacted_to', ARGV[2])
if ttl > 0 then redis.call('PEXPIRE', old, ttl) end
return reply(1, {replaced = 1})
