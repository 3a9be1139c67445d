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
if rcall('EXISTS', KEYS[1]) == 1 then return {4} end
local deadline = tonumber(ARGV[3]) + tonumber(ARGV[2])
rcall('HSET', KEYS[1], 'state', 'OPEN', 'timeout', ARGV[2], 'start', ARGV[3], 'updated', ARGV[3],
  'pid', ARGV[4], 'epoch', ARGV[5], 'owner', ARGV[6])
rcall('ZADD', KEYS[2], string.format('%d', deadline), ARGV[1])
if ARGV[7] ~= '' then
  rcall('HSET', KEYS[1], 'group', ARGV[7], 'gid', ARGV[8])
  rcall('ZADD', KEYS[4], ARGV[8], ARGV[1])
end
rcall('XADD', KEYS[3], 'MAXLEN', '~', 100000, '*', 'op', 'NEW', 'txn', ARGV[1], 'state', 'OPEN',
  'timeout', ARGV[2], 'pid', ARGV[4], 'epoch', ARGV[5], 'owner', ARGV[6])
return {0}
