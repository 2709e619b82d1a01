-- KEEP_CONTEXT: keep the game's last good live context of a conversation (never part of its state), only while the
-- caller's token is the conversation's newest: a worker that lost its lease, or whose conversation was deleted
-- meanwhile (the fence went with it), writes nothing.
-- KEYS: fence, context
-- ARGV: token, entry, ttl_ms
-- Returns: 1 kept, 0 the fence is no longer ours (nothing written)
--! include fence
local fence = KEYS[1]
local context = KEYS[2]
local token = ARGV[1]
local entry = ARGV[2]
local ttl_ms = ARGV[3]

if not holds(fence, token) then return 0 end
redis.call('SET', context, entry, 'PX', ttl_ms)
return 1
