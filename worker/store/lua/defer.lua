-- DEFER: a burst is still being typed, or a hand-back (fair scheduling).
-- KEYS: fence, lease, attempts, hold
-- ARGV: token, head_id, hold_ms
-- Returns: 1, or FENCE_MOVED
-- Give the lease up without counting the attempt BEGIN counted at the head (waiting is not a crash), and hold the
-- conversation for the rest of the quiet period, so the wake-ups of the burst's own messages return at once; the
-- caller schedules the wake-up that ends the hold. With hold_ms 0 it is a hand-back: the lease is given up with
-- inputs still waiting and nothing held, and the caller's new wake-up puts the conversation at the back of the queue.
-- The hold says 'b' (a burst's quiet period), which a game event the model answers ends when it is accepted (ACCEPT,
-- FIRE_TIMERS); a retry's hold says '1'.
--! include fence
--! include codes
local fence = KEYS[1]
local lease = KEYS[2]
local attempts = KEYS[3]
local hold = KEYS[4]
local token = ARGV[1]
local head_id = ARGV[2]
local hold_ms = ARGV[3]

if not holds(fence, token) then return FENCE_MOVED end
if tonumber(redis.call('HINCRBY', attempts, head_id, -1)) <= 0 then redis.call('HDEL', attempts, head_id) end
if tonumber(hold_ms) > 0 then redis.call('SET', hold, 'b', 'PX', hold_ms) end
if redis.call('GET', lease) == token then redis.call('DEL', lease) end
return 1
