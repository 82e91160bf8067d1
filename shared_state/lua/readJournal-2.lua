--[[
  readJournal: a task's own journal entries, read as a claim that opens its
  run reads them (``journalOf``: by their names, unless some entry of the job
  has none): for a run whose claim did not, and for a read of one task's
  journal. Writes nothing.

  KEYS[1] journal          rf:{job}:journal
  KEYS[2] journal's names  rf:{job}:journal:names

  ARGV[1] the task id

  Returns {code, data, events}
     1  data = journal (the task's entries, as HGETALL gives them)
    error  a key in KEYS belongs to another job
]]
--- @include "common"
--- @include "journal"

local wrong = sameJob()
if wrong then return wrong end
return reply(1, {journal = journalOf(KEYS[1], ARGV[1])})
