--[[
  Unlist every tiered segment of a partition whose topic turned remote storage off with
  remote.log.delete.on.disable: the log start moves to the local log start, as Kafka's
  RemoteLogManager moves it when it deletes a disabled topic's remote data.
  KEYS[1] meta      the partition's meta hash (`ls`, `te` go)
  KEYS[2] manifest  the partition's segments (see tier-add-2.lua)
  KEYS[3] aborted   aborted transaction ranges, pruned below the new start
  ARGV[1] epoch     the tiering role's lease epoch
  Returns {0, new log start, segments unlisted...}, or {code}: 2 no such partition, 13 a stale epoch.
]]
local rcall = redis.call
--- @include "role"

local meta = rcall('HMGET', KEYS[1], 'hw', 'start', 'ls')
if not meta[1] then return {2} end
if role_stale(KEYS[1], 'tier_epoch', tonumber(ARGV[1])) then return {13} end
local start = math.max(tonumber(meta[2]), tonumber(meta[3] or '0'))
local segs = rcall('ZRANGE', KEYS[2], 0, -1)
rcall('DEL', KEYS[2])
rcall('HDEL', KEYS[1], 'ls', 'te')
rcall('HSET', KEYS[1], 'start', string.format('%d', start))
rcall('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. string.format('%d', start))
local out = {0, start}
for _, m in ipairs(segs) do out[#out + 1] = m end
return out
