--[[
  mirrorEvents: append a batch of job events to the global stream, in order,
  and add what they count to the fleet's metrics hash.

  The job scripts return the events they wrote to a job's stream; the clients
  mirror them here in batches (see shared_state/events.py). One call per batch
  instead of one XADD each: the batch is one command to send and to parse. The
  client sums the batch's counters (``events.fleet_counts``), so a counter costs
  one increment a batch, however many events it counts.

  KEYS[1] global event stream rf:events
  KEYS[2] fleet metrics hash  rf:metrics

  ARGV[1] MAXLEN of the stream (approximate trimming)
  ARGV[2] the largest input of the batch's model calls (tokens; 0 if none): the
          hash's high_water is raised to it
  ARGV[3] the number of counters, then that many name, increment pairs
  ARGV[..] for each event: the number of field and value strings, then those
          strings (field, value, field, value, ...)

  A batch re-sent after a lost reply is counted twice, as it is mirrored twice.

  Returns the number of entries added (a plain integer: this script writes no
  job state, so it has no {code, data, events} reply).
]]
local metrics = KEYS[2]
local highWater = tonumber(ARGV[2])
if highWater > tonumber(redis.call('HGET', metrics, 'high_water') or '0') then
  redis.call('HSET', metrics, 'high_water', highWater)
end
local at = 4
for _ = 1, tonumber(ARGV[3]) do
  redis.call('HINCRBY', metrics, ARGV[at], ARGV[at + 1])
  at = at + 2
end
local added = 0
while at <= #ARGV do
  local count = tonumber(ARGV[at])
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(ARGV, at + 1, at + count))
  at, added = at + count + 1, added + 1
end
return added
