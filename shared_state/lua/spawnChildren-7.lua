--[[
  spawnChildren: create child tasks and park the parent until they finish.

  Fenced by the parent's token, and idempotent for it: a spawn re-sent with
  the same token after it succeeded (a retry after a lost reply) returns OK
  again and creates nothing. Children are created `queued`, tagged with
  the wave (the stage the parent resumes at) and listed on the parent (field
  children:<wave>, their ids) so the parent can find them; the parent becomes
  `waiting` with a pending counter, releases its lease (freeing
  its worker) and records the stage it resumes at. completeTask fans in. When
  the spawn is a journaled tool call, its journal entry is written here too,
  so the spawn and the record of it are one atomic step.

  KEYS[1] task hash        rf:{job}:task:<task_id> (the spawning task, the parent)
  KEYS[2] job hash         rf:{job}:job
  KEYS[3] job event stream rf:{job}:events
  KEYS[4] lease index      rf:{job}:leases
  KEYS[5] queued index     rf:{job}:queued
  KEYS[6] task set         rf:{job}:tasks
  KEYS[7] journal hash     rf:{job}:journal (its entry's name goes into the journal's key
                           with ':names', ``journalWrite``)
  KEYS[8..7+n] child task hashes, in the order of the child quads

  ARGV[1] fencing token
  ARGV[2] worker id
  ARGV[3] stage the parent resumes at
  ARGV[4] journal field ('' for none)
  ARGV[5] journal entry (JSON)
  ARGV[6..] one quad per child: task_id, role, brief, input (artifact id or '')

  Returns {code, data, events}
     1  spawned; data = children (count)
    -1  no such task
    -3  fenced (event task.fenced)
    -4  the job has finished; the task is marked cancelled
    error  a key in KEYS belongs to another job

  Events: task.queued per child, then task.waiting.
]]
--- @include "common"
--- @include "journal"
--- @include "fence"

local parentKey, stream, leasesKey = KEYS[1], KEYS[3], KEYS[4]
local queuedKey, tasksKey = KEYS[5], KEYS[6]
local token, worker, stage = ARGV[1], ARGV[2], ARGV[3]

local refused, p, job = ownedTask(token, worker, 'spawn', 'job_id')
if refused then return refused end

local now = nowMs()
local n = (#ARGV - 5) / 4
local ids = {}
for i = 1, n do
  local at = 4 * i + 2
  local childId, role, brief, input = ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  ids[i] = childId
  redis.call('HSET', KEYS[7 + i], 'task_id', childId, 'job_id', p[6], 'role', role,
    'parent_id', p[3], 'brief', brief, 'input', input, 'wave', stage, 'status', 'queued',
    'attempt', 1, 'token', 0, 'owner', '', 'lease_until', 0, 'pending', 0, 'stage', '',
    'created_ms', now, 'queued_ms', now)
  redis.call('SADD', tasksKey, childId)
  redis.call('ZADD', queuedKey, now, childId)
  emit(stream, job.maxlen, {'event', 'task.queued', 'task_id', childId, 'role', role,
    'parent_id', p[3]})
end
-- The wave's children, listed on the parent: it finds them without reading the job's tasks.
redis.call('HSET', parentKey, 'status', 'waiting', 'owner', '', 'lease_until', 0,
  'pending', n, 'stage', stage, 'children:' .. stage, table.concat(ids, ' '))
redis.call('ZREM', leasesKey, p[3])
if ARGV[4] ~= '' then journalWrite(KEYS[7], ARGV[4], ARGV[5]) end
ended(token, worker, 'spawn', {children = n})
emit(stream, job.maxlen, {'event', 'task.waiting', 'task_id', p[3], 'worker', worker,
  'token', token, 'children', n, 'stage', stage})
return reply(1, {children = n})
