--[[
  Hand out a Schema Registry schema id and a subject's next version, unique across every gateway
  registering at once (each registration is written to the _schemas topic after this answers).
  KEYS[1] ids      hash: "fp:<fingerprint>" -> the schema's id, "id:<id>" -> its fingerprint; "last"
                   -> the last id handed out
  KEYS[2] versions hash: "n:<subject>" -> the last version handed out in the subject;
                   "f:<fingerprint>:<subject>" -> the version last handed out to that schema there
  ARGV[1] fingerprint the schema's identity (type, normalised text, references): one id per schema
  ARGV[2] subject     the subject it is registered under
  ARGV[3] known_id    the largest id the caller's view of _schemas holds (ids imported by hand count)
  ARGV[4] known_version the largest version of the subject in the caller's view, 0 for none
  ARGV[5] wanted_id   an id asked for (IMPORT mode), -1 for none
  Returns {0, id, version}, or {5, id} when wanted_id is another schema's (or the schema has another).
  A version handed out to the same schema in the subject above known_version (another gateway's
  registration the caller has not read yet) is handed out again: one schema, one new version.
]]
local rcall = redis.call
local field = 'fp:' .. ARGV[1]
local id = tonumber(rcall('HGET', KEYS[1], field))
local wanted = tonumber(ARGV[5])
if wanted >= 0 then
  local owner = rcall('HGET', KEYS[1], 'id:' .. ARGV[5])
  if (id ~= nil and id ~= wanted) or (owner and owner ~= ARGV[1]) then return {5, id or wanted} end
  id = wanted
  rcall('HSET', KEYS[1], field, id, 'id:' .. ARGV[5], ARGV[1])
  if wanted > (tonumber(rcall('HGET', KEYS[1], 'last')) or 0) then rcall('HSET', KEYS[1], 'last', wanted) end
elseif id == nil then
  id = math.max(tonumber(rcall('HGET', KEYS[1], 'last')) or 0, tonumber(ARGV[3])) + 1
  rcall('HSET', KEYS[1], 'last', id, field, id, 'id:' .. id, ARGV[1])
end
local known = tonumber(ARGV[4])
local mine = 'f:' .. ARGV[1] .. ':' .. ARGV[2]
local given = tonumber(rcall('HGET', KEYS[2], mine))
if given ~= nil and given > known then return {0, id, given} end
local version = math.max(tonumber(rcall('HGET', KEYS[2], 'n:' .. ARGV[2])) or 0, known) + 1
rcall('HSET', KEYS[2], 'n:' .. ARGV[2], version, mine, version)
return {0, id, version}
