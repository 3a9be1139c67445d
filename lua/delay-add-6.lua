--[[
  Schedule delayed messages on a partition; those already due go straight into the log.
  KEYS[1] log      the partition's stream
  KEYS[2] meta     the partition's meta hash (hw, start, maxts, bytes)
  KEYS[3] dmeta    the delay index's meta hash (seq, n, since, bid)
  KEYS[4] held     stream of the waiting messages' batches
  KEYS[5] open     the open bucket: sorted set by delivery time
  KEYS[6] buckets  sealed buckets by the delivery time of their head
  ARGV[1] now          milliseconds
  ARGV[2] bucket_max   messages after which the open bucket is sealed
  ARGV[3] span         milliseconds after which the open bucket is sealed
  ARGV[4] seg          entries per segment of a sealed bucket
  ARGV[5] max_buckets  sealed buckets before the two smallest adjacent ones merge
  ARGV[6] items        msgpack list of {deliver at, batch, record count, max timestamp}
  Returns {0, held, earliest delivery time held or -1}, {2} when there is no such partition.
]]
local rcall = redis.call
--- @include "entry"
--- @include "delay"

local K = {log = KEYS[1], meta = KEYS[2], dmeta = KEYS[3], held = KEYS[4], open = KEYS[5], buckets = KEYS[6]}
local C = {bucket_max = tonumber(ARGV[2]), span = tonumber(ARGV[3]), seg = tonumber(ARGV[4]),
           max_buckets = tonumber(ARGV[5])}
local held, first = dl_schedule(K, C, tonumber(ARGV[1]), cmsgpack.unpack(ARGV[6]))
if held == nil then return {2} end
return {0, held, first}
