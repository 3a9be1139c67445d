--[[
  Read a transactional producer's current transaction, checking the producer against its key in the
  same step (Kafka's TxnOffsetCommit: is the group part of the open transaction?). Changes nothing.
  KEYS[1] key      the transaction key's hash: epoch, pid, txn
  KEYS[2] prefix   what every transaction's hash name starts with: the hash of id X is <prefix>X
  ARGV[1] pid      the caller's producer id
  ARGV[2] epoch    the caller's producer epoch
  ARGV[3] suffix   what the set to look in adds to the transaction's hash name
  ARGV[4] member   the member to look for in that set
  Returns {0, id or "", state or "", 1 when the member is in the set else 0}; or {13, why, key's
  epoch} when the caller is not the key's producer (see refuse_producer).
]]
local rcall = redis.call
--- @include "txn"

local k = rcall('HMGET', KEYS[1], 'epoch', 'pid', 'txn')
local refused = refuse_producer(k, ARGV[1], ARGV[2])
if refused then return refused end
local id = k[3] or ''
if id == '' then return {0, '', '', 0} end
local txn = KEYS[2] .. id
return {0, id, rcall('HGET', txn, 'state') or '', rcall('SISMEMBER', txn .. ARGV[3], ARGV[4])}
