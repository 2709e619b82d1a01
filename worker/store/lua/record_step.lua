-- RECORD_STEP: one entry of the head input's turn journal (a model round or a tool result), written under the fenced
-- lease before the model sees it.
-- KEYS: fence, inbox, journal
-- ARGV: token, input_id, field, entry, max_entries, ttl_ms
-- Returns: {1, entries} recorded; {FENCE_MOVED, 0}; {NOT_HEAD, 0} the input was applied; {JOURNAL_FULL, entries}
--          (bounded: the entry is not kept, the turn goes on)
--! include head_id
--! include fence
--! include codes
local fence = KEYS[1]
local inbox = KEYS[2]
local journal = KEYS[3]
local token = ARGV[1]
local input_id = ARGV[2]
local field = ARGV[3]
local entry = ARGV[4]
local max_entries = ARGV[5]
local ttl_ms = ARGV[6]

if not holds(fence, token) then return {FENCE_MOVED, 0} end
if head_id(redis.call('LINDEX', inbox, 0)) ~= input_id then return {NOT_HEAD, 0} end
local n = redis.call('HLEN', journal)
if n >= tonumber(max_entries) and redis.call('HEXISTS', journal, field) == 0 then return {JOURNAL_FULL, n} end
redis.call('HSET', journal, field, entry)
local ttl = tonumber(ttl_ms)
if ttl > 0 then redis.call('PEXPIRE', journal, ttl) end
return {1, redis.call('HLEN', journal)}
