-- INFLIGHT_OUTCOME: what is known of a part a crashed deliverer left in flight: the best status webhook kept for it
-- (RECORD_STATUS keeps one while the part is in flight) and how long ago a deliverer first found it so. That first
-- look starts the clock (``suspect_part`` / ``suspect_at``, in Redis's time, so every worker reads the same clock):
-- the grace a deliverer gives the part's status webhooks runs from then, at least one lease after the crash.
-- KEYS: dfence, outbox, sent
-- ARGV: token, reply_id, part
-- Returns: {1, status or false, its provider message id or false, ms since first found}; {0, ...} the part is not in
--          flight (nothing to decide); {FENCE_MOVED, ...}; {NOT_HEAD, ...}
--! include head_id
--! include fence
--! include codes
local dfence = KEYS[1]
local outbox = KEYS[2]
local sent = KEYS[3]
local token = ARGV[1]
local reply_id = ARGV[2]
local part = ARGV[3]

if not holds(dfence, token) then return {FENCE_MOVED, false, false, 0} end
if head_id(redis.call('LINDEX', outbox, 0)) ~= reply_id then return {NOT_HEAD, false, false, 0} end
local tag = reply_id .. ':' .. part
local s = redis.call('HMGET', sent, 'reply_id', 'inflight', 'seen_part', 'seen', 'seen_id', 'suspect_part',
                     'suspect_at')
if s[1] ~= reply_id or s[2] ~= tag then return {0, false, false, 0} end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local waited = 0
if s[6] == tag and tonumber(s[7]) then
  waited = math.max(0, ms - tonumber(s[7]))
else
  redis.call('HSET', sent, 'suspect_part', tag, 'suspect_at', string.format('%d', ms))
end
if s[3] == tag then return {1, s[4], s[5] or false, waited} end
return {1, false, false, waited}
