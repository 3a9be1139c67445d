--[[
  Claim messages of one partition of a Key_Shared subscription for one consumer, key hash by key
  hash, in order. A hash goes to the claiming member when no one else may still hold messages of
  it: its holder is this member, or holds none (its count is 0), or everything delivered of it was
  acknowledged (the cursor passed the last one), or the holder left (absent from the caller's live
  members while the caller's generation is at least the one the holder claimed in: a member that
  joined after the caller looked is never taken for gone). Else the hash is draining and the
  group is refused (PIP-379's draining hashes; PIP-282's last-sent position as the fallback).
  Offsets acknowledged already are dropped from what is granted.
  KEYS[1] sub      the subscription's hash (cursor)
  KEYS[2] acks     sorted set of offsets acked individually at or above the cursor
  KEYS[3] sticky   hash: key hash -> "<holder> <count unacked> <last offset sent> <generation>"
  ARGV[1] member   the claiming member
  ARGV[2] gen      the member generation the caller has seen
  ARGV[3] live     space-separated live members as the caller has seen them
  ARGV[4] groups   ";"-separated groups, each "<hash> <offset> <offset> ..."
  Returns per group {1, offset, ...} (granted, without the acknowledged ones) or {0} (draining),
  or {15} when the subscription does not exist.
]]
local rcall = redis.call
local cursor = rcall('HGET', KEYS[1], 'cursor')
if not cursor then return {15} end
cursor = tonumber(cursor)
local member, gen = ARGV[1], tonumber(ARGV[2])
local live = {}
for m in string.gmatch(ARGV[3], '%S+') do live[m] = true end
local hasacks = rcall('EXISTS', KEYS[2]) == 1
local out = {}
for group in string.gmatch(ARGV[4], '[^;]+') do
  local hash
  local offsets = {}
  for tok in string.gmatch(group, '%d+') do
    if not hash then hash = tok else offsets[#offsets + 1] = tonumber(tok) end
  end
  local holder, count, last, hgen = member, 0, -1, gen
  local e = rcall('HGET', KEYS[3], hash)
  if e then
    holder, count, last, hgen = string.match(e, '^(%S+) (%d+) (%-?%d+) (%d+)$')
    count, last, hgen = tonumber(count), tonumber(last), tonumber(hgen)
  end
  local free = holder == member or count == 0 or last < cursor or (hgen <= gen and not live[holder])
  if not free then
    out[#out + 1] = {0}
  else
    local granted = {1}
    local top = last
    for _, o in ipairs(offsets) do
      if o >= cursor and not (hasacks and rcall('ZSCORE', KEYS[2], o)) then
        granted[#granted + 1] = o
        if o > top then top = o end
      end
    end
    if holder ~= member then count = 0 end
    if #granted > 1 or holder ~= member then
      rcall('HSET', KEYS[3], hash,
        member .. ' ' .. (count + #granted - 1) .. ' ' .. string.format('%d', top) .. ' ' .. string.format('%d', gen))
    end
    out[#out + 1] = granted
  end
end
return out
