--[[
  cancelJob: stop a job that has not finished.

  Its tasks are ended by the job-finished hook right after (endTasks: every
  open task cancelled; an owner learns it at its next renewal or write, code
  -4, and stops). The job's keys start their retention clock.

  KEYS[1] job hash         rf:{job}:job
  KEYS[2] job event stream rf:{job}:events
  KEYS[3] lease index      rf:{job}:leases
  KEYS[4] queued index     rf:{job}:queued
  KEYS[5] task set         rf:{job}:tasks

  ARGV[1] reason

  Returns {code, data, events}
     1  cancelled
    -1  no such job
    -4  already finished; data = job_status
    error  a key in KEYS belongs to another job

  Events: job.cancelled.
]]
--- @include "common"

local wrong = sameJob()
if wrong then return wrong end
local jobKey, stream = KEYS[1], KEYS[2]
local job = readJob(jobKey)
if not job.status then return reply(-1) end
if isTerminalJob(job.status) then return reply(-4, {job_status = job.status}) end
redis.call('HSET', jobKey, 'status', 'cancelled', 'reason', ARGV[1], 'finished_ms', nowMs())
emit(stream, job.maxlen, {'event', 'job.cancelled', 'job_id',
  redis.call('HGET', jobKey, 'job_id'), 'reason', ARGV[1]})
expireJob(job, jobKey, stream, KEYS[3], KEYS[4], KEYS[5])
return reply(1)
