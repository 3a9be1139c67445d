--[[
  Open a transaction for a transaction key's current epoch: at most one unfinished per key.
  KEYS[1] key      the transaction key's hash
  KEYS[2] txn      the new transaction's hash
  KEYS[3] open     the coordinator's sorted set of unfinished transactions
  KEYS[4] txnlog   the coordinator's transaction log
  KEYS[5] prevtxn  the hash of the key's previous transaction as the caller saw it (any name if none)
  ARGV[1] id       the new transaction's id
  ARGV[2] epoch    the caller's epoch
  ARGV[3] timeout  milliseconds before the reaper aborts it
  ARGV[4] now      epoch milliseconds
  ARGV[5] pid      the producer id its batches carry, "" for the key's own
  ARGV[6] name     the full key, "owner&key"
  ARGV[7] seen     the previous transaction's id as the caller saw it, "" for none
  Returns {0, pid}, or {code}: 13 a stale epoch, 24 the previous transaction is still ending (with its
  id) or changed since the caller looked.
]]
local rcall = redis.call
--- @include "txn"

local cur = rcall('HMGET', KEYS[1], 'epoch', 'pid', 'txn')
if not cur[1] or tonumber(ARGV[2]) ~= tonumber(cur[1]) then return {13} end
local prev = cur[3] or ''
if prev ~= ARGV[7] then return {24, prev} end
if prev ~= '' then
  local state = rcall('HGET', KEYS[5], 'state')
  if state and state ~= 'COMMITTED' and state ~= 'ABORTED' then return {24, prev} end
end
local pid = ARGV[5] ~= '' and ARGV[5] or cur[2]
open_txn(KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[3], ARGV[4], pid, ARGV[2], ARGV[6])
rcall('HSET', KEYS[1], 'txn', ARGV[1], 'updated', ARGV[4])
return {0, pid}
