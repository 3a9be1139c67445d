--[[
  A member of a Key_Shared subscription no longer holds some messages of one partition (acked,
  negatively acked, timed out, or given back when it left): their key hashes' counts go down, so a
  hash that moved to another member stops draining once its holder holds none.
  KEYS[1] sticky   hash: key hash -> "<holder> <count unacked> <last offset sent> <generation>"
  ARGV[1] member   the member that held them
  ARGV[2] counts   space-separated "<hash>:<n>" pairs
  Returns 0.
]]
local rcall = redis.call
for hash, n in string.gmatch(ARGV[2], '(%d+):(%d+)') do
  local e = rcall('HGET', KEYS[1], hash)
  if e then
    local holder, count, rest = string.match(e, '^(%S+) (%d+) (.*)$')
    if holder == ARGV[1] then
      count = math.max(0, tonumber(count) - tonumber(n))
      rcall('HSET', KEYS[1], hash, holder .. ' ' .. count .. ' ' .. rest)
    end
  end
end
return 0
