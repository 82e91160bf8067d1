--[[
  memoryFile: change one memory file if it is still what the caller read
  (compare-and-set on its sha256), keeping earlier versions.

  KEYS[1] the tenant's memory prefix   rf:mem:{tenant}:

  ARGV[1] op: put | delete | rename
  ARGV[2] scope             ARGV[3] path (normalized by the caller)
  ARGV[4] expected sha256 of the file now: '' = must not exist, '*' = any
  ARGV[5] put: the new content; rename: the new path
  ARGV[6] put: its sha256     ARGV[7] actor     ARGV[8] versions kept
  ARGV[9] the writer's job ('' none): a job: or temp: file is listed under it, to go
          when the job's records do

  A put whose content holds text a forget fenced (memoryWrite's shingles) is
  refused: what was forgotten is not written back into a file either, by
  anyone — a file is written by agents too, the planner's decision log with
  the operator's rights; the user lifts the fence by saying the text again
  (a memory write of theirs), then writes the file.

  Keys named from the prefix:
    file:<scope>|<path>    hash  content, sha256, version, updated_ms, actor
    filev:<scope>|<path>   list  earlier versions, newest first: "<version> <sha256> <content>"
    files:<scope>          zset  path -> updated_ms
    jobfiles:<job>         set   <scope>|<path> of the job's job: and temp: files

  Returns {code, data, events}
     1  data = sha256, version (put, rename), deleted (delete)
    -1  no such file; data = current ('')
    -2  the file is not what the caller expected; data = current (its sha256, '' if none)
    -7  forgotten: the content holds fenced text; data = what ('text')
]]
--- @include "common"
--- @include "forgotten"

local p, op, scope, path, expected = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local fileKey = p .. 'file:' .. scope .. '|' .. path
local versionsKey = p .. 'filev:' .. scope .. '|' .. path
local indexKey = p .. 'files:' .. scope
local keep = tonumber(ARGV[8])
local kind_ = string.match(scope, '^(%a+):')
local jobFiles = (ARGV[9] ~= '' and (kind_ == 'job' or kind_ == 'temp'))
  and (p .. 'jobfiles:' .. ARGV[9]) or nil

local now_ = redis.call('HMGET', fileKey, 'sha256', 'version', 'content')
local current = now_[1] or ''
if expected ~= '*' and expected ~= current then
  if op == 'put' and current == ARGV[6] then  -- this very put, re-sent after a lost reply
    return reply(1, {sha256 = current, version = tonumber(now_[2])})
  end
  return reply(-2, {current = current})
end
if op ~= 'put' and current == '' then return reply(-1, {current = ''}) end
if op == 'put' and fencedText(p .. 'forgotten', wordsOf(ARGV[5]), false) then
  return reply(-7, {what = 'text'})
end

local function archive()
  if current ~= '' then
    redis.call('LPUSH', versionsKey, now_[2] .. ' ' .. current .. ' ' .. now_[3])
    redis.call('LTRIM', versionsKey, 0, keep - 1)
  end
end

local t = nowMs()
if op == 'put' then
  archive()
  local version = (tonumber(now_[2]) or 0) + 1
  redis.call('HSET', fileKey, 'content', ARGV[5], 'sha256', ARGV[6], 'version', version,
    'updated_ms', t, 'actor', ARGV[7])
  redis.call('ZADD', indexKey, t, path)
  if jobFiles then redis.call('SADD', jobFiles, scope .. '|' .. path) end
  return reply(1, {sha256 = ARGV[6], version = version})
end
if op == 'delete' then
  archive()
  redis.call('DEL', fileKey)
  redis.call('ZREM', indexKey, path)
  if jobFiles then redis.call('SREM', jobFiles, scope .. '|' .. path) end
  return reply(1, {deleted = path})
end
-- rename: the target must not exist; the history moves with the file
local target = ARGV[5]
local targetKey = p .. 'file:' .. scope .. '|' .. target
if redis.call('EXISTS', targetKey) == 1 then return reply(-2, {current = 'target exists'}) end
redis.call('RENAME', fileKey, targetKey)
if redis.call('EXISTS', versionsKey) == 1 then
  redis.call('RENAME', versionsKey, p .. 'filev:' .. scope .. '|' .. target)
end
redis.call('HSET', targetKey, 'updated_ms', t, 'actor', ARGV[7])
redis.call('ZREM', indexKey, path)
redis.call('ZADD', indexKey, t, target)
if jobFiles then
  redis.call('SREM', jobFiles, scope .. '|' .. path)
  redis.call('SADD', jobFiles, scope .. '|' .. target)
end
return reply(1, {sha256 = current, version = tonumber(now_[2])})
