--[[
  mirrorEvents: append a batch of job events to the global stream, in order.

  The job scripts return the events they wrote to a job's stream; the clients
  mirror them here in batches (see shared_state/events.py). One call per batch
  instead of one XADD each: the batch is one command to send and to parse.

  KEYS[1] global event stream rf:events

  ARGV[1] MAXLEN of the stream (approximate trimming)
  ARGV[2..] for each event: the number of field and value strings, then those
          strings (field, value, field, value, ...)

  Returns the number of entries added (a plain integer: this script writes no
  job state, so it has no {code, data, events} reply).
]]
local at, added = 2, 0
while at <= #ARGV do
  local count = tonumber(ARGV[at])
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(ARGV, at + 1, at + count))
  at, added = at + count + 1, added + 1
end
return added
