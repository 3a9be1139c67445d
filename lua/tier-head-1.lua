--[[
  The stored batch holding `offset`, or the first one after it, without its bytes: the copier asks
  whether a range can be closed yet every pass, and a batch may be a megabyte (a read, no change).
  KEYS[1] log     the partition's stream
  ARGV[1] offset  the first offset of the range
  Returns {0, base offset, offsets spanned, bytes appended before it, running max timestamp}, or {0}
  when no batch holds or follows it.
]]
--- @include "entry"

local rcall = redis.call
local offset = tonumber(ARGV[1])
local base, n, f = entry_at(KEYS[1], offset)
if base == nil or base + n <= offset then
  local r = rcall('XRANGE', KEYS[1], '(' .. entry_id(offset), '+', 'COUNT', 1)
  if #r == 0 then return {0} end
  base, f = tonumber(string.match(r[1][1], '^(%d+)-')), entry_fields(r[1])
  n = tonumber(f['n'])
end
return {0, base, n, tonumber(f['c'] or '-1'), tonumber(f['t'] or '-1')}
