--[[
  Add partitions or subscriptions to a transactional producer's transaction, first opening one when
  its transaction key has none open (a Kafka transaction begins with the first thing added to it).
  KEYS[1] key      the transaction key's hash: epoch, pid, txn, timeout
  KEYS[2] seq      the coordinator's counter numbering transactions
  KEYS[3] open     sorted set of unfinished transactions by deadline
  KEYS[4] txnlog   the coordinator's transaction log
  KEYS[5] prefix   what every transaction's hash name starts with: the hash of id X is <prefix>X
  ARGV[1] name     the full key, "owner&key"
  ARGV[2] pid      the caller's producer id
  ARGV[3] epoch    the caller's producer epoch
  ARGV[4] coord    this coordinator's id: a new transaction's id is "<coord>:<next of seq>"
  ARGV[5] timeout  milliseconds before the reaper aborts a new transaction, unless the key has its own
  ARGV[6] max      the largest timeout allowed
  ARGV[7] now      epoch milliseconds
  ARGV[8] kind     "partition" or "subscription"
  ARGV[9] suffix   what the set of that kind's members adds to the transaction's hash name
  ARGV[10] items   the members to add, separated by newlines
  ARGV[11] arrived when the caller's request reached its gateway (the deployment's clock, Redis's), ""
                   for none: with no transaction open, one that arrived before the key's last
                   transaction was decided (txn-end-4) was meant for that one, held up on its way
                   here while its producer sent it again and went on; it would open a transaction
                   its producer knows nothing of, aborted at its timeout, fencing the producer
  Returns {0, transaction id, number newly added}; or {13, why, key's epoch} when the caller is not
  the key's producer (see refuse_producer), {24, id} when its transaction is still ending or the
  request came before it was decided (refused, retriably), {18, timeout} when the key's timeout is
  over the maximum.
]]
local rcall = redis.call
--- @include "txn"
--- @include "clock"

local k = rcall('HMGET', KEYS[1], 'epoch', 'pid', 'txn', 'timeout')
local refused = refuse_producer(k, ARGV[2], ARGV[3])
if refused then return refused end
local id = k[3] or ''
local state = id ~= '' and rcall('HGET', KEYS[5] .. id, 'state') or nil
if state == 'COMMITTING' or state == 'ABORTING' then return {24, id} end
if state ~= 'OPEN' then
  if ARGV[11] ~= '' and state then
    local decided = rcall('HGET', KEYS[5] .. id, 'decided')
    if decided and tonumber(ARGV[11]) < tonumber(decided) then return {24, id} end
  end
  local timeout = tonumber(k[4] or '0') > 0 and k[4] or ARGV[5]
  if tonumber(timeout) > tonumber(ARGV[6]) then return {18, timeout} end
  id = ARGV[4] .. ':' .. rcall('INCR', KEYS[2])
  open_txn(KEYS[5] .. id, KEYS[3], KEYS[4], id, timeout, ARGV[7], k[2], ARGV[3], ARGV[1])
  -- when it opened by Redis's own clock: an EndTxn that reached its gateway before then was meant
  -- for a transaction before this one (txn-end-4)
  rcall('HSET', KEYS[5] .. id, 'opened', string.format('%d', redis_now_ms()))
  rcall('HSET', KEYS[1], 'txn', id, 'updated', ARGV[7])
end
local txn = KEYS[5] .. id
return {0, id, add_members(txn, txn .. ARGV[9], KEYS[4], id, ARGV[8], ARGV[10], ARGV[7])}
