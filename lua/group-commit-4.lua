--[[
  Commit offsets for a group after checking the committer the way Kafka's classic coordinator does:
  a member of the current generation, or (generation -1) anyone while the group is Empty.
  KEYS[1] meta         the group's meta hash: v, state, gen, doc
  KEYS[2] members      member id -> packed member
  KEYS[3] instances    group.instance.id -> member id
  KEYS[4] offsets      "topic:partition" -> packed committed offset
  ARGV[1] generation   -1 for a commit from outside the group
  ARGV[2] member_id    '' for a commit from outside the group
  ARGV[3] instance_id  '' for a dynamic member
  ARGV[4] offsets      msgpack array: field, packed offset, field, packed offset, ...
  Returns {0, created} (created 1 when the commit brought the group into being) or {code}:
  69 group id not found (a member's commit to a group never saved), 25 unknown member id,
  22 illegal generation, 82 fenced instance id, 27 rebalance in progress (CompletingRebalance only:
  a commit of the current generation goes on while the group prepares a rebalance, as Kafka's).
]]
local rcall = redis.call

local meta = rcall('HMGET', KEYS[1], 'state', 'gen')
local state, gen = meta[1] or 'Empty', tonumber(meta[2] or '0')
local generation, member, instance = tonumber(ARGV[1]), ARGV[2], ARGV[3]
-- Kafka's order (OffsetMetadataManager.validateOffsetCommit, ClassicGroup.validateOffsetCommit):
-- the group exists, then the member, then its generation, and only then the state
if not meta[1] and generation >= 0 then return {69} end
if generation < 0 and state == 'Empty' then
  -- from outside the group (an admin, a consumer assigning itself): fine while it is empty
elseif generation >= 0 or member ~= '' or instance ~= '' then
  if instance ~= '' then
    local owner = rcall('HGET', KEYS[3], instance)
    if not owner then return {25} end
    if owner ~= member then return {82} end
  elseif rcall('HEXISTS', KEYS[2], member) == 0 then
    return {25}
  end
  if generation ~= gen then return {22} end
  if state == 'CompletingRebalance' then return {27} end
else
  return {25}
end
local offsets = cmsgpack.unpack(ARGV[4])
if #offsets > 0 then rcall('HSET', KEYS[4], unpack(offsets)) end
if not meta[1] then
  rcall('HSET', KEYS[1], 'v', 1, 'state', 'Empty', 'gen', 0)
  return {0, 1}
end
return {0, 0}
