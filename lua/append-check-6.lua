--[[
  Check a predicted append and make way for the batch, which stays out of Lua: this script runs in
  MULTI between nothing and `XADD <aside> NOMKSTREAM <offset>-1 b <batch> n <count> t <maxts> c <bytes>`,
  `RENAME <aside> <log>`, EXEC (gateway/store/predicted.py). It checks the partition's state against
  the prediction, advances the meta hash and the producer's state as append-5 does, and renames the
  stream aside, so that only an accepted prediction's XADD finds a stream to write to: a refused one
  leaves none (NOMKSTREAM writes nothing, the RENAME back fails), and so does this script unloaded.
  Raw XADD arguments reach Redis as strings Lua never sees: at a kilobyte and more, most of what an
  append costs Redis beyond a raw XADD is Lua interning the batch (gateway/bench/append_cost.py).
  Plain and idempotent batches only: transactional ones stay on append-5.
  KEYS[1] log      the partition's stream
  KEYS[2] meta     the partition's meta hash (hw, start, maxts, bytes, and w: "<token>:<hw>" of the
                   last append this script let through; any other writer moves hw past it)
  KEYS[3] pids     idempotent producer state per producer id (includes/producer.lua)
  KEYS[4] aside    where the stream waits for the XADD (same slot, never left behind by EXEC)
  KEYS[5] txns     unused here, declared so the slot's keys match append-5's
  KEYS[6] expected unused here, as txns
  ARGV[1] offset   predicted high watermark: the batch's base offset
  ARGV[2] count    records in the batch
  ARGV[3] max_ts   the batch's max timestamp
  ARGV[4] length   the batch's bytes
  ARGV[5] maxts    predicted running max timestamp after the batch (the entry's `t`)
  ARGV[6] bytes    predicted log bytes before the batch (the entry's `c`)
  ARGV[7] token    the writer's token: unless claiming, this append must follow the token's last one
                   with no other write between (an equal state reached by others is no match)
  ARGV[8] claim    1: the first append after a refusal, which takes the partition for `token`
  ARGV[9] pid      producer id, -1 when not idempotent
  ARGV[10] epoch   producer epoch
  ARGV[11] seq     base sequence
  Returns {0, base offset, log start} appended, {9, base offset, log start} a duplicate, {code} as
  append-5 (2, 10, 11), {-1, hw, maxts, bytes} the prediction refused: the partition's state, from
  which the writer predicts again and resends this append and every later one in order.
]]
local rcall = redis.call
--- @include "entry"
--- @include "producer"

local meta = rcall('HMGET', KEYS[2], 'hw', 'start', 'maxts', 'bytes', 'w')
if not meta[1] then return {2} end
local hw, start = tonumber(meta[1]), tonumber(meta[2])
local maxts, bytes = tonumber(meta[3] or '-1'), tonumber(meta[4] or '0')
local after = math.max(maxts, tonumber(ARGV[3]))
if tonumber(ARGV[1]) ~= hw or tonumber(ARGV[6]) ~= bytes or tonumber(ARGV[5]) ~= after
    or (ARGV[8] ~= '1' and meta[5] ~= ARGV[7] .. ':' .. meta[1]) then
  return {-1, hw, maxts, bytes}
end
local count = tonumber(ARGV[2])
local pid = ARGV[9]

local state, refused = producer_admit(KEYS[3], pid, tonumber(ARGV[10]), tonumber(ARGV[11]), count, hw, start)
if refused then return refused end

if rcall('EXISTS', KEYS[1]) == 0 then  -- a stream to rename, empty: XGROUP's MKSTREAM makes one
  rcall('XGROUP', 'CREATE', KEYS[1], 'append-check', '$', 'MKSTREAM')
  rcall('XGROUP', 'DESTROY', KEYS[1], 'append-check')
end
rcall('RENAME', KEYS[1], KEYS[4])
rcall('HSET', KEYS[2], 'hw', string.format('%d', hw + count), 'maxts', ARGV[5],
  'bytes', string.format('%d', bytes + tonumber(ARGV[4])), 'w', string.format('%s:%d', ARGV[7], hw + count))
wake_readers(KEYS[1])
if state then rcall('HSET', KEYS[3], pid, state) end
return {0, hw, start}
