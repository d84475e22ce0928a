-- refund.lua — takes back the cost of an admission whose caller never heard of it (RedisStore).
-- decide.lua admitted and counted the request, but its reply reached sluice only after the
-- command had timed out, so the client was already answered as degraded. Typical cause: Redis
-- executed the script and then stalled before writing the reply (a DEBUG SLEEP or a long command
-- of another client in the same event-loop iteration, a SIGSTOP between the two). A degraded
-- answer must not be charged, so the counters go back down by the cost.
--
-- KEYS[i]   the counter hashes decide.lua incremented (same hash tag: valid on Cluster), named
--           as decide.lua's: <prefix>:{<bucket>}:h:<limit>:<window>:<window_id>:<slot>
-- ARGV[1]   cost (1..1,000,000), as given to decide.lua
-- ARGV[2]   subject (the counters' field)
--
-- Reply (integer): how many counters were decremented. A counter is decremented only if it still
-- holds a valid counter (decide.lua's rule) of at least the cost: one that expired or was reset by
-- an admin meanwhile is left alone (HINCRBY would create a negative field). A counter taken back
-- to 0 is deleted (a missing field is 0); the hash keeps its TTL.

local cost = tonumber(ARGV[1])
local subject = ARGV[2]
if cost == nil or cost < 1 or cost > 1000000 or cost ~= math.floor(cost) or subject == nil then
  return redis.error_reply('ERR sluice refund: bad cost or subject')
end
local done = 0
for i = 1, #KEYS do
  local v = redis.pcall('HGET', KEYS[i], subject)
  if type(v) == 'string' and #v <= 16 and (v == '0' or string.match(v, '^[1-9]%d*$')) and
      tonumber(v) >= cost then
    if tonumber(v) == cost then
      redis.call('HDEL', KEYS[i], subject)
    else
      redis.call('HINCRBY', KEYS[i], subject, -cost)
    end
    done = done + 1
  end
end
return done
