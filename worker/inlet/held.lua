-- HELD: for each conversation of a batch an inlet is about to apply, its oldest entry still pending in the group
-- (read by an inlet, not yet acknowledged) that is not one of the batch's: the batch's entries of that conversation
-- newer than it wait, so a conversation's inputs reach its mailbox in stream order whichever inlet read them. Looks
-- each conversation up in the pending index (read.lua notes every entry it hands out), so the work is the batch's
-- size, however many entries are pending; an index member whose entry is no longer pending (acknowledged by an
-- older inlet, trimmed away) is removed when met.
-- KEYS: stream, index (the pending index: members '<conversation id>\0<padded entry id>', all of score 0)
-- ARGV: group, then pairs: a conversation id and the batch's entry id of it, for every entry of the batch
-- Returns: {cid1, id1, cid2, id2, ...}: the conversations with an older entry pending outside the batch, each with it
--! include tail
--! include inlet_member
local stream = KEYS[1]
local index = KEYS[2]
local group = ARGV[1]
local pairs_of_batch = tail(ARGV, 2)

local batch = {}
local cids = {}
for i = 1, #pairs_of_batch - 1, 2 do
  local cid, id = pairs_of_batch[i], pairs_of_batch[i + 1]
  batch[id] = true
  if not cids[cid] then
    cids[cid] = true
    cids[#cids + 1] = cid
  end
end

local function still_pending(id)
  return #redis.call('XPENDING', stream, group, id, id, 1) > 0
end

local out = {}
for _, cid in ipairs(cids) do
  if not string.find(cid, '\0', 1, true) then
    local low, high = '[' .. cid .. '\0', '(' .. cid .. '\1'
    local offset, found = 0, false
    local page = #pairs_of_batch + 1
    while not found do
      local members = redis.call('ZRANGEBYLEX', index, low, high, 'LIMIT', offset, page)
      if #members == 0 then break end
      for _, member in ipairs(members) do
        local id = member_id(member)
        if not batch[id] then
          if still_pending(id) then
            out[#out + 1] = cid
            out[#out + 1] = id
            found = true
            break
          end
          redis.call('ZREM', index, member)
          offset = offset - 1
        end
        offset = offset + 1
      end
    end
  end
end
return out
