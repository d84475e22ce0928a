-- decide.lua — one rate-limit decision (DESIGN §1) in one atomic step. Requires Redis >= 7.0
-- (effects replication: the script calls XADD with an auto id).
--
-- Every key of one call shares one hash tag {<bucket>} (docs/redis.md), so the script is valid on
-- Redis Cluster. The caller (RedisStore) builds the keys; <bucket> is a fixed function of the
-- subject (a hash of it modulo a bucket count fixed at deployment), so the outbox streams are
-- exactly <prefix>:{0}:outbox .. <prefix>:{B-1}:outbox and a delivery worker finds them all.
--
-- KEYS (2N + 1 keys, N = number of limits of the plan, in plan order):
--   KEYS[i]        i = 1..N  counter of limit i (string holding an integer)
--                            <prefix>:{<bucket>}:c:<plan>:<limit>:<window_id>:<subject>
--   KEYS[N+i]      i = 1..N  alert flags of limit i (hash; field = threshold percent, value "1")
--                            <prefix>:{<bucket>}:a:<plan>:<limit>:<window_id>:<subject>
--   KEYS[2N+1]               the bucket's outbox stream   <prefix>:{<bucket>}:outbox
--
-- ARGV (all decimal integers unless noted):
--   1  cost            0..1,000,000; 0 is a peek: nothing is read-modify-written, nothing fires
--   2  now_ms          Unix milliseconds (corrected clock); only the event's occurred_at_ms
--   3  outbox_max      the outbox's capacity; at XLEN >= outbox_max an event is refused and its
--                      flag stays armed (it fires at a later request once there is room)
--   4  deadline_ms     Unix milliseconds (Redis's clock) after which the caller has stopped waiting
--                      and answered without Redis; then the script changes nothing and replies
--                      {-1}. 0: no deadline. (A Redis that stalls, e.g. SIGSTOP, runs the commands
--                      queued in its socket buffers when it resumes; without this they would
--                      charge requests that were already answered as degraded.)
--   5  N               number of limits
--   6  subject         string
--   7  plan            string (plan name)
--   then for each limit i = 1..N, in plan order:
--      name            string (limit name)
--      quota           >= 1
--      expire_at       Unix seconds: window end + grace (EXPIREAT, absolute; must be in the future)
--      window_start    Unix seconds
--      window_end      Unix seconds
--      T               number of thresholds of this limit
--      T pairs         percent (1..100), count = ceil(quota * percent / 100), precomputed by caller
--
-- Reply (integers only): { allowed (0|1), used_1, ..., used_N, fired, refused }, or { -1 } when
-- the deadline had passed (nothing was read or written)
--   used_i   counter i after this request (incremented if admitted, unchanged if denied)
--   fired    events written to the outbox by this call
--   refused  thresholds that crossed but were not recorded because the outbox was full
--
-- Outbox entry fields (all strings): type=quota.threshold_reached, subject, plan, limit,
--   threshold, used, quota, window_start, window_end (Unix seconds), occurred_at_ms.
--
-- Expiry: counters get EXPIREAT expire_at in the call that creates them, flag hashes in every call
-- that writes them, so no key this script writes is ever left without a TTL. The outbox stream is
-- the exception by design: it is one long-lived key per bucket, bounded by outbox_max, emptied by
-- the dispatcher (XACK + XDEL).
-- Values are Lua doubles: exact up to 2^53, far above any quota + cost.

local cost = tonumber(ARGV[1])
local now_ms = ARGV[2]
local outbox_max = tonumber(ARGV[3])
local deadline_ms = tonumber(ARGV[4])
local n = tonumber(ARGV[5])
local subject = ARGV[6]
local plan = ARGV[7]

if cost == nil or cost < 0 or cost ~= math.floor(cost) then
  return redis.error_reply('ERR sluice decide: bad cost')
end
if n == nil or n < 1 or #KEYS ~= 2 * n + 1 then
  return redis.error_reply('ERR sluice decide: expected 2N+1 keys')
end
if outbox_max == nil then
  return redis.error_reply('ERR sluice decide: bad outbox_max')
end

if deadline_ms == nil then
  return redis.error_reply('ERR sluice decide: bad deadline_ms')
end
if deadline_ms > 0 then
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > deadline_ms then
    return { -1 }
  end
end
local limits = {}
local a = 8
for i = 1, n do
  local t = tonumber(ARGV[a + 5])
  local limit = {
    name = ARGV[a], quota = tonumber(ARGV[a + 1]), expire_at = ARGV[a + 2],
    window_start = ARGV[a + 3], window_end = ARGV[a + 4], thresholds = {},
  }
  if limit.quota == nil or t == nil then
    return redis.error_reply('ERR sluice decide: bad limit ' .. i)
  end
  a = a + 6
  for j = 1, t do
    limit.thresholds[j] = { percent = ARGV[a], count = tonumber(ARGV[a + 1]) }
    a = a + 2
  end
  limits[i] = limit
end
if a - 1 ~= #ARGV then
  return redis.error_reply('ERR sluice decide: ARGV does not match N and the thresholds')
end

-- Admission: all-or-nothing over every limit.
local used = {}
local allowed = 1
for i = 1, n do
  used[i] = tonumber(redis.call('GET', KEYS[i]) or '0')
  if used[i] + cost > limits[i].quota then allowed = 0 end
end

local outbox = KEYS[2 * n + 1]
local fired, refused = 0, 0
local room = nil  -- free places in the outbox, read once on first need

-- Records threshold `th` of limit i at counter value `after`: event first, then the flag. A full
-- outbox leaves the flag unset (armed), as the memory store does.
local function fire(i, th, after)
  if room == nil then room = outbox_max - redis.call('XLEN', outbox) end
  if room <= 0 then
    refused = refused + 1
    return
  end
  local limit = limits[i]
  redis.call('XADD', outbox, '*',
    'type', 'quota.threshold_reached', 'subject', subject, 'plan', plan, 'limit', limit.name,
    'threshold', th.percent, 'used', tostring(after), 'quota', tostring(limit.quota),
    'window_start', limit.window_start, 'window_end', limit.window_end,
    'occurred_at_ms', now_ms)
  room = room - 1
  redis.call('HSET', KEYS[n + i], th.percent, '1')
  redis.call('EXPIREAT', KEYS[n + i], limit.expire_at)
  fired = fired + 1
end

-- A peek writes nothing. An admission adds the cost everywhere and may fire any threshold; a
-- denial writes no counter but may fire the 100% threshold of each limit that itself denied.
if cost > 0 then
  for i = 1, n do
    local limit = limits[i]
    local violated = allowed == 0 and used[i] + cost > limit.quota
    if allowed == 1 then
      used[i] = redis.call('INCRBY', KEYS[i], cost)
      -- INCRBY returning the cost means it created the key (a counter is never written
      -- otherwise): give it its expiry now, in the same atomic step. An existing counter already
      -- has the same one (same window, same expire_at), so skipping it saves a command per limit.
      if used[i] == cost then redis.call('EXPIREAT', KEYS[i], limit.expire_at) end
    end
    if allowed == 1 or violated then
      for _, th in ipairs(limit.thresholds) do
        local crossed
        if allowed == 1 then
          crossed = used[i] >= th.count
        else
          crossed = tonumber(th.percent) == 100
        end
        if crossed and redis.call('HEXISTS', KEYS[n + i], th.percent) == 0 then
          fire(i, th, used[i])
        end
      end
    end
  end
end

local reply = { allowed }
for i = 1, n do reply[i + 1] = used[i] end
reply[n + 2] = fired
reply[n + 3] = refused
return reply
