-- ids_with(sent, reply_id, provider_id): the provider message ids of the head reply's parts sent so far, with one
-- more.
local function ids_with(sent, reply_id, provider_id)
  local ids = redis.call('HGET', sent, 'ids')
  if ids and redis.call('HGET', sent, 'reply_id') == reply_id then return ids .. ',' .. provider_id end
  return provider_id
end
