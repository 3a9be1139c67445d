--[[
  A transaction reaper taking over its role: every open transaction gets its whole timeout again,
  counted from now. While no reaper ran (the one gateway restarting, or a holder's lease lapsing)
  its producer may have found no gateway to talk to either, so the time it could not be heard from
  does not count against it: a producer that reconnects finds its transaction open, not aborted
  and itself fenced. Transactions being ended (deadline 0) are left for the roll-forward.
  KEYS[1] open     sorted set of unfinished transactions by deadline (0: due for roll-forward)
  KEYS[2] prefix   what every transaction's hash name starts with: the hash of id X is <prefix>X
  ARGV[1] now      epoch milliseconds
  Returns {0, how many deadlines moved}.
]]
local rcall = redis.call
local moved = 0
local open = rcall('ZRANGEBYSCORE', KEYS[1], '(0', '+inf', 'WITHSCORES')
for i = 1, #open, 2 do
  local t = rcall('HMGET', KEYS[2] .. open[i], 'state', 'timeout')
  if t[1] == 'OPEN' and t[2] then
    local deadline = tonumber(ARGV[1]) + tonumber(t[2])
    if deadline > tonumber(open[i + 1]) then
      rcall('ZADD', KEYS[1], string.format('%d', deadline), open[i])
      moved = moved + 1
    end
  end
end
return {0, moved}
