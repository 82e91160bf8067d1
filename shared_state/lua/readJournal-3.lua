--[[
  readJournal: a task's own journal entries, as a claim that opens its run
  reads them (``journalOf``): for a run whose claim did not, and for tools
  that read one task's journal. Read only.

  KEYS[1] task hash        rf:{job}:task:<task_id>
  KEYS[2] job hash         rf:{job}:job
  KEYS[3] journal          rf:{job}:journal

  ARGV[1] the task id

  Returns {code, data, events}
     1  data = journal (the task's entries, as HGETALL gives them)
    error  a key in KEYS belongs to another job
]]
--- @include "common"
--- @include "journal"

local wrong = sameJob()
if wrong then return wrong end
return reply(1, {journal = journalOf(KEYS[3], KEYS[2], redis.call('HGETALL', KEYS[1]), ARGV[1])})
