--[[
  Join, renew and leave the consumers of a Key_Shared subscription, across gateways, and read who is
  there. Each member lives until its expiry unless renewed (its gateway renews its own); the
  generation moves on every change of the set (and when asked to), telling every gateway to read
  again from the cursor.
  KEYS[1] members  hash: member id -> "<expiry ms> <consumer name>", and "~gen" -> generation
  ARGV[1] now_ms   the current time
  ARGV[2] ttl_ms   how long a member named with '+' lives from now
  ARGV[3] bump     1: move the generation on even if the set is unchanged
  ARGV[4] ops      space-separated "+<member>=<hex name>" (join or renew) and "-<member>" (leave)
  Returns {generation, member, name, member, name, ...}: the live members, sorted by id.
]]
local rcall = redis.call
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local changed = tonumber(ARGV[3]) == 1
for op in string.gmatch(ARGV[4], '%S+') do
  local sign, member = string.sub(op, 1, 1), string.sub(op, 2)
  if sign == '+' then
    local id, name = string.match(member, '^([^=]+)=(.*)$')
    if rcall('HSETNX', KEYS[1], id, '') == 1 then changed = true end
    rcall('HSET', KEYS[1], id, string.format('%d', now + ttl) .. ' ' .. name)
  elseif rcall('HDEL', KEYS[1], member) == 1 then
    changed = true
  end
end
local all = rcall('HGETALL', KEYS[1])
local live = {}
for i = 1, #all, 2 do
  local id, value = all[i], all[i + 1]
  if id ~= '~gen' then
    local expiry, name = string.match(value, '^(%d+) (.*)$')
    if tonumber(expiry) < now then
      rcall('HDEL', KEYS[1], id)
      changed = true
    else
      live[#live + 1] = {id, name}
    end
  end
end
local gen = tonumber(rcall('HGET', KEYS[1], '~gen') or '0')
if changed then gen = rcall('HINCRBY', KEYS[1], '~gen', 1) end
if #live == 0 then rcall('DEL', KEYS[1]) end
table.sort(live, function(a, b) return a[1] < b[1] end)
local out = {gen}
for _, m in ipairs(live) do
  out[#out + 1] = m[1]
  out[#out + 1] = m[2]
end
return out
