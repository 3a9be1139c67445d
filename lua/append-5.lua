--[[
  Append one record batch to a partition log, assigning it contiguous offsets.
  KEYS[1] log      the partition's stream
  KEYS[2] meta     the partition's meta hash (hw, start, maxts, bytes)
  KEYS[3] pids     idempotent producer state per producer id (includes/producer.lua)
  KEYS[4] txns     open transactions on this partition: producer id -> "first offset:epoch"
  KEYS[5] expected transactions V1 has added this partition to: producer id -> epoch (txn-expect-2)
  ARGV[1] batch    RecordBatch v2 bytes, stored as received
  ARGV[2] count    records in the batch
  ARGV[3] max_ts   the batch's max timestamp
  ARGV[4] pid      producer id, -1 when not idempotent
  ARGV[5] epoch    producer epoch
  ARGV[6] seq      base sequence
  ARGV[7] txn      1 for a transactional batch: it stays above the last stable offset until its marker
  ARGV[8] verify   1: a transactional batch opens nothing its coordinator did not add the partition to
                   (Produce before v12; KIP-890 part 1's verification, done once per transaction and
                   partition as Kafka's leader does: the first batch needs `expected`, the next ones
                   find the transaction open here). Checked first, as Kafka's leader asks its
                   coordinator before its log checks a batch (ReplicaManager.appendRecords's
                   verification of a partition without the producer's transaction ongoing): a batch
                   that would open a transaction not expected here is refused for that, whatever its
                   sequence, and a resend of an ended transaction's batch is no duplicate
  Returns {0, base offset, log start} on append, {9, base offset, log start} for a duplicate,
  {code} on error: 2 no such partition, 10 out of order sequence, 11 stale producer epoch,
  22 a transactional batch of no transaction open on the partition (verify).
]]
local rcall = redis.call
--- @include "entry"
--- @include "producer"

local meta = rcall('HMGET', KEYS[2], 'hw', 'start', 'maxts', 'bytes')
if not meta[1] then return {2} end
local hw, start = tonumber(meta[1]), tonumber(meta[2])
local count = tonumber(ARGV[2])
local pid = ARGV[4]

local opens = false  -- the batch opens the producer's transaction here, as expected
if ARGV[7] == '1' and ARGV[8] == '1' then
  local open = rcall('HGET', KEYS[4], pid)
  if not (open and string.match(open, ':(-?%d+)$') == ARGV[5]) then
    if rcall('HGET', KEYS[5], pid) ~= ARGV[5] then return {22} end
    opens = true
  end
end

local state, refused = producer_admit(KEYS[3], pid, tonumber(ARGV[5]), tonumber(ARGV[6]), count, hw, start)
if refused then return refused end
if opens then rcall('HDEL', KEYS[5], pid) end  -- the transaction is open here from now on: txns says so

append_entry(KEYS[1], KEYS[2], hw, tonumber(meta[3] or '-1'), tonumber(meta[4] or '0'), ARGV[1], count,
  ARGV[3])
if state then rcall('HSET', KEYS[3], pid, state) end
if ARGV[7] == '1' then
  rcall('HSETNX', KEYS[4], pid, string.format('%d:%s', hw, ARGV[5]))
end
return {0, hw, start}
