--[[
  Write a transaction's commit or abort marker on one partition; safe to repeat.
  KEYS[1] log      the partition's stream
  KEYS[2] meta     the partition's meta hash
  KEYS[3] txns     open transactions on the partition: pid -> "first offset:epoch"
  KEYS[4] aborted  aborted ranges: member "pid:first offset", score = marker offset
  KEYS[5] pids     idempotent producer state: a marker of a newer epoch fences the older one's writes
  KEYS[6] expected transactions V1 has added this partition to: an ended one's entry goes, so a
                   write that arrives after its end opens nothing (append-5's verify)
  ARGV[1] pid      the transaction's producer id
  ARGV[2] epoch    the transaction's producer epoch
  ARGV[3] marker   the control batch (RecordBatch v2) to append
  ARGV[4] commit   1 to commit, 0 to abort
  ARGV[5] always   1: Kafka's WriteTxnMarkers, which appends the marker whether or not a transaction
                   of the producer is open (it takes an offset; a marker with nothing before it
                   aborts no range) and refuses an epoch older than the producer's (Kafka's
                   ProducerAppendInfo.checkProducerEpoch); 0: the coordinator's own ending, safe to
                   repeat, which writes only the marker of an open transaction and skips a stale epoch
  ARGV[6] txn      the transaction's id ('' with always, and for a transaction that is its own
                   producer, which no later one follows), "<coordinator>:<sequence>": its first
                   marker here leaves "<pid>:txn" = "ended:<txn>" in `expected`, and a later one of
                   it or of an older transaction (a second roll-forward of its end: another
                   gateway's reaper beside its coordinator, held back for any time) finds that and
                   does nothing; under V1 the producer's next transaction has the same epoch, and
                   that marker, come once a next transaction had begun here, ended the next one and
                   removed its expectation. The sequence is one counter of the deployment, and a
                   producer id's transactions open one after another, each after the one before it
                   was decided (txn-join-5, fence-begin-5; a native transaction without a key is a
                   producer id of its own): a lower sequence is an older transaction of the producer
  Returns {0, marker offset} when written, {0, -1} when the partition holds nothing of this
  transaction (no batch reached it, or the marker is there already), {2} for no partition,
  {11} for a stale epoch (always only).
]]
local rcall = redis.call
--- @include "entry"
--- @include "producer"

local meta = rcall('HMGET', KEYS[2], 'hw', 'maxts', 'bytes')
if not meta[1] then return {2} end
local epoch_now = tonumber(ARGV[2])
local always = ARGV[5] == '1'
if not always and ARGV[6] ~= '' then
  local ended = ARGV[1] .. ':txn'
  local last = rcall('HGET', KEYS[6], ended)
  if last then
    local seq, last_seq = string.match(ARGV[6], ':(%d+)$'), string.match(last, ':(%d+)$')
    if last == 'ended:' .. ARGV[6] or (seq and last_seq and tonumber(last_seq) >= tonumber(seq)) then
      return {0, -1}
    end
  end
  rcall('HSET', KEYS[6], ended, 'ended:' .. ARGV[6])
end
local raw = rcall('HGET', KEYS[5], ARGV[1])
local state_epoch = raw and producer_epoch(raw) or nil
local open = rcall('HGET', KEYS[3], ARGV[1])
local first, epoch
if open then first, epoch = string.match(open, '^(%d+):(-?%d+)$') end
if always and ((state_epoch and state_epoch > epoch_now) or (open and tonumber(epoch) > epoch_now)) then return {11} end
local expected = rcall('HGET', KEYS[6], ARGV[1])
if expected and tonumber(expected) <= epoch_now then rcall('HDEL', KEYS[6], ARGV[1]) end
if state_epoch == nil or state_epoch < epoch_now then
  rcall('HSET', KEYS[5], ARGV[1], producer_pack(epoch_now, {}))
end
if not always and (not open or tonumber(epoch) > epoch_now) then return {0, -1} end
local hw = tonumber(meta[1])
local bytes = tonumber(meta[3] or '0')
rcall('XADD', KEYS[1], entry_id(hw), 'b', ARGV[3], 'n', 1, 't', meta[2] or '-1', 'c', string.format('%d', bytes))
rcall('HSET', KEYS[2], 'hw', string.format('%d', hw + 1), 'bytes', string.format('%d', bytes + #ARGV[3]))
rcall('HDEL', KEYS[3], ARGV[1])
wake_readers(KEYS[1])
if ARGV[4] == '0' and open then
  rcall('ZADD', KEYS[4], string.format('%d', hw), ARGV[1] .. ':' .. first)
end
return {0, hw}
