--[[
  Append one sample to a group's lag history, kept to the last max_age_ms and max_points samples;
  only while the group has committed offsets, so a sample taken just before the group was deleted
  does not bring its history back.
  KEYS[1] lag         the group's lag history (stream): t = total lag, p = msgpack {topic: [[partition, lag], ...]}
  KEYS[2] offsets     the group's committed offsets (hash)
  ARGV[1] total       the lag summed over the group's partitions
  ARGV[2] partitions  msgpack {topic: [[partition, lag], ...]}
  ARGV[3] max_age_ms  samples older than this (by their entry id, Redis's clock) are trimmed
  ARGV[4] max_points  at most this many samples are kept
  Returns the new entry's id, or false when the group has no committed offsets.
]]
local rcall = redis.call

if rcall('EXISTS', KEYS[2]) == 0 then return false end
local id = rcall('XADD', KEYS[1], 'MAXLEN', ARGV[4], '*', 't', ARGV[1], 'p', ARGV[2])
local ms = tonumber(string.match(id, '^(%d+)-'))
rcall('XTRIM', KEYS[1], 'MINID', string.format('%d-0', ms - tonumber(ARGV[3])))
return id
