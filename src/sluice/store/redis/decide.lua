-- decide.lua — one rate-limit decision (docs/semantics.md) in one atomic step: a single request,
-- or a group of requests of distinct subjects decided all-or-nothing (admitted iff every part
-- fits). Requires Redis >= 7.0 (effects replication: the script calls XADD with an auto id).
--
-- Every key of one call shares one hash tag {<bucket>} (docs/redis.md), so the script is valid on
-- Redis Cluster. The caller (RedisStore) builds the keys; <bucket> is a fixed function of the
-- subject, or of the group for a group-placed subject (a hash of it modulo a bucket count fixed
-- at deployment), so the outbox streams are exactly <prefix>:{0}:outbox .. <prefix>:{B-1}:outbox
-- and a delivery worker finds them all.
--
-- KEYS: per part, in order, 2N keys (N = number of limits of the part's plan, in plan order),
-- then the outbox; a single decision is one part (2N + 1 keys):
--   counter of limit i (i = 1..N; string holding an integer)
--                            <prefix>:{<bucket>}:c:<limit>:<window>:<window_id>:<subject>
--   then alert flags of limit i (i = 1..N; hash; field "<percent>:<quota>", value "1")
--                            <prefix>:{<bucket>}:a:<limit>:<window>:<window_id>:<subject>
--   last: the bucket's outbox stream   <prefix>:{<bucket>}:outbox
--   No plan in the keys: counters and flags follow the subject from plan to plan; <window> is the
--   fixed length in seconds ("60s") or "<day|week|month|year>@<zone>" (docs/redis.md). A flag
--   names the quota it fired under, so a threshold fires once per subject, limit, window and
--   effective quota: a quota raised by a plan change or an override has its thresholds armed, and
--   one changed back finds its flags still set.
--
-- ARGV (all decimal integers unless noted):
--   1  cost            the first part's cost, 0..1,000,000; 0 is a peek of that part: nothing of
--                      it is read-modify-written, nothing of it fires
--   2  now_ms          Unix milliseconds (corrected clock); only the event's occurred_at_ms
--   3  outbox_max      the outbox's capacity; at XLEN >= outbox_max an event is refused and its
--                      flag stays armed (it fires at a later request once there is room)
--   4  deadline_us     Unix microseconds (Redis's clock), no later than the instant the caller
--                      stops waiting and answers without Redis. A call that starts at or after it
--                      changes nothing and replies {-1}. 0: no deadline. (A Redis that stalls, e.g.
--                      SIGSTOP, runs the commands queued in its socket buffers when it resumes;
--                      without this they would charge requests already answered as degraded.)
--   5  N               number of limits of the first part
--   6  subject         string
--   7  plan            string (plan name: the plan in force, for the event only)
--   then for each limit i = 1..N, in plan order:
--      name            string (limit name)
--      quota           0..1,000,000,000,000,000 (0 refuses all but a peek); decimal, no
--                      leading zeros (it is copied into flag fields and events as given)
--      shadow          1: a shadow limit (docs/semantics.md, Shadow limits): it never denies;
--                      admitted, its counter grows by the cost even past the quota (capped at
--                      kMaxUsed), and its 100% threshold also fires at a request it would have
--                      denied; an unusable shadow counter is left alone and denies nothing.
--                      0: an enforced limit
--      expire_at       Unix seconds: window end + grace (EXPIREAT, absolute; must be in the future)
--      window_start    Unix seconds
--      window_end      Unix seconds
--      T               number of thresholds of this limit
--      T pairs         percent (1..100), count = ceil(quota * percent / 100), precomputed by caller
--   then, for each further part of a group: cost, N, subject, plan and its N limits as above.
--
-- Reply (integers only): { allowed (0|1), used_1, ..., used_M, fired, refused } (M = every
-- limit of every part, part by part), or { -1 } when the deadline had passed (nothing was read or
-- written)
--   allowed  1 iff every limit of every part fits (one verdict for the whole group)
--   used_i   counter i after this request (incremented if admitted, unchanged if denied), or -1
--            when the counter key holds no valid counter (see "Unusable counters" below)
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
--
-- Unusable counters: a valid counter is "0" or a decimal integer without leading zeros of at most
-- kMaxUsed (no admission takes an enforced limit's counter past its quota, no quota exceeds
-- kMaxUsed, and a shadow limit's counter stops at kMaxUsed). A
-- counter key holding anything else — a negative number, garbage, a value beyond kMaxUsed, a key
-- of another type — was not written by this script: the limit counts as exhausted (every request,
-- peeks included, is denied; the reply says -1 for it), nothing is written and nothing fires. So
-- INCRBY only ever runs on a valid counter: it cannot fail half-way through the script (Redis
-- does not roll back a script's earlier writes) and cannot approach INT64_MAX.
-- Values are Lua doubles: exact up to 2^53 (about 9.007e15), above kMaxUsed + cost. A flag hash
-- or outbox key of the wrong type is read as "already fired" / "full" instead of failing the call.

local kMaxUsed = 1000000000000000
local kMaxCost = 1000000

-- The value of a counter key, 0 when missing, or -1 when it holds no valid counter.
local function read_counter(key)
  local v = redis.pcall('GET', key)
  if v == false or v == nil then return 0 end
  if type(v) ~= 'string' or #v > 16 then return -1 end
  if v ~= '0' and not string.match(v, '^[1-9]%d*$') then return -1 end
  local n = tonumber(v)
  if n == nil or n > kMaxUsed then return -1 end
  return n
end

local now_ms = ARGV[2]
local outbox_max = tonumber(ARGV[3])
local deadline_us = tonumber(ARGV[4])

if outbox_max == nil then
  return redis.error_reply('ERR sluice decide: bad outbox_max')
end
if deadline_us == nil then
  return redis.error_reply('ERR sluice decide: bad deadline_us')
end

-- The parts: the first one's header is ARGV[1] (cost) and ARGV[5..7]; a further part's is
-- cost, N, subject, plan right after the previous part's limits.
local parts = {}
local a = 8
local k = 1  -- the next part's first key
local cost_at, header_at = 1, 5
while true do
  local part = {
    cost = tonumber(ARGV[cost_at]), n = tonumber(ARGV[header_at]),
    subject = ARGV[header_at + 1], plan = ARGV[header_at + 2], limits = {}, key = k,
  }
  local p = #parts + 1
  if part.cost == nil or part.cost < 0 or part.cost > kMaxCost or
      part.cost ~= math.floor(part.cost) then
    return redis.error_reply('ERR sluice decide: bad cost')
  end
  if part.n == nil or part.n < 1 or part.n ~= math.floor(part.n) or part.subject == nil or
      part.plan == nil or k + 2 * part.n > #KEYS then
    return redis.error_reply('ERR sluice decide: expected 2N keys per part and the outbox')
  end
  for i = 1, part.n do
    local t = tonumber(ARGV[a + 6])
    local limit = {
      name = ARGV[a], quota = tonumber(ARGV[a + 1]), quota_text = ARGV[a + 1],
      shadow = ARGV[a + 2] == '1', expire_at = ARGV[a + 3],
      window_start = ARGV[a + 4], window_end = ARGV[a + 5], thresholds = {},
    }
    -- A quota of 0 refuses every request but a peek (envoyproxy/ratelimit's way to block).
    if limit.quota == nil or limit.quota < 0 or limit.quota > kMaxUsed or t == nil or
        (limit.quota_text ~= '0' and not string.match(limit.quota_text, '^[1-9]%d*$')) or
        (ARGV[a + 2] ~= '0' and ARGV[a + 2] ~= '1') then
      return redis.error_reply('ERR sluice decide: bad limit ' .. i .. ' of part ' .. p)
    end
    a = a + 7
    for j = 1, t do
      limit.thresholds[j] = {
        percent = ARGV[a], count = tonumber(ARGV[a + 1]),
        field = ARGV[a] .. ':' .. limit.quota_text,  -- the flag: this percent of this quota
      }
      a = a + 2
    end
    part.limits[i] = limit
  end
  parts[p] = part
  k = k + 2 * part.n
  if a > #ARGV then break end
  cost_at, header_at = a, a + 1
  a = a + 4
end
if a - 1 ~= #ARGV then
  return redis.error_reply('ERR sluice decide: ARGV does not match N and the thresholds')
end
if k ~= #KEYS then
  return redis.error_reply('ERR sluice decide: expected 2N keys per part and the outbox')
end

if deadline_us > 0 then
  -- Unix microseconds, about 1.8e15: exact in a double.
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000000 + tonumber(t[2]) >= deadline_us then
    return { -1 }
  end
end

-- Admission: all-or-nothing over every enforced (not shadow) limit of every part.
local allowed = 1
for _, part in ipairs(parts) do
  part.used = {}
  for i = 1, part.n do
    part.used[i] = read_counter(KEYS[part.key + i - 1])
    if not part.limits[i].shadow and
        (part.used[i] < 0 or part.used[i] + part.cost > part.limits[i].quota) then
      allowed = 0
    end
  end
end

local outbox = KEYS[#KEYS]
local fired, refused = 0, 0
local room = nil  -- free places in the outbox, read once on first need

-- Records threshold `th` of limit i of `part` at counter value `after`: event first, then the
-- flag. A full outbox leaves the flag unset (armed), as the memory store does.
local function fire(part, i, th, after)
  if room == nil then
    local len = redis.pcall('XLEN', outbox)
    room = type(len) == 'number' and outbox_max - len or 0
  end
  if room <= 0 then
    refused = refused + 1
    return
  end
  local limit = part.limits[i]
  local flags = KEYS[part.key + part.n + i - 1]
  redis.call('XADD', outbox, '*',
    'type', 'quota.threshold_reached', 'subject', part.subject, 'plan', part.plan,
    'limit', limit.name,
    -- %d, not tostring: Lua prints doubles from 1e14 on with an exponent and 14 digits.
    'threshold', th.percent, 'used', string.format('%d', after), 'quota', limit.quota_text,
    'window_start', limit.window_start, 'window_end', limit.window_end,
    'occurred_at_ms', now_ms)
  room = room - 1
  redis.call('HSET', flags, th.field, '1')
  redis.call('EXPIREAT', flags, limit.expire_at)
  fired = fired + 1
end

-- A peek (a part of cost 0) writes nothing. An admission adds each part's cost to its counters
-- and may fire any threshold; a denial writes no counter but may fire the 100% threshold of each
-- limit that itself denied (or, shadow, would have denied).
for _, part in ipairs(parts) do
  local cost, used = part.cost, part.used
  if cost > 0 then
    for i = 1, part.n do
      local limit = part.limits[i]
      local counter = KEYS[part.key + i - 1]
      -- An unusable counter (-1) denies (unless shadow), but is left alone and fires nothing: its
      -- value means nothing.
      local violated = allowed == 0 and used[i] >= 0 and used[i] + cost > limit.quota
      if allowed == 1 and used[i] >= 0 and limit.shadow and used[i] + cost > kMaxUsed then
        -- A shadow counter past its quota stops at kMaxUsed (so it stays a valid counter). It
        -- holds more than the cost, so the key exists and has its expiry.
        if used[i] < kMaxUsed then
          redis.call('SET', counter, string.format('%d', kMaxUsed), 'KEEPTTL')
        end
        used[i] = kMaxUsed
      elseif allowed == 1 and used[i] >= 0 then
        used[i] = redis.call('INCRBY', counter, cost)
        -- INCRBY returning the cost means it created the key (a counter is never written
        -- otherwise): give it its expiry now, in the same atomic step. An existing counter
        -- already has the same one (same window, same expire_at), so skipping it saves a
        -- command per limit.
        if used[i] == cost then redis.call('EXPIREAT', counter, limit.expire_at) end
      end
      if (allowed == 1 and used[i] >= 0) or violated then
        for _, th in ipairs(limit.thresholds) do
          local crossed
          if allowed == 1 then
            crossed = used[i] >= th.count
          else
            crossed = tonumber(th.percent) == 100
          end
          if crossed and
              redis.pcall('HEXISTS', KEYS[part.key + part.n + i - 1], th.field) == 0 then
            fire(part, i, th, used[i])
          end
        end
      end
    end
  end
end

local reply = { allowed }
for _, part in ipairs(parts) do
  for i = 1, part.n do reply[#reply + 1] = part.used[i] end
end
reply[#reply + 1] = fired
reply[#reply + 1] = refused
return reply
