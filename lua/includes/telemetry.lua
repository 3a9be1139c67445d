-- A client's KIP-714 state; started over (nothing sent yet) when the subscriptions changed.
local function telemetry_load(key, version, sid)
  local h = rcall('HGETALL', key)
  local s = {}
  for i = 1, #h, 2 do s[h[i]] = h[i + 1] end
  if s.v ~= version or s.sid ~= sid then
    return {v = version, sid = sid, get = 0, push = 0, term = '0', err = ''}
  end
  return {v = s.v, sid = s.sid, get = tonumber(s.get), push = tonumber(s.push), term = s.term, err = s.err}
end

local function telemetry_save(key, s, ttl)
  rcall('HSET', key, 'v', s.v, 'sid', s.sid, 'get', string.format('%d', s.get), 'push',
        string.format('%d', s.push), 'term', s.term, 'err', s.err)
  rcall('PEXPIRE', key, ttl)
end
