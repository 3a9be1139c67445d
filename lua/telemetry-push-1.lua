--[[
  A client's PushTelemetry (KIP-714), checked in the order of Kafka's ClientMetricsManager.
  validatePushRequest: none after a terminating push; none before its push interval (unless it is
  the first after a get, or terminating); its subscription id must be the current one; then what the
  gateway found of the payload (compression, size, decoding). The push's terminating flag is kept
  whatever the outcome, and the outcome as the last known error.
  KEYS[1] client       hash: v (subscriptions version), sid, get, push (last accepted ms), term, err
  ARGV[1] now          ms
  ARGV[2] version      the subscriptions' version the subscription was computed from
  ARGV[3] sid          the client's subscription id
  ARGV[4] interval     its push interval, ms
  ARGV[5] ttl          ms the state outlives the client's last request
  ARGV[6] pushed_sid   the subscription id the push names
  ARGV[7] terminating  1: the client's last push
  ARGV[8] payload      'ok', 'unsupported_compression', 'too_large' or 'invalid_record'
  Returns 'ok', 'terminated', 'throttled', 'unknown_subscription', or ARGV[8].
]]
local rcall = redis.call
--- @include "telemetry"
local s = telemetry_load(KEYS[1], ARGV[2], ARGV[3])
local now = tonumber(ARGV[1])
local terminating = ARGV[7] == '1'
local out = 'ok'
if s.term == '1' then
  out = 'terminated'
else
  local accept = s.get > s.push or now - s.push >= tonumber(ARGV[4])
  if accept then s.push = now end
  if not accept and not terminating then
    out = 'throttled'
  elseif ARGV[6] ~= s.sid then
    out = 'unknown_subscription'
  else
    out = ARGV[8]
  end
end
s.term = terminating and '1' or '0'
if out == 'ok' then s.err = '' else s.err = out end
telemetry_save(KEYS[1], s, ARGV[5])
return out
