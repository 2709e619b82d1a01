-- READ: up to count entries of the group for this consumer (XREADGROUP, never blocking: a script cannot), each
-- entry's conversation noted in the pending index in the same step it is handed out, so an inlet asking which
-- older entries of a conversation are pending elsewhere (held.lua) never misses one another inlet holds but has
-- not looked at yet. Only the entries read are decoded: the work is the batch's size.
-- KEYS: stream, index (the pending index: members '<conversation id>\0<padded entry id>', all of score 0)
-- ARGV: group, consumer, count, start ('>': new entries; an entry id: this consumer's own pending entries after it)
-- Returns: {newest, entries}: newest is the stream's newest entry id ('0-0' when it is empty), entries as XREADGROUP
--          answers them ({id, fields} each; fields false for a pending entry trimmed away)
--! include inlet_member
local stream = KEYS[1]
local index = KEYS[2]
local group = ARGV[1]
local consumer = ARGV[2]
local count = ARGV[3]
local start = ARGV[4]

local got = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count, 'STREAMS', stream, start)
local entries = got and got[1] and got[1][2] or {}
for _, entry in ipairs(entries) do
  local id, fields = entry[1], entry[2]
  if fields then
    for j = 1, #fields - 1, 2 do
      if fields[j] == 'envelope' then
        local ok, obj = pcall(cjson.decode, fields[j + 1])
        if ok and type(obj) == 'table' then
          local cid = obj['conversation_id']
          if type(cid) == 'string' and not string.find(cid, '\0', 1, true) then
            redis.call('ZADD', index, 0, cid .. '\0' .. padded(id))
          end
        end
      end
    end
  end
end
local newest = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)[1]
return {newest and newest[1] or '0-0', entries}
