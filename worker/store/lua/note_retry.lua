-- NOTE_RETRY: a clean, retryable failure: the attempt counted at the head is given back (it did not crash the
-- worker) and counted as a retry instead, on its own counter (unreadable answers apart from outages, so that an
-- outage does not use up the small budget of the other).
-- KEYS: fence, attempts
-- ARGV: token, input_id, counter ('retries' or 'bad')
-- Returns: the retries so far on that counter, or FENCE_MOVED
--! include fence
--! include codes
local fence = KEYS[1]
local attempts = KEYS[2]
local token = ARGV[1]
local input_id = ARGV[2]
local counter = ARGV[3]

if not holds(fence, token) then return FENCE_MOVED end
redis.call('HINCRBY', attempts, input_id, -1)
return redis.call('HINCRBY', attempts, input_id .. ':' .. counter, 1)
