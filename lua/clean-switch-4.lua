--[[
  End a cleaner pass: the generation it built becomes the partition's cleaned log, in one step.
  Offsets below the new boundary are read from it, the dirty entries it replaced leave the main
  stream, the old generation goes, and the log start moves past what retention removed.
  KEYS[1] meta       the partition's meta hash
  KEYS[2] log        the partition's main (dirty) stream
  KEYS[3] old        the cleaned stream of generation cg
  KEYS[4] new        the cleaned stream of generation cg+1, built by clean-add-2
  ARGV[1] epoch      the cleaner role's lease epoch
  ARGV[2] gen        the generation built: cg+1
  ARGV[3] boundary   the new clean boundary: the base offset of the first batch not cleaned
  ARGV[4] start      the log start after retention (-1: unchanged)
  ARGV[5] reclaimed  bytes of batches the pass removed or shrank, for the counters
  ARGV[6] now_ms     the time of the pass
  ARGV[7] size       bytes of the cleaned log built (`clean_bytes`: the dirty ratio's denominator)
  ARGV[8] horizon    the earliest delete horizon of a batch holding tombstones in it, -1 none
  Returns {0, entries removed from the main stream} or {code}: 2 no such partition, 13 an older epoch
  or another generation.
]]
local rcall = redis.call
--- @include "entry"
--- @include "role"

local meta = rcall('HMGET', KEYS[1], 'hw', 'start', 'cg', 'cb')
if not meta[1] then return {2} end
if role_stale(KEYS[1], 'clean_epoch', tonumber(ARGV[1])) then return {13} end
local gen = tonumber(ARGV[2])
if tonumber(meta[3] or '0') + 1 ~= gen then return {13} end
local boundary = tonumber(ARGV[3])
if boundary < tonumber(meta[4] or '0') then return {13} end
local removed = rcall('XTRIM', KEYS[2], 'MINID', entry_id(boundary))
rcall('HSET', KEYS[1], 'cg', string.format('%d', gen), 'cb', string.format('%d', boundary),
  'clean_at', ARGV[6], 'clean_bytes', ARGV[7], 'horizon', ARGV[8])
rcall('HINCRBY', KEYS[1], 'clean_passes', 1)
rcall('HINCRBY', KEYS[1], 'clean_reclaimed', ARGV[5])
local start = tonumber(ARGV[4])
if start > tonumber(meta[2]) then rcall('HSET', KEYS[1], 'start', string.format('%d', start)) end
rcall('UNLINK', KEYS[3])
return {0, removed}
