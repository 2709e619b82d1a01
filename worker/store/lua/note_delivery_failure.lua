-- NOTE_DELIVERY_FAILURE: one failed (retryable) send of the outbox head, counted in the head's progress hash, so the
-- count survives task restarts, the inline delivery, later turns and the sweeper, and goes with the reply when it
-- is sent or dead-lettered.
-- KEYS: dfence, outbox, sent
-- ARGV: token, reply_id
-- Returns: the failures so far for that reply; FENCE_MOVED; NOT_HEAD
--! include head_id
--! include fence
--! include sent_for
--! include codes
local dfence = KEYS[1]
local outbox = KEYS[2]
local sent = KEYS[3]
local token = ARGV[1]
local reply_id = ARGV[2]

if not holds(dfence, token) then return FENCE_MOVED end
if head_id(redis.call('LINDEX', outbox, 0)) ~= reply_id then return NOT_HEAD end
sent_for(sent, reply_id)
redis.call('HSET', sent, 'reply_id', reply_id)
return redis.call('HINCRBY', sent, 'failures', 1)
