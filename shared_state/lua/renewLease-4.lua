--[[
  renewLease: extend the lease of a task the caller owns.

  Fenced: only the holder of the current token, while the task is `claimed`
  and its lease has not run out by Redis time. A lease that expired is not
  renewed even if nobody took the task over yet: from its deadline on, the
  reaper or any claim may hand the task to a successor, so the old owner
  stops there (its worker sees -3 and abandons the task).

  KEYS[1] task hash        rf:{job}:task:<task_id>
  KEYS[2] job hash         rf:{job}:job
  KEYS[3] job event stream rf:{job}:events
  KEYS[4] lease index      rf:{job}:leases

  ARGV[1] fencing token
  ARGV[2] lease length in ms
  ARGV[3] worker id

  Counts the renewal in the task hash (`renewals`, over all attempts): the
  event stream is capped, the count is not.

  Returns {code, data, events}
     1  renewed; data = lease_until
    -1  no such task
    -3  fenced: stale token, lease expired, or task no longer claimed
        (event task.fenced)
    -4  the job has finished (cancelled, failed): the task is marked cancelled;
        stop working

  Events: task.renewed, or task.fenced.
]]
--- @include "common"
--- @include "fence"

local taskKey, stream, leasesKey = KEYS[1], KEYS[3], KEYS[4]
local token, leaseMs, worker = ARGV[1], tonumber(ARGV[2]), ARGV[3]

local refused, t, job = ownedTask(token, worker, 'renew', 'role')
if refused then return refused end

local leaseUntil = nowMs() + leaseMs
redis.call('HSET', taskKey, 'lease_until', leaseUntil)
redis.call('HINCRBY', taskKey, 'renewals', 1)
redis.call('ZADD', leasesKey, leaseUntil, t[3])
emit(stream, job.maxlen, {'event', 'task.renewed', 'task_id', t[3], 'role', t[6],
  'worker', worker, 'token', token, 'lease_until', leaseUntil})
return reply(1, {lease_until = leaseUntil})
