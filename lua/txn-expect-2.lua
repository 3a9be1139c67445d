--[[
  Record that a producer's transaction (V1's AddPartitionsToTxn) is adding this partition, before
  the coordinator adds it: its first transactional batch here may then open the transaction
  (append-5's verify), and the transaction's marker removes the entry (txn-marker-6). Written
  before the coordinator's step, so an end racing the add can only remove it, never leave it behind.
  KEYS[1] meta     the partition's meta hash
  KEYS[2] expected producer id -> epoch
  ARGV[1] pid      the producer id
  ARGV[2] epoch    its epoch; an entry of a newer epoch stays
  Returns {0}, or {2} when there is no such partition.
]]
local rcall = redis.call
if not rcall('HGET', KEYS[1], 'hw') then return {2} end
local now = rcall('HGET', KEYS[2], ARGV[1])
if not now or tonumber(now) < tonumber(ARGV[2]) then rcall('HSET', KEYS[2], ARGV[1], ARGV[2]) end
return {0}
