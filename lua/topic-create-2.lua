--[[
  Register a new topic with its partitions still to be made: the one step that decides which of
  racing creates wins. The winner (or any gateway that finds the record, should it stop) then makes
  the partitions (partition-init-1) and shows them (topic-settle-2).
  KEYS[1] topics      the registry: topic name -> msgpack record
  KEYS[2] seq         counter numbering incarnations and record versions
  ARGV[1] name        the topic
  ARGV[2] partitions  how many partitions it gets
  ARGV[3] config      msgpack map of its configs
  ARGV[4] created     creation time, ms
  ARGV[5] id          a random topic id (16 bytes, hex)
  Returns {0, record}: the new record, with p 0 (none shown yet) and n the partitions to make; or
  {4, record} with the record of the topic that exists.
]]
local rcall = redis.call
--- @include "topic"

local _, existing = topic_get(KEYS[1], ARGV[1])
if existing then return {4, existing} end
local rec = {
  p = 0, n = tonumber(ARGV[2]), c = cmsgpack.unpack(ARGV[3]), t = tonumber(ARGV[4]), id = ARGV[5],
  g = rcall('INCR', KEYS[2]),
}
return {0, topic_put(KEYS[1], KEYS[2], ARGV[1], rec)}
