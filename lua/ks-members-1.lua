--[[
  Join, renew and leave the consumers of a Key_Shared subscription, across gateways, and read who is
  there. Each member lives until its expiry unless renewed (its gateway renews its own); the
  generation moves on every change of the set (and when asked to), telling every gateway to read
  again from the cursor; it is kept when the last member leaves, so a holder of key hashes from an
  earlier generation is always known to be gone. A member may take fixed hash ranges (Pulsar's sticky Key_Shared mode): a
  joining member whose ranges overlap a live member's, or who takes ranges where the others take
  none (or none where they take some), is refused, as Pulsar's selector refuses it.
  KEYS[1] members  hash: member id -> "<expiry ms> <hex consumer name> <ranges>", "~gen" -> generation
  ARGV[1] now_ms   the current time
  ARGV[2] ttl_ms   how long a member named with '+' lives from now
  ARGV[3] bump     1: move the generation on even if the set is unchanged
  ARGV[4] ops      space-separated "+<member>=<hex name>=<ranges>" (join or renew; ranges
                   "<start>-<end>,..." inclusive, or empty for the consistent-hashing ring) and
                   "-<member>" (leave)
  Returns {generation, refused count, refused member..., member, hex name, ranges, ...}: the members
  refused, then the live ones, sorted by id.
]]
local rcall = redis.call
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local changed = tonumber(ARGV[3]) == 1

local function parse(ranges)
  local out = {}
  for s, e in string.gmatch(ranges, '(%d+)-(%d+)') do out[#out + 1] = {tonumber(s), tonumber(e)} end
  return out
end

local function conflicts(id, ranges)
  local mine = parse(ranges)
  local all = rcall('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local other, value = all[i], all[i + 1]
    if other ~= '~gen' and other ~= id then
      local expiry, _, theirs = string.match(value, '^(%d+) (%S*) ?(.*)$')
      if tonumber(expiry) >= now then
        theirs = parse(theirs)
        if (#theirs == 0) ~= (#mine == 0) then return true end
        for _, a in ipairs(mine) do
          for _, b in ipairs(theirs) do
            if a[1] <= b[2] and b[1] <= a[2] then return true end
          end
        end
      end
    end
  end
  return false
end

local refused = {}
for op in string.gmatch(ARGV[4], '%S+') do
  local sign, member = string.sub(op, 1, 1), string.sub(op, 2)
  if sign == '+' then
    local id, name, ranges = string.match(member, '^([^=]+)=([^=]*)=(.*)$')
    local value = string.format('%d', now + ttl) .. ' ' .. name .. ' ' .. ranges
    if rcall('HEXISTS', KEYS[1], id) == 1 then
      rcall('HSET', KEYS[1], id, value)
    elseif conflicts(id, ranges) then
      refused[#refused + 1] = id
    else
      rcall('HSET', KEYS[1], id, value)
      changed = true
    end
  elseif rcall('HDEL', KEYS[1], member) == 1 then
    changed = true
  end
end
local all = rcall('HGETALL', KEYS[1])
local live = {}
for i = 1, #all, 2 do
  local id, value = all[i], all[i + 1]
  if id ~= '~gen' then
    local expiry, name, ranges = string.match(value, '^(%d+) (%S*) ?(.*)$')
    if tonumber(expiry) < now then
      rcall('HDEL', KEYS[1], id)
      changed = true
    else
      live[#live + 1] = {id, name, ranges}
    end
  end
end
local gen = tonumber(rcall('HGET', KEYS[1], '~gen') or '0')
if changed then gen = rcall('HINCRBY', KEYS[1], '~gen', 1) end
table.sort(live, function(a, b) return a[1] < b[1] end)
local out = {gen, #refused}
for _, id in ipairs(refused) do out[#out + 1] = id end
for _, m in ipairs(live) do
  out[#out + 1] = m[1]
  out[#out + 1] = m[2]
  out[#out + 1] = m[3]
end
return out
