-- sent_for(sent, rid): the ``sent`` hash describes one reply, the outbox head: when the head changed (a new reply),
-- the progress left from another reply is dropped, so the per-reply failure count starts again at 0.
local function sent_for(sent, rid)
  local cur = redis.call('HGET', sent, 'reply_id')
  if cur and cur ~= rid then redis.call('DEL', sent) end
end
