-- SENT_LAST_CLAIM_NEXT: the last part of a reply was sent: record it, drop the reply from the outbox and claim the
-- next one (or give the lease up), in one round trip. The durable record gets the reply's provider message ids.
-- KEYS: dfence, outbox, sent, delivered, dlease, record_stream, record_dropped, inbound
-- ARGV: token, reply_id, provider_id, delivered_max, lease_ms, record_entry ('' none), record_max
-- Returns: the claim's shape (see include/claim.lua), {FENCE_MOVED, ...} or {NOT_HEAD, ...}
--! include head_id
--! include fence
--! include claim
--! include ids_with
--! include append_record
--! include append_capped
local dfence = KEYS[1]
local outbox = KEYS[2]
local sent = KEYS[3]
local delivered = KEYS[4]
local dlease = KEYS[5]
local record_stream = KEYS[6]
local record_dropped = KEYS[7]
local inbound = KEYS[8]
local token = ARGV[1]
local reply_id = ARGV[2]
local provider_id = ARGV[3]
local delivered_max = ARGV[4]
local lease_ms = ARGV[5]
local record_entry = ARGV[6]
local record_max = ARGV[7]

if not holds(dfence, token) then return no_claim(FENCE_MOVED) end
if head_id(redis.call('LINDEX', outbox, 0)) ~= reply_id then return no_claim(NOT_HEAD) end
local ids = ids_with(sent, reply_id, provider_id)
redis.call('LPOP', outbox)
redis.call('DEL', sent)
append_record(record_stream, record_dropped, record_max, 'o:' .. token .. ':' .. reply_id, record_entry, ids)
append_capped(delivered, reply_id .. '\t' .. ids, delivered_max)
return claim(outbox, sent, dlease, token, lease_ms, inbound)
