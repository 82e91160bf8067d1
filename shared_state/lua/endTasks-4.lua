--[[
  endTasks: end every task a failed or cancelled job left unfinished, so that
  nothing of it stays queued, waiting, blocked or claimed until it expires.

  A claimed task keeps its owner and token: the owner learns that the job
  ended at its next renewal or write (code -4, see fence) and stops. A task waiting on its children keeps its pending count: `retry`
  puts it back to waiting (retryJob), so fan-in goes on where it stopped.
  Called by the job-finished hook (JobStore.finalize) after every way a job
  ends; idempotent: an ended task is left as it is.

  KEYS[1] job hash         rf:{job}:job
  KEYS[2] job event stream rf:{job}:events
  KEYS[3] lease index      rf:{job}:leases
  KEYS[4] queued index     rf:{job}:queued
  KEYS[5 ..]               the job's task hashes
  ARGV none
  Returns {code, data, events}
     1  data = ended (how many)
    -1  no such job
    -4  the job has not failed or been cancelled; data = job_status
    error  a key in KEYS belongs to another job
  Events: task.cancelled for each task ended, with the job's status as reason.
]]
--- @include "common"
local wrong = sameJob()
if wrong then return wrong end
local jobKey, stream, leasesKey, queuedKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local job = readJob(jobKey)
if not job.status then return reply(-1) end
if job.status ~= 'failed' and job.status ~= 'cancelled' then
  return reply(-4, {job_status = job.status})
end
local now, ended = nowMs(), 0
local OPEN = {queued = true, waiting = true, blocked = true, claimed = true}
for i = 5, #KEYS do
  local t = redis.call('HMGET', KEYS[i], 'task_id', 'role', 'status', 'owner', 'token')
  if t[1] and OPEN[t[3]] then
    cancelTask(KEYS[i], job, leasesKey, queuedKey, t[1], now)
    -- A claimed task keeps who held it, with which token: its owner's next renewal
    -- or write is answered "the job has finished" (fence), not "your claim is lost".
    if t[3] == 'claimed' then redis.call('HSET', KEYS[i], 'owner', t[4]) end
    emit(stream, job.maxlen, {'event', 'task.cancelled', 'task_id', t[1], 'role', t[2],
      'was', t[3], 'worker', t[4] or '', 'token', t[5] or '', 'reason', 'job ' .. job.status})
    ended = ended + 1
  end
end
return reply(1, {ended = ended})
