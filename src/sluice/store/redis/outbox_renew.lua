-- outbox_renew.lua — keeps a consumer's held outbox entries from being claimed (RedisOutbox::Renew,
-- store/redis/redis_outbox.h). Atomic per stream: an entry is renewed only if it is still pending
-- for this consumer, so a consumer that stalled past the lease never takes back an entry another
-- consumer has meanwhile claimed (XCLAIM alone would steal it back, and both would deliver it).
--
-- KEYS[1]   one bucket's outbox stream <prefix>:{<bucket>}:outbox (one key: valid on Cluster)
-- ARGV[1]   consumer group
-- ARGV[2]   consumer name (the caller)
-- ARGV[3..] entry ids held by the caller
--
-- Reply (integers only): one per id, in order: 1 = still pending for the caller, idle time reset
-- to 0 (XCLAIM … JUSTID, which leaves the delivery counter alone); 0 = not the caller's any more
-- (claimed by another consumer, acked, or deleted).

local out = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] ~= nil and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
