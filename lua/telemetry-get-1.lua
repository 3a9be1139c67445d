--[[
  A client's GetTelemetrySubscriptions (KIP-714), as Kafka's ClientMetricsInstance.
  maybeUpdateGetRequestTimestamp decides it: accepted once a push interval has passed since its last
  get or push, or at once after an UNKNOWN_SUBSCRIPTION_ID or UNSUPPORTED_COMPRESSION_TYPE, or when
  the subscriptions changed (a new version or subscription id starts the client over, as Kafka
  re-creates its instance).
  KEYS[1] client    hash: v (subscriptions version), sid, get, push (last accepted ms), term, err
  ARGV[1] now       ms
  ARGV[2] version   the subscriptions' version the subscription was computed from
  ARGV[3] sid       the client's subscription id
  ARGV[4] interval  its push interval, ms
  ARGV[5] ttl       ms the state outlives the client's last request
  Returns 'ok', or 'throttled' (before its next push interval).
]]
local rcall = redis.call
--- @include "telemetry"
local s = telemetry_load(KEYS[1], ARGV[2], ARGV[3])
local now = tonumber(ARGV[1])
local out = 'ok'
if now - math.max(s.get, s.push) >= tonumber(ARGV[4]) then
  s.get = now
elseif s.err ~= 'unknown_subscription' and s.err ~= 'unsupported_compression' then
  out = 'throttled'
end
if out == 'ok' then s.err = '' end
telemetry_save(KEYS[1], s, ARGV[5])
return out
