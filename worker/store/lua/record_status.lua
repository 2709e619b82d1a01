-- RECORD_STATUS: one delivery status webhook.
-- KEYS: statuses, statusorder, sent, record_stream, record_dropped
-- ARGV: provider_id, status, detail, max_kept, reply_id ('' when the status names no part), part, record_entry
--       ('' none), record_max
-- Returns: {1 moved forward / 0 kept the one it had, the latest status, 1 when kept for the part in flight / 0}
-- The message's latest status moves only forward (see include/status_rank.lua); ``statuses`` keeps the ``max_kept``
-- messages whose first status came last. When the status names a part of a reply (WhatsApp hands back the
-- biz_opaque_callback_data we sent it with) and that part is still marked in flight, the status is kept with the
-- part's progress too: proof that the send reached WhatsApp, which is what a deliverer that finds the part left in
-- flight by a crash needs (MARK_SENT and the claims keep those fields only for the part they are about).
--! include status_rank
--! include append_record
local statuses = KEYS[1]
local statusorder = KEYS[2]
local sent = KEYS[3]
local record_stream = KEYS[4]
local record_dropped = KEYS[5]
local provider_id = ARGV[1]
local status = ARGV[2]
local detail = ARGV[3]
local max_kept = ARGV[4]
local reply_id = ARGV[5]
local part = ARGV[6]
local record_entry = ARGV[7]
local record_max = ARGV[8]

if redis.call('TYPE', statuses)['ok'] == 'list' then redis.call('DEL', statuses) end  -- the log of earlier versions
local now = redis.call('TIME')
local ms = string.format('%d', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000))
local cur = redis.call('HGET', statuses, provider_id)
local kept = nil
if cur then kept = string.match(cur, '^([^\t]*)') end
local moved = 0
local latest = kept
if rank(status) > rank(kept) then
  redis.call('HSET', statuses, provider_id, status .. '\t' .. ms .. '\t' .. detail)
  moved = 1
  latest = status
  append_record(record_stream, record_dropped, record_max, 's:' .. provider_id .. ':' .. status, record_entry)
  if not cur then
    redis.call('ZADD', statusorder, 'NX', ms, provider_id)
    local n = redis.call('ZCARD', statusorder)
    local max = tonumber(max_kept)
    if n > max then
      local old = redis.call('ZRANGE', statusorder, 0, n - max - 1)
      redis.call('HDEL', statuses, unpack(old))
      redis.call('ZREMRANGEBYRANK', statusorder, 0, n - max - 1)
    end
  end
end
local for_part = 0
if reply_id ~= '' then
  local tag = reply_id .. ':' .. part
  local s = redis.call('HMGET', sent, 'reply_id', 'inflight', 'seen_part', 'seen')
  if s[1] == reply_id and s[2] == tag then
    local seen = nil
    if s[3] == tag then seen = s[4] end
    if rank(status) > rank(seen) then
      redis.call('HSET', sent, 'seen_part', tag, 'seen', status, 'seen_id', provider_id)
    end
    for_part = 1
  end
end
return {moved, latest, for_part}
