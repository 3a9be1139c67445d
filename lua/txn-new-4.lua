--[[
  Open a transaction: its hash, its deadline in the open set, and a NEW entry in the transaction log.
  KEYS[1] txn      the transaction's hash
  KEYS[2] open     sorted set of unfinished transactions by deadline (0: due for roll-forward)
  KEYS[3] txnlog   the coordinator's transaction log (a stream)
  KEYS[4] children the open transactions a transaction key's group commits will settle, by commit id
                   (any name without a group)
  ARGV[1] id       the transaction id, "<coordinator>:<sequence>"
  ARGV[2] timeout  milliseconds the client may take before the reaper aborts it
  ARGV[3] now      epoch milliseconds
  ARGV[4] pid      the producer id its batches carry
  ARGV[5] epoch    the producer epoch its batches carry
  ARGV[6] owner    the transaction key ("owner&key") or transactional.id it belongs to, "" for none
  ARGV[7] group    the transaction key whose group commit is to commit it, "" for none
  ARGV[8] gid      the commit id of that group commit: a later one that leaves it out aborts it
  Returns {0} or {4} when the id is taken.
]]
local rcall = redis.call
--- @include "txn"

if rcall('EXISTS', KEYS[1]) == 1 then return {4} end
open_txn(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
if ARGV[7] ~= '' then
  rcall('HSET', KEYS[1], 'group', ARGV[7], 'gid', ARGV[8])
  rcall('ZADD', KEYS[4], ARGV[8], ARGV[1])
end
return {0}
