--[[
  Delete a topic: its record leaves the registry, and its incarnation joins those whose partitions
  are to be dropped (partition-drop-1, partition-purge-1, then topic-dropped-1), by this gateway
  or, should it stop, by the next one to finish deletions.
  KEYS[1] topics    the registry: topic name -> msgpack record
  KEYS[2] dropping  hash: "<incarnation>:<topic>" -> partitions to drop
  ARGV[1] name      the topic
  ARGV[2] id        its topic id, or "" for whichever topic has the name now: a delete by id never
                    deletes a topic created again under the name since
  Returns {0, incarnation, partitions}, or {2} when there is no such topic (with that id) or its
  partitions are not shown yet.
]]
local rcall = redis.call
--- @include "topic"

local rec = topic_get(KEYS[1], ARGV[1])
if not rec or rec['p'] == 0 then return {2} end
if ARGV[2] ~= '' and rec['id'] ~= ARGV[2] then return {2} end
local gen, partitions = incarnation(rec['g']), math.max(rec['p'], rec['n'] or 0)
rcall('HDEL', KEYS[1], ARGV[1])
rcall('HSET', KEYS[2], string.format('%d:%s', gen, ARGV[1]), partitions)
return {0, gen, partitions}
