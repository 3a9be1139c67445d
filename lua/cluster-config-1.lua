--[[
  Replace the cluster-wide broker configs (the defaults of topic configs every gateway reads), if
  they are still the version they were computed from, so a change racing another is never lost.
  KEYS[1] config   msgpack {v = version, c = map: broker config name -> value}
  ARGV[1] version  the version the configs were computed from (0: none were ever set)
  ARGV[2] config   msgpack map: every cluster-wide broker config set
  Returns {0, version}: written, as that new version; {1} when they changed since `version`.
]]
local rcall = redis.call
local raw = rcall('GET', KEYS[1])
local version = 0
if raw then version = cmsgpack.unpack(raw)['v'] end
if version ~= tonumber(ARGV[1]) then return {1} end
version = version + 1
rcall('SET', KEYS[1], cmsgpack.pack({v = version, c = cmsgpack.unpack(ARGV[2])}))
return {0, version}
