-- reservation.lua — a reservation's steps (docs/semantics.md, Reservations): reserve, settle,
-- release, expire and extend, each one atomic call. Embedded after decide.lua, which comes
-- first as the function decide(KEYS, ARGV) (reservation_script.h.in), so a reservation is
-- decided, and a settle charged, exactly as a decision is (holds, shadow limits, thresholds and
-- their outbox events, unusable counters). Every key shares the subject's hash tag {<bucket>}, so
-- the call is valid on Redis Cluster.
--
-- KEYS
--   1  the reservation record  <prefix>:{<bucket>}:rsv:<id up to its first '.'>, a hash:
--        subject, plan (made under), holds ("<field> <amount> ..." of the hold hash), estimate,
--        expires_at (ms, the limiter's clock), charge ("1": on expiry the estimate is charged),
--        state (open | settle | release | expire: how it ended), charged (what it charged).
--        It lives until expires_at + 10 minutes (kReservationMemory; extend moves it).
--   2  the bucket's due set    <prefix>:{<bucket>}:rsvdue: the ids of the bucket's open
--        reservations scored by expires_at (ms); RedisStore::DueReservations reads it. Its expiry
--        follows the latest record's (EXPIREAT GT), so it never outlives them.
--   3  the subject's hold hash <prefix>:{<bucket>}:hold:<subject> (decide.lua's header). Its
--        expiry follows the latest expires_at of its reservations plus the grace (EXPIREAT GT).
--   then (reserve, settle, release, expire) decide.lua's KEYS for one part: the subject's N
--   counter hashes, the hold hash again, the outbox.
--
-- ARGV
--   1  op        reserve | settle | release | expire | extend
--   2  id        the reservation's id (the due set's member)
--   3  subject
--   4  at_ms     reserve, extend: the new expires_at; settle, release, expire: now (ms; the
--                limiter's clock, as expires_at)
--   5  keep_at   reserve, extend: EXPIREAT of the record (Redis's clock, Unix s): expires_at + 10
--                minutes; otherwise ""
--   6  hold_at   reserve, extend: EXPIREAT of the hold hash (Unix s): expires_at + grace
--   7  estimate  reserve: what it holds of every counting limit (decide.lua's `hold` is the same)
--   8  charge    reserve: "1" when an expiry charges the estimate, "0" when it releases
--   then (reserve, settle, release, expire) decide.lua's ARGV for one part: deadline_us, event,
--   cost, N, subject, plan, hold, 4 N limit values. A settle's caller marks every limit shadow
--   (1, concurrent 4): a charge is never denied and a counter grows past its quota (up to
--   kMaxUsed); the script sets the cost to what is charged (0 when nothing is: it only reads).
--
-- Reply
--   reserve: decide.lua's reply; if admitted, always with held_1..N (after the reservation).
--     An id in use: the error "EXISTS ...".
--   settle, release, expire: { outcome } when no reservation of this subject has the id
--     (outcome 3), else { outcome, ended_by, charged, allowed, used_1..N, fired, refused,
--     held_1..N, before_1..N }: outcome 0 ended now, 1 repeated (a settle with the cost it was
--     settled with, or a release of a released one: nothing changed), 2 conflict (ended
--     otherwise), 4 not due (an expire of a reservation not due or no longer open); ended_by 0
--     settle, 1 release, 2 expire; charged what it charged (now, or when it ended); used and held
--     after the call; before_i the counter before the charge (-1 unusable; 0 unless charged now).
--   extend: { 0 } extended, { 1 } not found, { 2 } already ended.

local op, id, subject = ARGV[1], ARGV[2], ARGV[3]
local record, due, holdkey = KEYS[1], KEYS[2], KEYS[3]

-- Sets the expiry of `key` to `at` unless it already lasts longer (a key without one gets it).
local function expire_at_least(key, at)
  redis.call('EXPIREAT', key, at, 'NX')
  redis.call('EXPIREAT', key, at, 'GT')
end

if op == 'extend' then
  local r = redis.call('HMGET', record, 'subject', 'state')
  if r[1] ~= subject then return { 1 } end
  if r[2] ~= 'open' then return { 2 } end
  redis.call('HSET', record, 'expires_at', ARGV[4])
  redis.call('EXPIREAT', record, ARGV[5])
  redis.call('ZADD', due, ARGV[4], id)
  expire_at_least(due, ARGV[5])
  if redis.call('EXISTS', holdkey) == 1 then redis.call('EXPIREAT', holdkey, ARGV[6], 'GT') end
  return { 0 }
end

-- decide.lua's keys and arguments.
local dk, da = {}, {}
for i = 4, #KEYS do dk[#dk + 1] = KEYS[i] end
for i = 9, #ARGV do da[#da + 1] = ARGV[i] end
local n = tonumber(da[4])
if n == nil or #dk ~= n + 2 or #da ~= 7 + 4 * n or da[5] ~= subject then
  return redis.error_reply('ERR sluice reservation: expected one part of decide.lua')
end

-- The hold hash field of limit j (decide.lua's rule) and whether it is a concurrent one.
local function field(j)
  local kind, f = string.match(dk[j], '}:([hsg]):([^:]*:[^:]*):[^:]*:[^:]*$')
  return (kind == 'h' and f) or (kind and kind .. ':' .. f) or ''
end
local function concurrent(j)
  local kind = da[8 + 4 * (j - 1) + 1]
  return kind == '3' or kind == '4'
end

-- What is held of every limit now.
local function held_now()
  local fields = {}
  for j = 1, n do fields[j] = field(j) end
  local v = redis.pcall('HMGET', holdkey, unpack(fields))
  local out = {}
  for j = 1, n do
    local amount = type(v) == 'table' and tonumber(v[j]) or 0
    if amount == nil or amount < 0 then amount = 0 end
    out[j] = amount
  end
  return out
end

if op == 'reserve' then
  if redis.call('EXISTS', record) == 1 then
    return redis.error_reply('EXISTS sluice reservation: id already in use')
  end
  local out = decide(dk, da)
  if type(out) ~= 'table' or out.err or out[1] ~= 1 then return out end
  local estimate = tonumber(ARGV[7]) or 0
  local holds = {}
  for j = 1, n do
    local amount = concurrent(j) and 1 or estimate
    if amount > 0 then
      redis.call('HINCRBY', holdkey, field(j), amount)
      holds[#holds + 1] = field(j) .. ' ' .. amount
    end
  end
  if #holds > 0 then expire_at_least(holdkey, ARGV[6]) end
  redis.call('HSET', record, 'subject', subject, 'plan', da[6], 'holds', table.concat(holds, ' '),
    'estimate', ARGV[7], 'expires_at', ARGV[4], 'charge', ARGV[8], 'state', 'open',
    'charged', '0')
  redis.call('EXPIREAT', record, ARGV[5])
  redis.call('ZADD', due, ARGV[4], id)
  expire_at_least(due, ARGV[5])
  local reply = {}
  for i = 1, n + 3 do reply[i] = out[i] end
  local held = held_now()
  for j = 1, n do reply[n + 3 + j] = held[j] end
  return reply
end

if op ~= 'settle' and op ~= 'release' and op ~= 'expire' then
  return redis.error_reply('ERR sluice reservation: bad op')
end
local ends = { settle = 0, release = 1, expire = 2 }

local r = redis.call('HMGET', record, 'subject', 'state', 'charged', 'expires_at', 'estimate',
  'charge', 'holds')
if r[1] ~= subject then
  -- An expiry of a reservation forgotten while open (no instance ended it for 10 minutes): its
  -- entry leaves the due set, or it would come back every round ahead of those still due.
  if op == 'expire' then redis.call('ZREM', due, id) end
  return { 3 }
end

local outcome, ended_by, charged = 0, 0, 0
if r[2] ~= 'open' then
  ended_by, charged = ends[r[2]] or 0, tonumber(r[3]) or 0
  if op == 'expire' then
    outcome = 4
  elseif op == r[2] and (op == 'release' or tonumber(da[3]) == charged) then
    outcome = 1
  else
    outcome = 2
  end
  da[3] = '0'
elseif op == 'expire' and (tonumber(r[4]) or 0) > (tonumber(ARGV[4]) or 0) then
  outcome = 4
  da[3] = '0'
else
  ended_by = ends[op]
  if op == 'release' then
    da[3] = '0'
  elseif op == 'expire' then
    da[3] = r[6] == '1' and (r[5] or '0') or '0'
  end
  charged = tonumber(da[3]) or 0
end

-- The counters before the charge (decide.lua's rule for what is a counter).
local before = {}
for j = 1, n do
  before[j] = 0
  if outcome == 0 and charged > 0 and not concurrent(j) then
    local v = redis.pcall('HGET', dk[j], subject)
    if v == false or v == nil then
      before[j] = 0
    elseif type(v) ~= 'string' or #v > 16 or (v ~= '0' and not string.match(v, '^[1-9]%d*$')) then
      before[j] = -1
    else
      before[j] = tonumber(v)
    end
  end
end

-- The charge first (or a read): if Redis refuses it, nothing has changed and the error is the
-- reply.
local out = decide(dk, da)
if type(out) ~= 'table' or out.err or out[1] ~= 1 then return out end

if outcome == 0 then
  -- Ended now: its holds go back (never below 0: a hold hash that expired holds nothing).
  for f, amount in string.gmatch(r[7] or '', '(%S+) (%S+)') do
    local left = redis.pcall('HINCRBY', holdkey, f, -tonumber(amount))
    if type(left) == 'number' and left <= 0 then redis.call('HDEL', holdkey, f) end
  end
  redis.call('HSET', record, 'state', op, 'charged', da[3])
  redis.call('ZREM', due, id)
end

local reply = { outcome, ended_by, charged }
for i = 1, n + 3 do reply[#reply + 1] = out[i] end
local held = held_now()
for j = 1, n do reply[#reply + 1] = held[j] end
for j = 1, n do reply[#reply + 1] = before[j] end
return reply
