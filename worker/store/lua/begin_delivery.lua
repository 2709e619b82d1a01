-- BEGIN_DELIVERY: start delivering in one round trip: take the delivery lease and claim the outbox head.
-- KEYS: dlease, dfence, outbox, sent, inbound
-- ARGV: lease_ms
-- Returns: {BUSY, ...} another worker delivers, {EMPTY, ...} nothing to send, else {token, head entry, part, crashed,
--          last inbound} (the claim's shape, see include/claim.lua)
--! include start_delivery
local dlease = KEYS[1]
local dfence = KEYS[2]
local outbox = KEYS[3]
local sent = KEYS[4]
local inbound = KEYS[5]
local lease_ms = ARGV[1]

return start_delivery(dlease, dfence, outbox, sent, lease_ms, inbound)
