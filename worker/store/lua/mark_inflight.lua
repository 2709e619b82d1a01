-- MARK_INFLIGHT: mark a part of the outbox head in flight, before its send.
-- KEYS: dfence, sent
-- ARGV: token, reply_id, part
-- Returns: 1, or FENCE_MOVED
--! include fence
--! include sent_for
--! include codes
local dfence = KEYS[1]
local sent = KEYS[2]
local token = ARGV[1]
local reply_id = ARGV[2]
local part = ARGV[3]

if not holds(dfence, token) then return FENCE_MOVED end
sent_for(sent, reply_id)
redis.call('HSET', sent, 'reply_id', reply_id, 'part', part, 'inflight', reply_id .. ':' .. part)
return 1
