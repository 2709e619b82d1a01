-- HELD: the conversations that have an entry pending in the inlet's consumer group (read by an inlet and not yet
-- acknowledged) older than the batch an inlet is about to apply, each with its oldest such entry: an entry of the
-- batch waits while its conversation has an older one pending elsewhere, so a conversation's inputs reach its mailbox
-- in stream order whichever inlet read them. Entries of the batch itself are left out (the inlet applies them in
-- order). Reads only the stream's key, so it runs on a Cluster too.
-- KEYS: stream
-- ARGV: group, newest (the batch's highest entry id), examined (most pending entries examined), then batch_ids: the
--       batch's entry ids
-- Returns: {last, cid1, id1, cid2, id2, ...}: last is '' or, when more pending entries were older than the limit
--          examined, the newest examined (what is pending past it is unknown).
--! include tail
local stream = KEYS[1]
local group = ARGV[1]
local newest = ARGV[2]
local examined = ARGV[3]
local batch_ids = tail(ARGV, 4)

local limit = tonumber(examined)
local pending = redis.call('XPENDING', stream, group, '-', newest, limit)
local batch = {}
for _, id in ipairs(batch_ids) do batch[id] = true end
local out = {#pending >= limit and pending[#pending][1] or ''}
local seen = {}
for _, p in ipairs(pending) do
  local id = p[1]
  if not batch[id] then
    local entry = redis.call('XRANGE', stream, id, id)[1]
    if entry then
      local fields = entry[2]
      for j = 1, #fields - 1, 2 do
        if fields[j] == 'envelope' then
          local ok, obj = pcall(cjson.decode, fields[j + 1])
          if ok and type(obj) == 'table' then
            local cid = obj['conversation_id']
            if type(cid) == 'string' and not seen[cid] then
              seen[cid] = true
              out[#out + 1] = cid
              out[#out + 1] = id
            end
          end
        end
      end
    end
  end
end
return out
