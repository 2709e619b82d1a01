-- claim(outbox, sent, dlease, token, lease_ms, inbound): claim the outbox head for a send. Which part is next,
-- whether a part was left in flight by a crash (so it may already have reached the user), and the in-flight mark for
-- the part about to be sent, written before the send. When the outbox is empty the delivery lease is given up in
-- the same script, so a reply committed meanwhile cannot be left without a deliverer (the delivery side of the lost
-- wake-up). The claim also reads when the player last wrote (``inbound``, ms): the customer-service window the send
-- must respect, read here rather than in a round trip of its own before every reply.
-- Every claim answers in one shape: {code, head entry, part, crashed, last inbound ms or false}; no_claim(code) is
-- that shape with nothing claimed: {code, false, 0, 0, false}.
--! include head_id
--! include sent_for
--! include codes
local function no_claim(code)
  return {code, false, 0, 0, false}
end

local function claim(outbox, sent, dlease, token, lease_ms, inbound)
  local head = redis.call('LINDEX', outbox, 0)
  if not head then
    if redis.call('GET', dlease) == token then redis.call('DEL', dlease) end
    return no_claim(EMPTY)
  end
  local rid = head_id(head)
  sent_for(sent, rid)
  local p = redis.call('HMGET', sent, 'reply_id', 'part', 'inflight')
  local part = 0
  if p[1] == rid and p[2] then part = tonumber(p[2]) end
  local crashed = 0
  if p[1] == rid and p[3] == rid .. ':' .. part then crashed = 1 end
  redis.call('HSET', sent, 'reply_id', rid, 'part', part, 'inflight', rid .. ':' .. part)
  redis.call('SET', dlease, token, 'PX', lease_ms)
  return {1, head, part, crashed, redis.call('GET', inbound)}
end
