-- MARK_SENT: a part that is not the reply's last was sent (the last one goes through SENT_LAST_CLAIM_NEXT).
-- KEYS: dfence, outbox, sent, dlease
-- ARGV: token, reply_id, part, provider_id, lease_ms
-- Returns: 1, FENCE_MOVED or NOT_HEAD
--! include head_id
--! include fence
--! include sent_for
--! include ids_with
--! include codes
local dfence = KEYS[1]
local outbox = KEYS[2]
local sent = KEYS[3]
local dlease = KEYS[4]
local token = ARGV[1]
local reply_id = ARGV[2]
local part = ARGV[3]
local provider_id = ARGV[4]
local lease_ms = ARGV[5]

if not holds(dfence, token) then return FENCE_MOVED end
if head_id(redis.call('LINDEX', outbox, 0)) ~= reply_id then return NOT_HEAD end
sent_for(sent, reply_id)
local ids = ids_with(sent, reply_id, provider_id)
redis.call('HSET', sent, 'reply_id', reply_id, 'part', tonumber(part) + 1, 'ids', ids)
redis.call('HDEL', sent, 'inflight')
redis.call('SET', dlease, token, 'PX', lease_ms)
return 1
