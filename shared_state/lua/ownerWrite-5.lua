--[[
  ownerWrite: the task owner's writes to its job's records, fenced by token.

  A running task keeps its records in job hashes (journal, checkpoints,
  workspace, progress). Every write goes through here so that a worker that lost its
  claim (a zombie past its lease) cannot write into them after its successor
  started: the same fence as every other owner's write. The targets are
  checked before anything is written: only those four hashes of the task's
  own job — never another job's records, nor the job or task hashes whose
  status the scripts alone decide. A write may be guarded: it happens only
  if a field still holds what the writer read (two coders editing one file:
  the second is told the file changed, rather than undoing the first). A
  journal entry's name is kept in the job's names too (``journalWrite``).

  KEYS[1] task hash        rf:{job}:task:<task_id>
  KEYS[2] job hash         rf:{job}:job
  KEYS[3] job event stream rf:{job}:events
  KEYS[4] lease index      rf:{job}:leases
  KEYS[5] queued index     rf:{job}:queued
  KEYS[6..] target hashes: rf:{job}:journal, rf:{job}:checkpoints,
          rf:{job}:workspace or rf:{job}:progress of the same job
  A journal entry's name goes into rf:{job}:journal:names, the journal's key with
  ':names' (``journalWrite``).

  ARGV[1] fencing token
  ARGV[2] worker id
  ARGV[3] G, the number of guards
  ARGV[4..3+3G] one triple per guard: target, field, the value it must hold
            (the string "\0" for a field that must not exist)
  ARGV[4+3G..] one triple per write: target (1 for KEYS[6], 2 for KEYS[7], ...; any
            other index is refused), field, value

  Returns {code, data, events}
     1  written; data = writes (count)
    -1  no such task
    -3  fenced (event task.fenced)
    -4  the job has finished; the task is marked cancelled
    -6  a target is not one of the job's record hashes, or a target index
        names none of KEYS[6..]; data = key; nothing written
    -8  a guarded field holds something else; data = field, current (the
        string "\0" when absent); nothing written
]]
--- @include "common"
--- @include "journal"
--- @include "fence"

local token, worker = ARGV[1], ARGV[2]

local tag = string.match(KEYS[2], '^([^{]*{[^}]*}:)job$')
local records = {}
if tag then
  for _, name in ipairs({'journal', 'checkpoints', 'workspace', 'progress'}) do
    records[tag .. name] = true
  end
end
for i = 6, #KEYS do
  if not records[KEYS[i]] then return reply(-6, {key = KEYS[i]}) end
end

-- Every target index names one of KEYS[6..], checked before anything is read or
-- written: a zero, negative, fractional or too large index would reach the task or
-- job hash (KEYS[1..5]), whose status the scripts alone decide.
local guards = tonumber(ARGV[3])
local n = (#ARGV - 3) / 3
if not guards or n ~= math.floor(n) or guards < 0 or guards > n then
  return redis.error_reply('ARGV is not a token, a worker, a guard count and triples')
end
local targets = #KEYS - 5
for i = 1, n do
  local index = tonumber(ARGV[1 + 3 * i])
  if not index or index ~= math.floor(index) or index < 1 or index > targets then
    return reply(-6, {key = 'target ' .. ARGV[1 + 3 * i]})
  end
end

local refused = ownedTask(token, worker, 'write')
if refused then return refused end

for i = 1, guards do
  local at = 1 + 3 * i
  local now = redis.call('HGET', KEYS[5 + tonumber(ARGV[at])], ARGV[at + 1]) or '\0'
  if now ~= ARGV[at + 2] then return reply(-8, {field = ARGV[at + 1], current = now}) end
end
local journal = tag and tag .. 'journal'
for i = guards + 1, n do
  local at = 1 + 3 * i
  local target = KEYS[5 + tonumber(ARGV[at])]
  if target == journal then  -- its name kept too: a claim reads it by name
    journalWrite(target, ARGV[at + 1], ARGV[at + 2])
  else
    redis.call('HSET', target, ARGV[at + 1], ARGV[at + 2])
  end
end
return reply(1, {writes = n - guards})
