--[[
  Move due delayed messages into the log in delivery-time order (ties in produce order).
  KEYS[1] log      the partition's stream
  KEYS[2] meta     the partition's meta hash (hw, start, maxts, bytes)
  KEYS[3] dmeta    the delay index's meta hash (seq, n, since, bid)
  KEYS[4] held     stream of the waiting messages' batches
  KEYS[5] open     the open bucket: sorted set by delivery time
  KEYS[6] buckets  sealed buckets by the delivery time of their head
  ARGV[1] now      milliseconds: messages due at or before it move
  ARGV[2] limit    the most messages to move in this call
  ARGV[3] epoch    the scheduler role's lease epoch (see includes/role.lua), -1 outside any lease
  Returns {0, moved, next delivery time or -1, first offset written or -1}, {2} when there is no
  such partition, {13} for an epoch older than one the partition has seen.
]]
local rcall = redis.call
--- @include "entry"
--- @include "delay"
--- @include "role"

local K = {log = KEYS[1], meta = KEYS[2], dmeta = KEYS[3], held = KEYS[4], open = KEYS[5], buckets = KEYS[6]}
local now, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local meta = rcall('HMGET', K.meta, 'hw', 'maxts', 'bytes')
if not meta[1] then return {2} end
if role_stale(K.dmeta, 'scheduler_epoch', tonumber(ARGV[3])) then return {13} end
local hw, maxts, bytes = tonumber(meta[1]), tonumber(meta[2] or '-1'), tonumber(meta[3] or '0')

-- the open bucket's due entries, read at once; every sealed bucket due, as a cursor
local z = rcall('ZRANGE', K.open, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
local open = {i = 1, taken = 0}
function open.head()
  if open.i > #z then return nil end
  return tonumber(z[open.i + 1]), struct.unpack('>I8', z[open.i])
end
function open.pop()
  open.i, open.taken = open.i + 2, open.taken + 1
end
local sources = {open}
local sealed = {}
for _, id in ipairs(rcall('ZRANGE', K.buckets, '-inf', now, 'BYSCORE')) do
  local b = dl_bucket(K, id)
  sources[#sources + 1] = b
  sealed[#sealed + 1] = b
end

local moved, first = 0, -1
while moved < limit do
  local best, bt, bs = nil, nil, nil
  for _, src in ipairs(sources) do
    local t, s = src.head()
    if t ~= nil and t <= now and (best == nil or t < bt or (t == bt and s < bs)) then
      best, bt, bs = src, t, s
    end
  end
  if best == nil then break end
  best.pop()
  local id = dl_num(bs) .. '-1'
  local e = rcall('XRANGE', K.held, id, id)
  if #e > 0 then
    local f = entry_fields(e[1])
    if first < 0 then first = hw end
    hw, maxts, bytes = append_entry(K.log, K.meta, hw, maxts, bytes, f['b'], f['n'], f['t'])
    rcall('XDEL', K.held, id)
  end
  moved = moved + 1
end

if open.taken > 0 then rcall('ZREMRANGEBYRANK', K.open, 0, open.taken - 1) end
for _, b in ipairs(sealed) do b.save() end
if moved > 0 then rcall('HINCRBY', K.dmeta, 'n', -moved) end
return {0, moved, dl_next_due(K), first}
