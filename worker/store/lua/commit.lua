-- COMMIT: apply one input (or a burst's inputs) atomically and hand back the next one.
-- KEYS: fence, state, inbox, attempts, outbox, trace, dead, lease, dlease, dfence, sent, journal, record_stream,
--       record_dropped, usage, inbound, blob_key, recall, recall_index
-- ARGV: token, expected_version, input_id, mode (keep|set|append|clear), blob, reply_entry, trace_entry, dead_entry,
--       lease_ms, trace_max, dead_max, ttl_ms, claim_ms ('' or the delivery lease), peek, record_entry ('' none),
--       record_max, usage_day ('' none), tokens, append_at (mode append: the stored blob's length), cut_at (mode
--       append: where the blob goes, the stored bytes after it dropped: append_at, or less for a fold), recall_batch
--       ('' none), recall_segment, recall_max_bytes (0: unbounded), recall_erase ('1': the archive is erased first),
--       then also: the ids of the inputs after the head that the same turn applied (a burst), in mailbox order
-- Returns: thirteen fields on every path (see answer below): {version or FENCE_MOVED | VERSION_MOVED | NOT_HEAD,
--          depth or current version, released, next entry, attempts at next, kept blob (see stored_blob), delivery token, delivery
--          head entry, part, crashed, the ``peek`` entries after the next one, the state's tag, the last inbound ms
--          read by the delivery claim}
-- ``usage`` counts the conversation's tokens per UTC day (the daily token budget reads it); it keeps three days.
-- The tag names the blob written: the writer's token and the new version, unique over the conversation's lives
-- (tokens never repeat, see next_token), so a worker that kept a state decoded knows when it is still the stored one.
-- The blob is the list blob_key: a base, then the frames turns appended (the state hash's blen counts its bytes).
-- Mode set writes the blob whole (a state in the older layout leaves the hash's blob field then); mode append pushes
-- the bytes a turn added, refused as VERSION_MOVED unless the stored blob is append_at bytes long (the one the
-- writer's state was encoded from): a turn writes what it adds, not the history. A list, not a string APPENDed to:
-- APPEND grows a string's allocation greedily (up to twice its length), a list's nodes stay within a few percent.
-- The commit hands back the next input (counting an attempt at it), or gives the lease up when there is none:
-- atomic with the pop, so a producer's push either lands before (and is returned) or finds no lease.
-- With claim_ms, a commit that empties the mailbox also starts the delivery when nobody delivers: it takes the
-- delivery lease and claims the outbox head as BEGIN_DELIVERY does, saving the deliverer that round trip.
-- The archive: the messages this commit takes out of the history go to ``recall`` as one batch, with its search
-- index segment in ``recall_index`` at the same position, in this fenced step (a stale commit archives nothing, a
-- landed one cannot be applied again). The state hash's ``rbytes`` counts the batches' bytes; past
-- recall_max_bytes the oldest batches go with their segments (the newest one always stays: the writer bounds it).
--! include tail
--! include head_id
--! include fence
--! include start_delivery
--! include append_record
--! include append_capped
--! include codes
--! include stored_blob
local fence = KEYS[1]
local state = KEYS[2]
local inbox = KEYS[3]
local attempts = KEYS[4]
local outbox = KEYS[5]
local trace = KEYS[6]
local dead = KEYS[7]
local lease = KEYS[8]
local dlease = KEYS[9]
local dfence = KEYS[10]
local sent = KEYS[11]
local journal = KEYS[12]
local record_stream = KEYS[13]
local record_dropped = KEYS[14]
local usage = KEYS[15]
local inbound = KEYS[16]
local blob_key = KEYS[17]
local recall = KEYS[18]
local recall_index = KEYS[19]
local token = ARGV[1]
local expected_version = ARGV[2]
local input_id = ARGV[3]
local mode = ARGV[4]
local blob = ARGV[5]
local reply_entry = ARGV[6]
local trace_entry = ARGV[7]
local dead_entry = ARGV[8]
local lease_ms = ARGV[9]
local trace_max = ARGV[10]
local dead_max = ARGV[11]
local ttl_ms = ARGV[12]
local claim_ms = ARGV[13]
local peek = ARGV[14]
local record_entry = ARGV[15]
local record_max = ARGV[16]
local usage_day = ARGV[17]
local tokens = ARGV[18]
local append_at = ARGV[19]
local cut_at = ARGV[20]
local recall_batch = ARGV[21]
local recall_segment = ARGV[22]
local recall_max_bytes = ARGV[23]
local recall_erase = ARGV[24]
local also = tail(ARGV, 25)

-- The one shape of the answer: every return goes through it, fields left out are padded.
local function answer(a)
  return {a.code, a.extra or 0, a.released or 0, a.next or false, a.attempts or 0, a.blob or false, a.dtoken or 0,
          a.dhead or false, a.part or 0, a.crashed or 0, a.after or {}, a.tag or '', a.inbound or false}
end

if not holds(fence, token) then return answer({code = FENCE_MOVED}) end
local v = tonumber(redis.call('HGET', state, 'version') or '0')
if v ~= tonumber(expected_version) then return answer({code = VERSION_MOVED, extra = v}) end
if head_id(redis.call('LINDEX', inbox, 0)) ~= input_id then return answer({code = NOT_HEAD, extra = v}) end
for i = 1, #also do
  if head_id(redis.call('LINDEX', inbox, i)) ~= also[i] then return answer({code = NOT_HEAD, extra = v}) end
end
if mode == 'append' and (tonumber(redis.call('HGET', state, 'blen') or '-1') ~= tonumber(append_at)
                         or tonumber(cut_at) > tonumber(append_at)) then
  return answer({code = VERSION_MOVED, extra = v})
end
local n = #also + 1
if mode == 'set' then
  redis.call('DEL', blob_key)
  redis.call('RPUSH', blob_key, blob)
  redis.call('HDEL', state, 'blob')
  redis.call('HSET', state, 'tag', token .. ':' .. (v + 1), 'blen', #blob)
elseif mode == 'append' then
  -- A fold (format 5) replaces the loose frames after cut_at with one compressed run: the last entries go, the
  -- head of one that straddles cut_at stays (the list's entries need not be the codec's frames).
  local len, cut = tonumber(append_at), tonumber(cut_at)
  while len > cut do
    local e = redis.call('RPOP', blob_key)
    len = len - #e
    if len < cut then
      redis.call('RPUSH', blob_key, string.sub(e, 1, cut - len))
      len = cut
    end
  end
  redis.call('RPUSH', blob_key, blob)
  redis.call('HSET', state, 'blen', cut + #blob, 'tag', token .. ':' .. (v + 1))
elseif mode == 'clear' then
  redis.call('DEL', blob_key)
  redis.call('HDEL', state, 'blob', 'tag', 'blen')
end
local tag = redis.call('HGET', state, 'tag') or ''
redis.call('HSET', state, 'version', v + 1)
redis.call('LTRIM', inbox, n, -1)
redis.call('HDEL', attempts, input_id, input_id .. ':retries', input_id .. ':bad')
for i = 1, #also do redis.call('HDEL', attempts, also[i], also[i] .. ':retries', also[i] .. ':bad') end
append_record(record_stream, record_dropped, record_max, token .. ':' .. (v + 1), record_entry)
if usage_day and usage_day ~= '' and tonumber(tokens) > 0 then
  redis.call('HINCRBY', usage, usage_day, tonumber(tokens))
  redis.call('PEXPIRE', usage, 259200000)
end
if recall_erase == '1' then
  redis.call('DEL', recall, recall_index)
  redis.call('HDEL', state, 'rbytes')
end
if recall_batch ~= '' then
  redis.call('RPUSH', recall, recall_batch)
  redis.call('RPUSH', recall_index, recall_segment)
  local archived = redis.call('HINCRBY', state, 'rbytes', #recall_batch)
  local bound = tonumber(recall_max_bytes)
  while bound > 0 and archived > bound and redis.call('LLEN', recall) > 1 do
    archived = redis.call('HINCRBY', state, 'rbytes', -#redis.call('LPOP', recall))
    redis.call('LPOP', recall_index)
  end
end
redis.call('DEL', journal)  -- the input's turn journal: applied now, so nothing is left to replay
if reply_entry ~= '' then redis.call('RPUSH', outbox, reply_entry) end
if trace_entry ~= '' then append_capped(trace, trace_entry, trace_max) end
if dead_entry ~= '' then append_capped(dead, dead_entry, dead_max) end
-- The idle TTL: the keys this script writes (the accept of the input, moments ago, set it on all the others).
local ttl = tonumber(ttl_ms)
if ttl > 0 then
  for _, key in ipairs({fence, state, inbox, attempts, outbox, trace, dead, dfence, sent, journal, blob_key, recall,
                        recall_index}) do
    redis.call('PEXPIRE', key, ttl)
  end
end
local depth = redis.call('LLEN', inbox)
if depth == 0 then
  redis.call('DEL', lease)
  if claim_ms ~= '' then
    local d = start_delivery(dlease, dfence, outbox, sent, claim_ms, inbound)
    if tonumber(d[1]) > 0 then  -- else: busy, or nothing to send
      return answer({code = v + 1, released = 1, dtoken = d[1], dhead = d[2], part = d[3], crashed = d[4], tag = tag,
                     inbound = d[5]})
    end
  end
  return answer({code = v + 1, released = 1, tag = tag})
end
redis.call('SET', lease, token, 'PX', lease_ms)
local nxt = redis.call('LINDEX', inbox, 0)
local a = redis.call('HINCRBY', attempts, head_id(nxt), 1)
-- The blob goes back only when the caller does not already have it (mode keep): states can be large.
local kept = false
if mode == 'keep' then kept = stored_blob(blob_key, redis.call('HGET', state, 'blob')) end
local after = {}
local p = tonumber(peek or '0')
if p > 0 then after = redis.call('LRANGE', inbox, 1, p) end
return answer({code = v + 1, extra = depth, next = nxt, attempts = a, blob = kept, after = after, tag = tag})
