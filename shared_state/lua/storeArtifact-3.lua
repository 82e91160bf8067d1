--[[
  storeArtifact: write one artifact and index it at Redis time, in one call.

  Content-addressed: the same content stored again is the same artifact, and
  its index score (when it was last stored) moves to now, by the server's
  clock (resume's evidence ages are read on it). While the job runs the
  artifact does not expire: the job's finish sets its expiry with the job's
  other keys. Stored after the job finished (the job record's clock runs),
  it expires with the job; with no job record at all, after ARGV[2] seconds,
  and the index too when nothing else set its clock.

  KEYS[1] artifact hash    rf:{job}:artifact:<id>
  KEYS[2] artifact index   rf:{job}:artifacts
  KEYS[3] job hash         rf:{job}:job
  ARGV[1] the artifact id
  ARGV[2] seconds an artifact of a job without a record is kept
  ARGV[3..] the hash's field/value pairs (its handle and content)
  Content a forget redacted is not stored again: its id names only where the
  redacted copy went (redactArtifact), and the reply says which.

  Returns {code, data, events}
     1  data = stored_ms (Redis time), expires ('job', 'orphan' or ''); or
        redacted_to (the copy's id: nothing was stored)
    error  a key in KEYS belongs to another job
]]
--- @include "common"
local wrong = sameJob()
if wrong then return wrong end
local artifactKey, indexKey, jobKey = KEYS[1], KEYS[2], KEYS[3]
-- Content a forget redacted (redactArtifact): it is not stored again; the copy stands.
local moved = redis.call('HGET', artifactKey, 'redacted_to')
if moved then return reply(1, {redacted_to = moved}) end
redis.call('HSET', artifactKey, unpack(ARGV, 3))
local now = nowMs()
redis.call('ZADD', indexKey, now, ARGV[1])
local jobTtl = redis.call('PTTL', jobKey)
local expires = ''
if jobTtl > 0 then
  redis.call('PEXPIRE', artifactKey, jobTtl)
  expires = 'job'
elseif jobTtl == -2 then
  redis.call('EXPIRE', artifactKey, tonumber(ARGV[2]))
  if redis.call('TTL', indexKey) == -1 then redis.call('EXPIRE', indexKey, tonumber(ARGV[2])) end
  expires = 'orphan'
end
return reply(1, {stored_ms = now, expires = expires})
