--[[
  Drop a tiered partition's oldest local entries beyond its local retention, only those its
  manifest covers (below `te`); the log start stays where it is (KIP-405's local log start moves).
  KEYS[1] log       the partition's stream
  KEYS[2] meta      the partition's meta hash: `ls` is the local log start, `te` the tiered end
  KEYS[3] manifest  the partition's segments (see tier-add-2.lua)
  ARGV[1] epoch     the tiering role's lease epoch
  ARGV[2] now_ms    the current time
  ARGV[3] local_ms  keep entries newer than this locally, -1 for no limit
  ARGV[4] local_bytes  keep at most this many bytes locally, -1 for no limit
  Returns {0, local log start, entries removed}, or {code}: 2 no such partition, 13 a stale epoch.
]]
local rcall = redis.call
--- @include "entry"
--- @include "role"

local meta = rcall('HMGET', KEYS[2], 'hw', 'start', 'bytes', 'te', 'ls')
if not meta[1] then return {2} end
if role_stale(KEYS[2], 'tier_epoch', tonumber(ARGV[1])) then return {13} end
local start, bytes = tonumber(meta[2]), tonumber(meta[3] or '0')
local te = tonumber(meta[4] or '-1')
local ls = math.max(start, tonumber(meta[5] or '0'))
local head = rcall('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
if #head == 0 or te < 0 or rcall('ZCARD', KEYS[3]) == 0 then return {0, ls, 0} end
local first = tonumber(string.match(head[1][1], '^(%d+)-'))
if first >= te then return {0, ls, 0} end
local now, local_ms, local_bytes = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local cut = first
if local_ms >= 0 then
  local cutoff = now - local_ms
  local s = first_entry_where(KEYS[1], first, te, function(f) return tonumber(f['t']) >= cutoff end)
  if s > cut then cut = s end
end
if local_bytes >= 0 then
  local floor = bytes - local_bytes
  local s = first_entry_where(KEYS[1], first, te, function(f) return tonumber(f['c']) >= floor end)
  if s > cut then cut = s end
end
if cut <= first then return {0, ls, 0} end
local removed = rcall('XTRIM', KEYS[1], 'MINID', entry_id(cut))
if cut > ls then
  ls = cut
  rcall('HSET', KEYS[2], 'ls', string.format('%d', cut))
end
return {0, ls, removed}
