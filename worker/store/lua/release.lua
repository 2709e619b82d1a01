-- RELEASE: give a lease up (after an error, or by a drain that ends without a commit); the caller re-wakes if needed.
-- Used for both leases: (fence, lease) or (dfence, dlease).
-- KEYS: fence, lease
-- ARGV: token
-- Returns: 1 the lease was ours and is gone, else 0
--! include fence
local fence = KEYS[1]
local lease = KEYS[2]
local token = ARGV[1]

if not holds(fence, token) then return 0 end
if redis.call('GET', lease) == token then redis.call('DEL', lease) return 1 end
return 0
