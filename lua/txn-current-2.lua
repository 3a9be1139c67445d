--[[
  Read a transactional producer's current transaction, checking the producer against its key in the
  same step (Kafka's TxnOffsetCommit: is the group part of the open transaction?). Changes nothing.
  KEYS[1] key      the transaction key's hash: epoch, pid, txn
  KEYS[2] prefix   what every transaction's hash name starts with: the hash of id X is <prefix>X
  ARGV[1] pid      the caller's producer id
  ARGV[2] epoch    the caller's producer epoch
  ARGV[3] suffix   what the set to look in adds to the transaction's hash name
  ARGV[4] member   the member to look for in that set
  ARGV[5] arrived  when the caller's request reached its gateway (the deployment's clock, Redis's), ""
                   for none: a transaction that opened after it is not the one the request meant
                   (a TxnOffsetCommit held up on its way here while its producer went on would stage
                   its older offsets in the next transaction)
  Returns {0, id or "", state or "", 1 when the member is in the set else 0}; or {13, why, key's
  epoch} when the caller is not the key's producer (see refuse_producer); {24, id} when the
  transaction opened after the request arrived.
]]
local rcall = redis.call
--- @include "txn"

local k = rcall('HMGET', KEYS[1], 'epoch', 'pid', 'txn')
local refused = refuse_producer(k, ARGV[1], ARGV[2])
if refused then return refused end
local id = k[3] or ''
if id == '' then return {0, '', '', 0} end
local txn = KEYS[2] .. id
local t = rcall('HMGET', txn, 'state', 'opened')
if ARGV[5] ~= '' and t[2] and tonumber(ARGV[5]) < tonumber(t[2]) then return {24, id} end
return {0, id, t[1] or '', rcall('SISMEMBER', txn .. ARGV[3], ARGV[4])}
