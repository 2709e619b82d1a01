-- The stored state blob: the parts of the list blob_key (a base, then the frames turns appended: the caller joins
-- them), else a state last written whole in the older layout (the state hash's blob field, ``legacy``), else false.
local function stored_blob(blob_key, legacy)
  local parts = redis.call('LRANGE', blob_key, 0, -1)
  if #parts > 0 then return parts end
  return legacy or false
end
