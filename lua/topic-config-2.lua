--[[
  Replace a topic's configs, if its record is still the version they were computed from (so a
  change racing another, or a delete, is never lost nor brings a deleted topic back).
  KEYS[1] topics   the registry: topic name -> msgpack record
  KEYS[2] seq      counter numbering incarnations and record versions
  ARGV[1] name     the topic
  ARGV[2] version  the record's version the configs were computed from
  ARGV[3] config   msgpack map: every config set on the topic
  Returns {0, record} as changed; {1} when the record changed since `version` (compute again);
  {2} when there is no such topic, or its partitions are not shown yet.
]]
local rcall = redis.call
--- @include "topic"

local rec = topic_get(KEYS[1], ARGV[1])
if not rec or rec['p'] == 0 then return {2} end
if incarnation(rec['v']) ~= tonumber(ARGV[2]) then return {1} end
rec['c'] = cmsgpack.unpack(ARGV[3])
return {0, topic_put(KEYS[1], KEYS[2], ARGV[1], rec)}
