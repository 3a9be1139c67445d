--[[
  Add one cleaned batch to the next generation of a partition's cleaned log, under the entry ID
  it had: readers see none of it until clean-switch-4 makes that generation current.
  KEYS[1] meta     the partition's meta hash
  KEYS[2] build    the cleaned stream of generation cg+1
  ARGV[1] epoch    the cleaner role's lease epoch
  ARGV[2] gen      the generation being built: cg+1
  ARGV[3] base     the batch's base offset
  ARGV[4] span     the offsets it spans (last offset delta + 1), its entry's `n`
  ARGV[5] maxts    its entry's `t` (running maximum timestamp) as the log had it
  ARGV[6] batch    the rewritten RecordBatch v2
  Returns {0} or {code}: 2 no such partition, 13 an older epoch or another generation.
]]
local rcall = redis.call
--- @include "entry"
--- @include "role"

local meta = rcall('HMGET', KEYS[1], 'hw', 'cg')
if not meta[1] then return {2} end
if role_stale(KEYS[1], 'clean_epoch', tonumber(ARGV[1])) then return {13} end
if tonumber(meta[2] or '0') + 1 ~= tonumber(ARGV[2]) then return {13} end
rcall('XADD', KEYS[2], entry_id(tonumber(ARGV[3])), 'b', ARGV[6], 'n', ARGV[4], 't', ARGV[5])
return {0}
