--[[
  recordUsage: add one model call's usage to its job's totals.

  Called by every worker and subagent of a job after each call; atomic, so
  totals are exact however many processes record at once.

  KEYS[1] usage hash       rf:{job}:usage

  ARGV[1] input tokens
  ARGV[2] cached input tokens (as the provider reported)
  ARGV[3] output tokens
  ARGV[4] cost in micro-USD (integer)
  ARGV[5] 1 if the call was a compaction (a summarizing call), else 0

  Returns {code, data, events}
     1  data = usage (the job's totals after this call, as a hash)
]]
--- @include "common"

local key = KEYS[1]
local input = tonumber(ARGV[1])
redis.call('HINCRBY', key, 'calls', 1)
redis.call('HINCRBY', key, 'input_tokens', input)
redis.call('HINCRBY', key, 'cached_tokens', tonumber(ARGV[2]))
redis.call('HINCRBY', key, 'output_tokens', tonumber(ARGV[3]))
redis.call('HINCRBY', key, 'cost_micro_usd', tonumber(ARGV[4]))
if ARGV[5] == '1' then redis.call('HINCRBY', key, 'compaction_calls', 1) end
if input > tonumber(redis.call('HGET', key, 'high_water') or '0') then
  redis.call('HSET', key, 'high_water', input)
end
return reply(1, {usage = redis.call('HGETALL', key)})
