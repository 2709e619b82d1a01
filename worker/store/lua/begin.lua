-- BEGIN: start draining in one round trip.
-- KEYS: hold, inbox, lease, fence, state, attempts, journal, blob_key, paused, opt_out
-- ARGV: lease_ms, peek, have (the caller's state tag, '' none)
-- Returns: {token or HELD | EMPTY | BUSY, head entry, blob (its parts, see stored_blob), version, attempts at the head, the ``peek`` entries after
--          the head (what a burst may take in; empty when peek is 0), the state's tag, whether the turn journal
--          holds entries, the conversation's pause (its paused key's value, false none), 1 when the player opted
--          out (the opt_out hash has a stop field) else 0}
-- The pause and the opt-out are read here so that a drain's first turn point needs no GET of its own (see
-- worker/store/pauses.py and worker/service/drain/hooks/opt_out.py).
-- HELD: held for a retry (or a burst's quiet period); EMPTY: nothing waiting; BUSY: another worker holds the lease;
-- else the lease is taken with a new token.
-- The state's tag changes with every write of the blob (see COMMIT): when the caller already holds the state with
-- that tag (decoded, from its last turn on this conversation), the blob is not sent again (nor read). The blob is
-- blob_key's parts (see stored_blob, the caller joins them); a state last written whole in the older layout is
-- still in the state hash's blob field.
--! include head_id
--! include next_token
--! include codes
--! include stored_blob
local hold = KEYS[1]
local inbox = KEYS[2]
local lease = KEYS[3]
local fence = KEYS[4]
local state = KEYS[5]
local attempts = KEYS[6]
local journal = KEYS[7]
local blob_key = KEYS[8]
local paused = KEYS[9]
local opt_out = KEYS[10]
local lease_ms = ARGV[1]
local peek = ARGV[2]
local have = ARGV[3]

local function idle(code) return {code, false, false, 0, 0, {}, '', 0, false, 0} end
if redis.call('EXISTS', hold) == 1 then return idle(HELD) end
local head = redis.call('LINDEX', inbox, 0)
if not head then return idle(EMPTY) end
if redis.call('EXISTS', lease) == 1 then return idle(BUSY) end
local t = next_token(fence)
redis.call('SET', lease, t, 'PX', lease_ms)
local s = redis.call('HMGET', state, 'blob', 'version', 'tag')
local blob, tag = false, s[3] or ''
if tag == '' or tag ~= have then blob = stored_blob(blob_key, s[1]) end
local a = redis.call('HINCRBY', attempts, head_id(head), 1)
local after = {}
local n = tonumber(peek or '0')
if n > 0 then after = redis.call('LRANGE', inbox, 1, n) end
return {t, head, blob, s[2] or '0', a, after, tag, redis.call('EXISTS', journal), redis.call('GET', paused),
        redis.call('HEXISTS', opt_out, 'stop')}
