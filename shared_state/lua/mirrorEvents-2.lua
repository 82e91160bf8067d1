--[[
  mirrorEvents: append a batch of job events to the global stream, in order,
  and count them in the fleet's metrics hash.

  The job scripts return the events they wrote to a job's stream; the clients
  mirror them here in batches (see shared_state/events.py). One call per batch
  instead of one XADD each: the batch is one command to send and to parse.

  KEYS[1] global event stream rf:events
  KEYS[2] fleet metrics hash  rf:metrics

  ARGV[1] MAXLEN of the stream (approximate trimming)
  ARGV[2..] for each event: the number of field and value strings, then those
          strings (field, value, field, value, ...)

  Counted in KEYS[2] (what `/metrics` serves; see coordinator/metrics.py):
    event|<name>|<role>        every event, by name and role ('' if none)
    reaps, redeliveries        attempts ended by an expired lease, lost deliveries
    tokens|input|cached|output model.called tokens; cost_micro_usd, and
    cost_micro_usd|<tenant>    by the tenant the call's job runs for
    latency|le|<ms>, latency|count, latency|sum   the step latency histogram (cumulative;
                               steps only, not summarizing calls)
    high_water                 the largest input of any call (tokens)

  A batch re-sent after a lost reply is counted twice, as it is mirrored twice.

  Returns the number of entries added (a plain integer: this script writes no
  job state, so it has no {code, data, events} reply).
]]
local LATENCY_BUCKETS_MS = {100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000}
local metrics = KEYS[2]
local at, added = 2, 0
while at <= #ARGV do
  local count = tonumber(ARGV[at])
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(ARGV, at + 1, at + count))
  local f = {}
  for i = at + 1, at + count, 2 do f[ARGV[i]] = ARGV[i + 1] end
  local name = f['event'] or '?'
  redis.call('HINCRBY', metrics, 'event|' .. name .. '|' .. (f['role'] or ''), 1)
  local reason = f['reason'] or ''
  if name == 'task.requeued' or name == 'task.dead' then
    if string.sub(reason, 1, 13) == 'lease expired' then redis.call('HINCRBY', metrics, 'reaps', 1)
    elseif string.sub(reason, 1, 13) == 'delivery lost' then
      redis.call('HINCRBY', metrics, 'redeliveries', 1)
    end
  elseif name == 'model.called' then
    local input = tonumber(f['input_tokens'] or '0') or 0
    redis.call('HINCRBY', metrics, 'tokens|input', input)
    redis.call('HINCRBY', metrics, 'tokens|cached', tonumber(f['cached_tokens'] or '0') or 0)
    redis.call('HINCRBY', metrics, 'tokens|output', tonumber(f['output_tokens'] or '0') or 0)
    local cost = tonumber(f['cost_micro_usd'] or '0') or 0
    redis.call('HINCRBY', metrics, 'cost_micro_usd', cost)
    if f['tenant'] then redis.call('HINCRBY', metrics, 'cost_micro_usd|' .. f['tenant'], cost) end
    if input > tonumber(redis.call('HGET', metrics, 'high_water') or '0') then
      redis.call('HSET', metrics, 'high_water', input)
    end
    local ms = tonumber(f['latency_ms'] or '')
    if ms and f['kind'] ~= 'compaction' then  -- a summarizing call is not a step
      for _, le in ipairs(LATENCY_BUCKETS_MS) do
        if ms <= le then redis.call('HINCRBY', metrics, 'latency|le|' .. le, 1) end
      end
      redis.call('HINCRBY', metrics, 'latency|count', 1)
      redis.call('HINCRBY', metrics, 'latency|sum', math.floor(ms))
    end
  end
  at, added = at + count + 1, added + 1
end
return added
