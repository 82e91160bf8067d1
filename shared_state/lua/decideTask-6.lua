--[[
  decideTask: a person answers a blocked task. Approve: the task is queued to
  resume at its stage, carrying the approval (bound to the call it was asked
  for) and the person's note. Reject: the task is dead with the note, and the
  job fails.

  KEYS[1] task hash        rf:{job}:task:<task_id>
  KEYS[2] job hash         rf:{job}:job
  KEYS[3] job event stream rf:{job}:events
  KEYS[4] lease index      rf:{job}:leases
  KEYS[5] queued index     rf:{job}:queued
  KEYS[6] task set         rf:{job}:tasks

  ARGV[1] approve | reject    ARGV[2] the note    ARGV[3] who decided
  ARGV[4] the decision's id, chosen by the caller: a decision re-sent after a lost
          reply is answered from the record, not refused
  ARGV[5] the approval_for the person saw ('' for whatever the task asks now): a
          decision on a question the task no longer asks is refused

  Returns {code, data, events}
     1  data = role (approve: the caller delivers the task)
    -1  no such task
    -2  the task is not blocked, or asks another question than ARGV[5]; data = status
        (and asks_now, the digest of what it asks now)
    -4  the job has finished; data = job_status

  Events: task.approved then task.queued (and job.running once no task is
  blocked), or task.rejected then task.dead and job.failed.
]]
--- @include "common"
--- @include "failAttempt"

local wrong = sameJob()
if wrong then return wrong end
local taskKey, jobKey, stream, queuedKey = KEYS[1], KEYS[2], KEYS[3], KEYS[5]
local t = redis.call('HMGET', taskKey, 'status', 'task_id', 'role', 'approval_for', 'decision_id')
if not t[1] then return reply(-1) end
if t[5] == ARGV[4] then return reply(1, {role = t[3], replayed = true}) end
local job = readJob(jobKey)
if isTerminalJob(job.status) then return reply(-4, {job_status = job.status}) end
if t[1] ~= 'blocked' then return reply(-2, {status = t[1]}) end
if ARGV[5] ~= '' and ARGV[5] ~= t[4] then return reply(-2, {status = t[1], asks_now = t[4]}) end
redis.call('HSET', taskKey, 'decision_id', ARGV[4])
local taskId, role, note, who = t[2], t[3], ARGV[2], ARGV[3]
local now = nowMs()
local left = redis.call('HINCRBY', jobKey, 'blocked_tasks', -1)
if ARGV[1] == 'approve' then
  redis.call('HSET', taskKey, 'status', 'queued', 'queued_ms', now, 'approved_for', t[4],
    'approval_note', note, 'approved_by', who,
    'approval_stage', redis.call('HGET', taskKey, 'stage') or '')
  redis.call('ZADD', queuedKey, now, taskId)
  emit(stream, job.maxlen, {'event', 'task.approved', 'task_id', taskId, 'role', role,
    'by', who, 'note', note})
  emit(stream, job.maxlen, {'event', 'task.queued', 'task_id', taskId, 'role', role,
    'reason', 'approved'})
  if left <= 0 then
    redis.call('HSET', jobKey, 'status', 'running', 'blocked_tasks', 0)
    emit(stream, job.maxlen, {'event', 'job.running', 'job_id',
      redis.call('HGET', jobKey, 'job_id'), 'reason', 'approved'})
  end
  return reply(1, {role = role})
end
emit(stream, job.maxlen, {'event', 'task.rejected', 'task_id', taskId, 'role', role,
  'by', who, 'note', note})
failAttempt('rejected by ' .. who .. ': ' .. note, now, true, job)
return reply(1, {role = role})
