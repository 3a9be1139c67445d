--[[
  Start growing a topic (CreatePartitions), if its record is still the version the new count was
  checked against: the new partitions are made next (partition-init-1) and shown by
  topic-settle-2; until then readers see the old count.
  KEYS[1] topics   the registry: topic name -> msgpack record
  KEYS[2] seq      counter numbering incarnations and record versions
  ARGV[1] name     the topic
  ARGV[2] version  the record's version the count was checked against
  ARGV[3] total    the partition count it grows to
  Returns {0, record} with n = total; {1} when the record changed since `version` (check again);
  {2} when there is no such topic, or its partitions are not shown yet.
]]
local rcall = redis.call
--- @include "topic"

local rec = topic_get(KEYS[1], ARGV[1])
if not rec or rec['p'] == 0 then return {2} end
if incarnation(rec['v']) ~= tonumber(ARGV[2]) or rec['n'] then return {1} end
rec['n'] = tonumber(ARGV[3])
return {0, topic_put(KEYS[1], KEYS[2], ARGV[1], rec)}
