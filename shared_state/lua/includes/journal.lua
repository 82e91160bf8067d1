--[[
  A task's journal entries, read by their names rather than found by scanning
  the job's journal: the journal is one hash for all the job's tasks, and a
  scan for one task's prefix costs the whole hash (in a job of 5,000 entries,
  ~2 ms of the server's time a claim). Every entry's name (its field,
  `<task_id>:<target>:<stage>`) is also a member of the job's names, a sorted
  set whose members all score 0, so a task's names are one range of it by
  their prefix (ZRANGEBYLEX), in O(log N + the task's own).

  journalWrite(journalKey, field, value)
                          write one entry and add its name
  journalOf(journalKey, taskId)
                          the entries of task `taskId`, as HGETALL would give
                          them: by their names when the job's names are as many
                          as its entries (every entry was written with its
                          name); else (a job written before the names were
                          kept, or an entry written without one) by scanning
                          the job's journal for the task's prefix. An entry
                          whose name was added since counts again, so a job
                          scanned for an older worker's entries is read by
                          name once they are all written again.

  The names' key is the journal's with ':names': the same job, the same slot.
]]
local function journalWrite(journalKey, field, value)
  redis.call('HSET', journalKey, field, value)
  redis.call('ZADD', journalKey .. ':names', 0, field)
end

local function journalOf(journalKey, taskId)
  local namesKey = journalKey .. ':names'
  local entries = {}
  if redis.call('ZCARD', namesKey) == redis.call('HLEN', journalKey) then
    -- Every name of the task starts with '<task_id>:', and ';' follows ':'.
    local names = redis.call('ZRANGEBYLEX', namesKey, '[' .. taskId .. ':', '(' .. taskId .. ';')
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
