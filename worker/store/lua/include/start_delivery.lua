-- start_delivery(dlease, dfence, outbox, sent, lease_ms, inbound): take the delivery lease with a fresh fencing
-- token and claim the outbox head. Answers {BUSY, ...} when another worker delivers, {EMPTY, ...} when nothing waits,
-- else {token, head entry, part, crashed, last inbound}. Shared by BEGIN_DELIVERY and by the commit that ends a
-- drain, so both start a delivery the same way.
--! include claim
--! include next_token
local function start_delivery(dlease, dfence, outbox, sent, lease_ms, inbound)
  if redis.call('EXISTS', dlease) == 1 then return no_claim(BUSY) end
  if redis.call('LLEN', outbox) == 0 then return no_claim(EMPTY) end
  local t = next_token(dfence)
  local c = claim(outbox, sent, dlease, t, lease_ms, inbound)
  return {t, c[2], c[3], c[4], c[5]}
end
