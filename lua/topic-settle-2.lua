--[[
  Show the partitions made for a topic: its record's pending count `n` becomes its count `p`.
  Idempotent: whoever finds partitions pending makes them and settles, so a creator (or grower)
  that stops half-way leaves a topic that is either not shown yet or whole.
  KEYS[1] topics   the registry: topic name -> msgpack record
  KEYS[2] seq      counter numbering incarnations and record versions
  ARGV[1] name     the topic
  ARGV[2] gen      the incarnation whose partitions were made
  ARGV[3] target   the pending count they were made for
  Returns {0, record} as it is now (settled, or pending another count), or {2} when that
  incarnation is gone: deleted, maybe created again since.
]]
local rcall = redis.call
--- @include "topic"

local rec, raw = topic_get(KEYS[1], ARGV[1])
if not rec or incarnation(rec['g']) ~= tonumber(ARGV[2]) then return {2} end
if rec['n'] == tonumber(ARGV[3]) then
  rec['p'] = rec['n']
  rec['n'] = nil
  raw = topic_put(KEYS[1], KEYS[2], ARGV[1], rec)
end
return {0, raw}
