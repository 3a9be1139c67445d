--[[
  Compare and set the stored leadership of partitions: a reassignment's replicas and who leads.
  KEYS[1] leaders  hash: "<topic>:<partition>" -> "<leader> <replica>,<replica>,..."
  ARGV[1] changes  msgpack array of {field, expected ('*' any, '' none), new value ('' removes it)}
  Returns {1 or 0 per change}: 1 where the field held what was expected and was set.
]]
local rcall = redis.call
local out = {}
for _, change in ipairs(cmsgpack.unpack(ARGV[1])) do
  local field, expected, new = change[1], change[2], change[3]
  local cur = rcall('HGET', KEYS[1], field) or ''
  if expected == '*' or expected == cur then
    if new == '' then
      rcall('HDEL', KEYS[1], field)
    else
      rcall('HSET', KEYS[1], field, new)
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
