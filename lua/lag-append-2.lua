--[[
  Append one sample to a group's lag history, kept to the last max_age_ms and max_points samples,
  the whole history expiring max_age_ms after its last sample. A group that commits offsets gets
  one only while it has some, so a sample taken just before the group was deleted does not bring
  its history back (a share group commits none: a history its deletion raced expires).
  KEYS[1] lag         the group's lag history (stream): t = total lag, p = msgpack {topic: [[partition, lag], ...]}
  KEYS[2] offsets     the group's committed offsets (hash); for a share group, the history again
  ARGV[1] total       the lag summed over the group's partitions
  ARGV[2] partitions  msgpack {topic: [[partition, lag], ...]}
  ARGV[3] max_age_ms  samples older than this (by their entry id, Redis's clock) are trimmed
  ARGV[4] max_points  at most this many samples are kept
  ARGV[5] guarded     1: only while KEYS[2] exists; 0 (share groups): always
  Returns the new entry's id, or false when a guarded group has no committed offsets.
]]
local rcall = redis.call

if ARGV[5] == '1' and rcall('EXISTS', KEYS[2]) == 0 then return false end
local id = rcall('XADD', KEYS[1], 'MAXLEN', ARGV[4], '*', 't', ARGV[1], 'p', ARGV[2])
local ms = tonumber(string.match(id, '^(%d+)-'))
rcall('XTRIM', KEYS[1], 'MINID', string.format('%d-0', ms - tonumber(ARGV[3])))
rcall('PEXPIRE', KEYS[1], ARGV[3])
return id
