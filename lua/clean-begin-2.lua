--[[
  Start a cleaner pass on a compacted partition: take it for this role epoch and empty the stream
  the pass builds the next generation of the cleaned log in (a pass stopped half-way left it).
  KEYS[1] meta     the partition's meta hash (cg: cleaned generation, cb: clean boundary)
  KEYS[2] build    the cleaned stream of generation cg+1 (`clean0`/`clean1` by its parity)
  ARGV[1] epoch    the cleaner role's lease epoch (see includes/role.lua)
  ARGV[2] gen      the generation the caller read: cg
  Returns {0, hw, start, cb} or {code}: 2 no such partition, 13 an older epoch or another generation.
]]
local rcall = redis.call
--- @include "role"

local meta = rcall('HMGET', KEYS[1], 'hw', 'start', 'cb', 'cg')
if not meta[1] then return {2} end
if role_stale(KEYS[1], 'clean_epoch', tonumber(ARGV[1])) then return {13} end
if tonumber(meta[4] or '0') ~= tonumber(ARGV[2]) then return {13} end
rcall('UNLINK', KEYS[2])
return {0, tonumber(meta[1]), tonumber(meta[2]), tonumber(meta[3] or '0')}
