--[[
  List a copied segment in a partition's tiered-storage manifest (KIP-405's COPY_SEGMENT_FINISHED).
  KEYS[1] meta      the partition's meta hash: `te` is the end of the tiered range (the next offset to copy)
  KEYS[2] manifest  sorted set of segments: member "base:next:max ts:bytes before:size:segment id", score base
  ARGV[1] epoch     the tiering role's lease epoch (see includes/role.lua)
  ARGV[2] base      the segment's first batch's base offset
  ARGV[3] next      the offset after its last batch
  ARGV[4] member    the segment as the manifest lists it
  Returns {0, next} when listed; {9, te} when a segment from `base` on is listed already (a copy
  repeated after a stop: its objects are orphans); {code}: 2 no such partition, 13 a stale epoch.
]]
local rcall = redis.call
--- @include "role"

local meta = rcall('HMGET', KEYS[1], 'hw', 'te')
if not meta[1] then return {2} end
if role_stale(KEYS[1], 'tier_epoch', tonumber(ARGV[1])) then return {13} end
local te = tonumber(meta[2] or '-1')
if tonumber(ARGV[2]) < te then return {9, te} end
rcall('ZADD', KEYS[2], ARGV[2], ARGV[4])
rcall('HSET', KEYS[1], 'te', ARGV[3])
return {0, tonumber(ARGV[3])}
