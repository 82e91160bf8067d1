--[[
  A task's journal entries, read by their names rather than found by scanning
  the job's journal: the job's journal is one hash for all its tasks, and a
  scan for one task's prefix costs the whole hash (a claim in a job of 2,000
  entries scanned them all, ~0.5 ms of the server's time, on every claim).

  journalWrite(journalKey, taskKey, jobKey, field, value)
                          write one entry; the task hash names it (a field
                          'journal:<field>') and the job hash counts the entries
                          written so (journal_indexed)
  journalOf(journalKey, jobKey, task, taskId)
                          the entries of task `taskId` (`task`: its hash, as
                          HGETALL gives it), as HGETALL would give them: by the
                          names its hash holds when every entry of the job was
                          written by journalWrite (journal_indexed equals the
                          journal's length); else (a job written before the
                          names were kept, or an entry written without one) by
                          scanning the job's journal for the task's prefix
]]
local function journalWrite(journalKey, taskKey, jobKey, field, value)
  if redis.call('HSET', journalKey, field, value) == 1 then
    redis.call('HINCRBY', jobKey, 'journal_indexed', 1)
  end
  redis.call('HSET', taskKey, 'journal:' .. field, '1')
end

local function journalOf(journalKey, jobKey, task, taskId)
  local entries = {}
  local indexed = tonumber(redis.call('HGET', jobKey, 'journal_indexed') or '0')
  if indexed == redis.call('HLEN', journalKey) then
    local names = {}
    for i = 1, #task, 2 do
      if string.sub(task[i], 1, 8) == 'journal:' then names[#names + 1] = string.sub(task[i], 9) end
    end
    for first = 1, #names, 1000 do  -- unpack's stack is bounded: a thousand at a time
      local last = math.min(first + 999, #names)
      local values = redis.call('HMGET', journalKey, unpack(names, first, last))
      for i = 1, last - first + 1 do
        if values[i] then
          entries[#entries + 1] = names[first + i - 1]
          entries[#entries + 1] = values[i]
        end
      end
    end
    return entries
  end
  local pattern = string.gsub(taskId, '([%*%?%[%]\\])', '\\%1') .. ':*'
  local seen, cursor = {}, '0'
  repeat
    local page = redis.call('HSCAN', journalKey, cursor, 'MATCH', pattern, 'COUNT', 1000)
    cursor = page[1]
    for i = 1, #page[2], 2 do
      local key = page[2][i]
      if not seen[key] then
        seen[key] = true
        entries[#entries + 1] = key
        entries[#entries + 1] = page[2][i + 1]
      end
    end
  until cursor == '0'
  return entries
end
