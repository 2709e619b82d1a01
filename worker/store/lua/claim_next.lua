-- CLAIM_NEXT: claim the next reply, or give the delivery lease up when the outbox is empty.
-- KEYS: dfence, outbox, sent, dlease, inbound
-- ARGV: token, lease_ms
-- Returns: the claim's shape (see include/claim.lua), {FENCE_MOVED, ...} when the fence moved
--! include fence
--! include claim
local dfence = KEYS[1]
local outbox = KEYS[2]
local sent = KEYS[3]
local dlease = KEYS[4]
local inbound = KEYS[5]
local token = ARGV[1]
local lease_ms = ARGV[2]

if not holds(dfence, token) then return no_claim(FENCE_MOVED) end
return claim(outbox, sent, dlease, token, lease_ms, inbound)
