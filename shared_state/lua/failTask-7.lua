--[[
  failTask: end the caller's attempt at a task with an error.

  Fenced by token, and idempotent for its owner: a failure re-sent with the
  same token after it was recorded (a retry after a lost reply) gets the same
  outcome again and changes nothing. A retryable failure re-queues the task with attempt + 1
  until max_attempts; after that, or when not retryable, the task is dead and
  its job fails with the reason.

  KEYS[1] task hash        rf:{job}:task:<task_id>
  KEYS[2] job hash         rf:{job}:job
  KEYS[3] job event stream rf:{job}:events
  KEYS[4] lease index      rf:{job}:leases
  KEYS[5] queued index     rf:{job}:queued
  KEYS[6] task set         rf:{job}:tasks
  KEYS[7] retries index    rf:{job}:retries  (zset task_id -> due ms)

  ARGV[1] fencing token
  ARGV[2] worker id
  ARGV[3] reason
  ARGV[4] retryable: 1 or 0
  ARGV[5..7] the retry's backoff: base ms, cap ms, jitter in [0, 1) (failAttempt)

  Returns {code, data, events}
     1  data = outcome ('requeued' | 'dead' | 'cancelled': the job had finished),
        retry_in_ms (a requeued task's delay)
    -1  no such task
    -3  fenced (event task.fenced)
    -4  its job ended while it ran (endTasks cancelled it); data = job_status
    error  a key in KEYS belongs to another job

  Events: task.failed, then task.requeued or task.dead (+ job.failed).
]]
--- @include "common"
--- @include "fence"
--- @include "failAttempt"

local taskKey, jobKey, stream = KEYS[1], KEYS[2], KEYS[3]
local token, worker, reason, retryable = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1'

local wrong = sameJob()
if wrong then return wrong end
local t = ownerRow(taskKey, 'role', 'attempt')
local job = readJob(jobKey)
local refused = fence(t, job, stream, token, worker, 'fail')
if refused then return refused end
emit(stream, job.maxlen, {'event', 'task.failed', 'task_id', t[3], 'role', t[6],
  'worker', worker, 'token', token, 'attempt', t[7], 'reason', reason})
local outcome, delay = failAttempt(reason, nowMs(), not retryable, job, backoffArgs(5))
local done = {outcome = outcome, retry_in_ms = delay or 0}
ended(token, worker, 'fail', done)
return reply(1, done)
