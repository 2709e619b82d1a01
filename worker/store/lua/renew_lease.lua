-- RENEW_LEASE: the heartbeat of a running turn or delivery: while the fence still holds our token nobody took a newer
-- one, so (re)setting the lease is safe even after it expired.
-- KEYS: fence, lease
-- ARGV: token, lease_ms
-- Returns: 1 renewed, 0 another worker took the conversation (nothing changed)
--! include fence
local fence = KEYS[1]
local lease = KEYS[2]
local token = ARGV[1]
local lease_ms = ARGV[2]

if not holds(fence, token) then return 0 end
redis.call('SET', lease, token, 'PX', lease_ms)
return 1
