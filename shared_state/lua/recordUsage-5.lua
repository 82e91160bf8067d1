--[[
  recordUsage: add one model call's usage to its job's totals, once.

  Called by every worker and subagent of a job after each call; atomic, so
  totals are exact however many processes record at once. Each call has an
  id chosen by the caller: a record re-sent with the same id (a retry after a
  lost reply) is not counted again. Not fenced: a call a worker made after
  losing its lease was still paid for, so it still counts. A call recorded
  after its job was retired gives the keys it touches the job's own expiry;
  one whose job is gone altogether is not recorded (nothing would expire it).

  It settles the call's reservation in the job's budget too (ARGV[7]; as
  settleTokens does, `settleHeld`), or counts its use there when it made none:
  what a call records after its answer is one script, counted once however
  often it is sent. A tenant's daily budget (another hash tag) is settled
  beside it by settleTokens.

  KEYS[1] usage hash       rf:{job}:usage
  KEYS[2] recorded calls   rf:{job}:usage:calls (set of call ids)
  KEYS[3] job hash         rf:{job}:job
  KEYS[4] job event stream rf:{job}:events
  KEYS[5] budget hash      rf:{job}:budget

  ARGV[1] call id
  ARGV[2] input tokens
  ARGV[3] cached input tokens (as the provider reported)
  ARGV[4] output tokens
  ARGV[5] cost in micro-USD (integer)
  ARGV[6] 1 if the call was a compaction (a summarizing call), else 0
  ARGV[7] the job's reservation this call settles: its tokens used are the input
          and output tokens, its money the cost (ARGV[5]); '*' when none was made (a
          job without a budget reserves nothing): they are counted in the budget hash
          all the same; '' none (settled otherwise)
  ARGV[8..] field/value pairs of the model.called event (task_id, worker, step,
          provider, model, kind), after which the token counts and the cost are added

  Returns {code, data, events}
     1  data = counted (1 if this call counted it, 0 if it had been counted
        already or its job is gone); the totals are not returned (HGETALL
        on every call for a reply nobody reads: ``JobUsage.get`` reads them)
    error  a key in KEYS belongs to another job

  Events: model.called (once per call id).
]]
--- @include "common"
--- @include "settle"

local wrong = sameJob()
if wrong then return wrong end
local key = KEYS[1]
local jobTtl = redis.call('PTTL', KEYS[3])
if jobTtl == -2 then return reply(1, {counted = false}) end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  return reply(1, {counted = false})
end
local input = tonumber(ARGV[2])
if ARGV[7] == '*' then
  redis.call('HINCRBY', KEYS[5], 'used', input + tonumber(ARGV[4]))
  redis.call('HINCRBY', KEYS[5], 'used_usd', ARGV[5])
elseif ARGV[7] ~= '' then
  settleHeld(KEYS[5], ARGV[7], input + tonumber(ARGV[4]), tonumber(ARGV[5]))
end
-- The totals in one read and one write (not an HINCRBY a field: each command a script
-- sends costs the server about as much as a small command's whole work). Lua adds
-- them as doubles, exact below 2^53 (9e15 tokens; the caller sends whole numbers).
local totals = redis.call('HMGET', key, 'calls', 'input_tokens', 'cached_tokens',
  'output_tokens', 'cost_micro_usd', 'compaction_calls', 'high_water')
local function total(i) return tonumber(totals[i] or '0') end
local sums = {'calls', total(1) + 1, 'input_tokens', total(2) + input,
  'cached_tokens', total(3) + tonumber(ARGV[3]), 'output_tokens', total(4) + tonumber(ARGV[4]),
  'cost_micro_usd', total(5) + tonumber(ARGV[5])}
if ARGV[6] == '1' then
  sums[#sums + 1] = 'compaction_calls'
  sums[#sums + 1] = total(6) + 1
end
if input > total(7) then
  sums[#sums + 1] = 'high_water'
  sums[#sums + 1] = input
end
redis.call('HSET', key, unpack(sums))
local fields = {'event', 'model.called', unpack(ARGV, 8)}
for _, pair in ipairs({{'input_tokens', 2}, {'cached_tokens', 3}, {'output_tokens', 4},
    {'cost_micro_usd', 5}}) do
  fields[#fields + 1] = pair[1]
  fields[#fields + 1] = ARGV[pair[2]]
end
emit(KEYS[4], readJob(KEYS[3]).maxlen, fields)
if jobTtl > 0 then
  -- Retired already: these keys may have been created just now; they go with the job.
  redis.call('PEXPIRE', KEYS[1], jobTtl)
  redis.call('PEXPIRE', KEYS[2], jobTtl)
  if ARGV[7] == '*' then redis.call('PEXPIRE', KEYS[5], jobTtl) end
end
return reply(1, {counted = true})
