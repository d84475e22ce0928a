-- reset.lua — an admin reset of a subject's limits (RedisStore::Reset): the subject's counter
-- and alert flags in each counter hash, in one atomic step.
--
-- KEYS      pairs, one per limit reset: the counter hash
--           <prefix>:{<bucket>}:h:<limit>:<window>:<window_id>:<slot> (decide.lua's KEYS: fields
--           "<subject>", the counter, and "#<subject>", the flags), then the flag hash flags had
--           before they moved into the counter hash,
--           <prefix>:{<bucket>}:a:<limit>:<window>:<window_id>:<subject>
-- ARGV[1]   subject (the counters' field)
--
-- Reply (integer): the number of fields and flag hashes removed. A counter key of another type
-- (not written by decide.lua: an unusable counter for every subject of its slot) is deleted, so a
-- reset clears it as it clears any unusable counter.

local subject = ARGV[1]
if subject == nil or #KEYS % 2 ~= 0 then
  return redis.error_reply('ERR sluice reset: expected key pairs and the subject')
end
local removed = 0
for i = 1, #KEYS, 2 do
  local r = redis.pcall('HDEL', KEYS[i], subject, '#' .. subject)
  if type(r) == 'number' then
    removed = removed + r
  else
    removed = removed + redis.call('DEL', KEYS[i])
  end
  removed = removed + redis.call('DEL', KEYS[i + 1])
end
return removed
