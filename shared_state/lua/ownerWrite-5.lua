--[[
  ownerWrite: the task owner's writes to its job's records, fenced by token.

  A running task keeps its records in job hashes (journal, checkpoints,
  workspace). Every write goes through here so that a worker that lost its
  claim (a zombie past its lease) cannot write into them after its successor
  started: the same fence as every other owner's write. The targets are
  checked before anything is written: only those three hashes of the task's
  own job — never another job's records, nor the job or task hashes whose
  status the scripts alone decide.

  KEYS[1] task hash        rf:{job}:task:<task_id>
  KEYS[2] job hash         rf:{job}:job
  KEYS[3] job event stream rf:{job}:events
  KEYS[4] lease index      rf:{job}:leases
  KEYS[5] queued index     rf:{job}:queued
  KEYS[6..] target hashes: rf:{job}:journal, rf:{job}:checkpoints or
          rf:{job}:workspace of the same job

  ARGV[1] fencing token
  ARGV[2] worker id
  ARGV[3..] one triple per write: target (1 for KEYS[6], 2 for KEYS[7], ...; any
            other index is refused), field, value

  Returns {code, data, events}
     1  written; data = writes (count)
    -1  no such task
    -3  fenced (event task.fenced)
    -4  the job has finished; the task is marked cancelled
    -6  a target is not one of the job's record hashes, or a write's target
        index names none of KEYS[6..]; data = key; nothing written
]]
--- @include "common"
--- @include "fence"

local token, worker = ARGV[1], ARGV[2]

local tag = string.match(KEYS[2], '^([^{]*{[^}]*}:)job$')
local records = {}
if tag then
  for _, name in ipairs({'journal', 'checkpoints', 'workspace'}) do records[tag .. name] = true end
end
for i = 6, #KEYS do
  if not records[KEYS[i]] then return reply(-6, {key = KEYS[i]}) end
end

-- Every target index names one of KEYS[6..], checked before anything is read or
-- written: a zero, negative, fractional or too large index would reach the task or
-- job hash (KEYS[1..5]), whose status the scripts alone decide.
local n = (#ARGV - 2) / 3
if n ~= math.floor(n) then return redis.error_reply('ARGV is not a token, a worker and triples') end
local targets = #KEYS - 5
for i = 1, n do
  local index = tonumber(ARGV[3 * i])
  if not index or index ~= math.floor(index) or index < 1 or index > targets then
    return reply(-6, {key = 'target ' .. ARGV[3 * i]})
  end
end

local refused = ownedTask(token, worker, 'write')
if refused then return refused end

for i = 1, n do
  local at = 3 * i
  redis.call('HSET', KEYS[5 + tonumber(ARGV[at])], ARGV[at + 1], ARGV[at + 2])
end
return reply(1, {writes = n})
