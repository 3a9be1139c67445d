--[[
  The point of no return: OPEN becomes COMMITTING or ABORTING, durably, before any marker is written.
  The transaction is named by its id, or by the transaction key of the producer ending it (Kafka's
  EndTxn), whose producer id and epoch are checked in the same step.
  KEYS[1] key      the transaction key's hash when named by it or fenced (any name of this slot otherwise)
  KEYS[2] open     sorted set of unfinished transactions by deadline
  KEYS[3] txnlog   the coordinator's transaction log
  KEYS[4] prefix   what every transaction's hash name starts with: the hash of id X is <prefix>X
  ARGV[1] id       the transaction id, "" for the key's current one
  ARGV[2] action   "commit" or "abort"
  ARGV[3] pid      the producer id of the key's caller, "" when named by id
  ARGV[4] epoch    the caller's producer epoch, -1 to skip the check
  ARGV[5] now      epoch milliseconds
  ARGV[6] sets     what the transaction's sets add to its hash name: partitions, subscriptions and
                   what its end settles, separated by spaces
  ARGV[7] bump     "1": transactions V2 (KIP-890), the key's epoch moves on as its transaction ends
                   and the markers carry the new epoch; "0" otherwise
  ARGV[8] next_pid with bump, the key's new producer id when the caller's epoch is the last one
                   (it starts again at epoch 0), else ""
  ARGV[9] fence    named by id, the reaper's abort of a transaction past its timeout: the
                   transaction.version its producer is fenced at when KEYS[1] is its key and holds it
                   as its current transaction ("0": not at all). The key's epoch moves on by one; at
                   2 the epoch before is kept as the key's last (a producer presenting it to
                   InitProducerId carries on, KIP-360), below 2 no last epoch is kept
  ARGV[10] arrived named by its key under transactions V1, when the caller's request reached its
                   gateway (epoch milliseconds on the deployment's clock, Redis's), else ""
  Returns {0, state, pid, epoch, partitions, subscriptions, settles, id, marked, key pid, key epoch}
  where state is the one to roll forward (a repeated request for the same outcome answers the same
  way; under V2 a repeat carries the epoch before the bump), pid and epoch the markers', marked is
  1 when the transaction records what its end settles (0: opened by an older gateway, settle all),
  and key pid and epoch the producer's from now on;
  {code} on error: 25 no such transaction, 22 the other outcome was decided already (with the
  state), 23 fenced by a newer epoch, 13 the caller is not the key's producer (see refuse_producer),
  24 the key's transaction opened after the request arrived (with its id).
]]
local rcall = redis.call
--- @include "txn"
--- @include "clock"

local id = ARGV[1]
local bump = ARGV[7] == '1'
local k = {}
local retry = false
if ARGV[3] ~= '' then
  k = rcall('HMGET', KEYS[1], 'epoch', 'pid', 'txn')
  local refused = refuse_producer(k, ARGV[3], ARGV[4])
  -- KIP-890: a V2 producer retrying an end whose bump happened still carries the epoch before it
  retry = refused ~= nil and bump and refused[2] == 'fenced' and tonumber(ARGV[4]) == tonumber(k[1]) - 1
  if refused and not retry then return refused end
  id = k[3] or ''
  if id == '' then return {25} end
end
local txn = KEYS[4] .. id
local t = rcall('HMGET', txn, 'state', 'epoch', 'pid', 'marked', 'opened')
if not t[1] then return {25} end
-- An EndTxn of transactions V1 names no transaction: one held up on its way here (its gateway cut
-- off from Redis) while the producer, answered through another, began the next, would end that
-- one, its records without its offsets (tests/jepsen's soak, sentinel:659359618). It reached its
-- gateway before this transaction opened, so it was meant for one before: refused, retriably (a
-- clock read late refuses a timely one at worst, which the producer sends again). Under V2 the
-- epoch the end moved on fences it.
if ARGV[10] ~= '' and not bump and t[1] == 'OPEN' and t[5] and tonumber(ARGV[10]) < tonumber(t[5]) then
  return {24, id}
end
local want = (ARGV[2] == 'commit') and 'COMMITTING' or 'ABORTING'
local done = (ARGV[2] == 'commit') and 'COMMITTED' or 'ABORTED'
-- a retry finds its transaction ended (the other outcome: 22, as any repeat), never a newer one open
if retry and t[1] == 'OPEN' then return {13, 'fenced', tonumber(k[1])} end
if not retry and ARGV[4] ~= '-1' and tonumber(ARGV[4]) < tonumber(t[2]) then return {23} end
local state = t[1]
if state == 'OPEN' then
  state = want
  if bump then
    -- TransactionMetadata.prepareAbortOrCommit under TV2: the markers carry the epoch after the
    -- caller's, which the key now holds (or, at the last epoch, a new producer id from epoch 0), the
    -- caller's kept as the key's last (but not across a new producer id, as prepareComplete)
    t[2] = string.format('%d', tonumber(ARGV[4]) + 1)
    k[1] = t[2]
    if ARGV[8] ~= '' then k[1], k[2] = '0', ARGV[8] end
    rcall('HSET', KEYS[1], 'epoch', k[1], 'pid', k[2], 'last', ARGV[8] == '' and ARGV[4] or '')
    rcall('HSET', txn, 'epoch', t[2])
  elseif ARGV[3] == '' and ARGV[9] ~= '0' then
    -- TransactionCoordinator.abortTimedOutTransactions: the producer is fenced as its transaction
    -- is aborted, the markers carrying the key's new epoch
    k = rcall('HMGET', KEYS[1], 'epoch', 'pid', 'txn')
    if k[3] == id and k[2] == t[3] then
      local last = ARGV[9] == '2' and k[1] or ''
      t[2] = string.format('%d', tonumber(k[1]) + 1)
      k[1] = t[2]
      rcall('HSET', KEYS[1], 'epoch', k[1], 'last', last)
      rcall('HSET', txn, 'epoch', t[2])
    else
      k = {}
    end
  end
  -- decided when, by Redis's own clock: an AddPartitionsToTxn or AddOffsetsToTxn that reached its
  -- gateway before then was meant for this transaction, not a next one (txn-join-5)
  rcall('HSET', txn, 'state', state, 'updated', ARGV[5], 'decided', string.format('%d', redis_now_ms()))
  rcall('ZADD', KEYS[2], 0, id)
  rcall('XADD', KEYS[3], 'MAXLEN', '~', 100000, '*', 'op', 'UPDATE', 'txn', id, 'state', state)
elseif state ~= want and state ~= done then
  return {22, state}
end
local sets = {}
for suffix in string.gmatch(ARGV[6], '%S+') do table.insert(sets, rcall('SMEMBERS', txn .. suffix)) end
return {0, state, t[3], t[2], sets[1], sets[2], sets[3], id, t[4] and 1 or 0, k[2] or t[3], k[1] or t[2]}
