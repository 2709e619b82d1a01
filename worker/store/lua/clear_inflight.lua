-- CLEAR_INFLIGHT: the part marked in flight was not sent after all.
-- KEYS: dfence, sent
-- ARGV: token
-- Returns: 1, or FENCE_MOVED
--! include fence
--! include codes
local dfence = KEYS[1]
local sent = KEYS[2]
local token = ARGV[1]

if not holds(dfence, token) then return FENCE_MOVED end
redis.call('HDEL', sent, 'inflight')
return 1
