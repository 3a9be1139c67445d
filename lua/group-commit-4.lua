--[[
  Commit offsets for a group after checking the committer the way Kafka's classic coordinator does:
  a member of the current generation, or (generation -1, no member id) anyone while the group is Empty.
  KEYS[1] meta         the group's meta hash: v, state, gen, doc
  KEYS[2] members      member id -> packed member
  KEYS[3] instances    group.instance.id -> member id
  KEYS[4] offsets      "topic:partition" -> packed committed offset
  ARGV[1] generation   -1 for a commit from outside the group
  ARGV[2] member_id    '' for a commit from outside the group
  ARGV[3] instance_id  '' for a dynamic member
  ARGV[4] offsets      msgpack array: field, packed offset, field, packed offset, ...
  Returns {0, created} (created 1 when the commit brought the group into being) or {code}:
  25 unknown member id, 22 illegal generation, 27 rebalance in progress, 82 fenced instance id.
]]
local rcall = redis.call

local meta = rcall('HMGET', KEYS[1], 'state', 'gen')
local state, gen = meta[1] or 'Empty', tonumber(meta[2] or '0')
local generation, member, instance = tonumber(ARGV[1]), ARGV[2], ARGV[3]
if generation ~= -1 or member ~= '' then
  if state == 'CompletingRebalance' then return {27} end
  if instance ~= '' then
    local owner = rcall('HGET', KEYS[3], instance)
    if not owner then return {25} end
    if owner ~= member then return {82} end
  end
  if rcall('HEXISTS', KEYS[2], member) == 0 then return {25} end
  if generation ~= gen then return {22} end
elseif state ~= 'Empty' then
  return {25}
end
local offsets = cmsgpack.unpack(ARGV[4])
if #offsets > 0 then rcall('HSET', KEYS[4], unpack(offsets)) end
if not meta[1] then
  rcall('HSET', KEYS[1], 'v', 1, 'state', 'Empty', 'gen', 0)
  return {0, 1}
end
return {0, 0}
