--[[
  Give a topic made before topic ids existed its id (KIP-516's): the first gateway to ask sets
  it, every later call finds it set and returns it, so all gateways agree on one id.
  KEYS[1] topics   the registry: topic name -> msgpack record
  KEYS[2] seq      counter numbering incarnations and record versions
  ARGV[1] name     the topic
  ARGV[2] id       a random topic id (16 bytes, hex), used only when the record has none
  Returns {0, record} with its id; {2} when there is no such topic.
]]
local rcall = redis.call
--- @include "topic"

local rec, raw = topic_get(KEYS[1], ARGV[1])
if not rec then return {2} end
if rec['id'] and rec['id'] ~= '' then return {0, raw} end
rec['id'] = ARGV[2]
return {0, topic_put(KEYS[1], KEYS[2], ARGV[1], rec)}
