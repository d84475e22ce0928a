-- decide.lua — one rate-limit decision (docs/semantics.md) in one atomic step: a single request,
-- or a group of requests of distinct subjects decided all-or-nothing (admitted iff every part
-- fits). Requires Redis >= 7.0 (EXPIREAT NX; effects replication: XADD with an auto id).
--
-- Every key of one call shares one hash tag {<bucket>} (docs/redis.md), so the script is valid on
-- Redis Cluster. The caller (RedisStore) builds the keys; <bucket> is a fixed function of the
-- subject, or of the group for a group-placed subject (a hash of it modulo a bucket count fixed
-- at deployment), so the outbox streams are exactly <prefix>:{0}:outbox .. <prefix>:{B-1}:outbox
-- and a delivery worker finds them all.
--
-- KEYS: per part, in order, N keys (N = number of limits of the part's plan, in plan order) and
-- the part's hold hash, then the outbox; a single decision is one part (N + 2 keys):
--   counter hash of limit i  <prefix>:{<bucket>}:h:<limit>:<window>:<window_id>:<slot>
--                            field <subject>, value the counter (an integer). The subjects of one
--                            slot (a hash of the subject) share the hash: small hashes stay
--                            listpack-encoded, a few bytes per subject (docs/redis.md).
--                            A concurrent limit has no counter: its key is never touched.
--   hold hash of the part    <prefix>:{<bucket>}:hold:<subject>: what the subject's open
--                            reservations hold (reservation.lua writes it), field
--                            "<limit>:<window>" (the counter key's part between ":h:" and the
--                            window id: a hold belongs to no window), value the amount held (a
--                            concurrent limit: the slots taken). Only read, and only when it
--                            exists: a subject without holds costs one EXISTS.
--   last: the bucket's outbox stream   <prefix>:{<bucket>}:outbox
-- The alert flags of a subject and limit are one more field of the same counter hash, touched
-- only when a threshold is reached: field "#<subject>" ('#' is no subject's character, so it
-- cannot be a counter), value the fired flags "<percent>:<quota>", separated by spaces. A flag
-- thus lives in a key of the call's KEYS and moves with its counter when Redis Cluster migrates
-- the key: no threshold can fire twice because a flag and its counter were on different nodes.
--   Before, flags were a hash of their own, <prefix>:{<bucket>}:a:<limit>:<window>:<window_id>:
--   <subject> (field "<percent>:<quota>"), derived from the counter key. A flag found there still
--   counts (a threshold fired before an upgrade does not fire again); nothing is written there.
--   No plan in the keys: counters and flags follow the subject from plan to plan; <window> is the
--   fixed length in seconds ("60s") or "<day|week|month|year>@<zone>" (docs/redis.md). A flag
--   names the quota it fired under, so a threshold fires once per subject, limit, window and
--   effective quota: a quota raised by a plan change or an override has its thresholds armed, and
--   one changed back finds its flags still set.
--
-- ARGV (decimal integers unless noted):
--   1  deadline_us     Unix microseconds (Redis's clock), no later than the instant the caller
--                      stops waiting and answers without Redis. A call that starts at or after it
--                      changes nothing and replies {-1}. 0: no deadline. (A Redis that stalls, e.g.
--                      SIGSTOP, runs the commands queued in its socket buffers when it resumes;
--                      without this they would charge requests already answered as degraded.)
--   2  event           "<now_ms> <outbox_max>", read only when a threshold fires: the event's
--                      occurred_at_ms (corrected clock), and the outbox's capacity (at XLEN >=
--                      outbox_max an event is refused and its flag stays armed)
--   then per part:
--      cost            0..1,000,000, a canonical decimal integer (it goes to HINCRBY as sent);
--                      0 is a peek of that part: nothing of it is written, nothing of it fires
--      N               number of limits of the part
--      subject         string (the counters' field)
--      plan            string (the plan in force, for the event only)
--      hold            "" for a decision; for a reservation (reservation.lua), its estimate
--                      (0..1,000,000), asked for besides the cost on every counting limit, and the
--                      reservation needs a free slot of every concurrent limit even at cost 0
--      then for each limit i = 1..N, in plan order, 4 values:
--        quota         0..1,000,000,000,000,000 (0 refuses all but a peek)
--        shadow        1: a shadow limit (docs/semantics.md, Shadow limits): it never denies;
--                      admitted, its counter grows by the cost even past the quota (capped at
--                      kMaxUsed), and its 100% threshold also fires at a request it would have
--                      denied; an unusable shadow counter is left alone and denies nothing.
--                      0: an enforced limit
--                      2: an enforced credit limit (a window that never ends): every admitted
--                      charge pushes its hash's expiry forward to expire_at (EXPIREAT GT), so
--                      its usage lives as long as it is used. A shadow credit limit is sent as 1
--                      and recognised by its window_start of 0 (the epoch; no other window of
--                      this century starts there).
--                      3: a concurrent limit (no counter; any request of cost >= 1, and any
--                      reservation, needs held + 1 <= quota), 4: a shadow concurrent limit
--                      5: a sliding limit, 6: a shadow (or charged) one; 7: a gcra limit, 8: a
--                      shadow (or charged) one (limiter/algorithm.h; "Sliding and gcra limits"
--                      below)
--        first         the count of the limit's lowest threshold (no threshold below it can be
--                      reached, so nothing about alerts is read while used < first); "" when the
--                      limit has no thresholds. Sliding: "<weight> <next>" or
--                      "<weight> <next> <first>"; gcra: "<now_us> <interval_us> <burst>
--                      <max_debt_us> <period_us> <period_end_us> <next>" (below); <next> is 1
--                      when the next window's (period's) field may exist (else it is not read)
--        static        "<expire_at> <window_start> <window_end> <name> <percent> <count> ...":
--                      Unix seconds (expire_at = window end + grace, for EXPIREAT; must be in the
--                      future), the limit's name, and each threshold's percent (1..100) and
--                      count = ceil(quota * percent / 100), precomputed by the caller; read only
--                      when a counter is created or a threshold is reached
--
-- Reply (integers only): { allowed (0|1), used_1, ..., used_M, fired, refused } (M = every
-- limit of every part, part by part), followed by held_1, ..., held_M when some part's hold hash
-- exists, or { -1 } when the deadline had passed (nothing was read or written)
--   allowed  1 iff every limit of every part fits (one verdict for the whole group)
--   used_i   counter i after this request (incremented if admitted, unchanged if denied), or -1
--            when the counter holds no valid counter (see "Unusable counters" below)
--   fired    events written to the outbox by this call
--   refused  thresholds that crossed but were not recorded because the outbox was full
--   held_i   what open reservations hold of limit i (a concurrent limit: slots taken)
--
-- Holds count as used: a counting limit admits iff used + held + cost (+ hold) <= quota, and its
-- 100% threshold fires at a denial iff used + held + cost > quota; alerts fire on counters only.
--
-- Outbox entry fields (all strings): type=quota.threshold_reached, subject, plan, limit,
--   threshold, used, quota, window_start, window_end (Unix seconds), occurred_at_ms.
--
-- How: an admission is the common case, so each enforced counter of a paying part is incremented
-- at once (HINCRBY) and checked after; the first that does not fit (or holds no valid counter)
-- takes every increment of this call back and the call is decided again by reading (HGET), as a
-- denial. So an admitted request costs one command per limit, plus EXPIREAT when it creates a
-- counter, plus flag reads only once a threshold is reached. An enforced limit whose quota is
-- below the cost is read, not incremented (such a denial writes nothing). When Redis refuses the
-- first write (OOM, NOREPLICAS, MISCONF, READONLY, ...), nothing is written yet and the call is
-- decided by reading: a denial is answered as any denial (its 100% alert, refused, counts as
-- refused), and Redis's error is the reply only if every limit would fit. A refused EXPIREAT
-- (NX needs Redis >= 7.0) takes every increment of the call back and is the reply.
--
-- Expiry: a counter hash gets EXPIREAT expire_at NX in the call that creates a counter field or
-- writes a flag (every subject of a hash shares the window, so the first expiry is everyone's),
-- so no key this script writes is ever left without a TTL; a credit limit's hash also gets
-- EXPIREAT GT at every admitted charge (its window never ends; its expiry follows the last use).
-- The outbox stream is the exception by design: one long-lived key per bucket, bounded by
-- outbox_max, emptied by the dispatcher (XACK + XDEL).
--
-- Sliding and gcra limits (kinds 5 to 8; the arithmetic is limiter/algorithm.h's, in integers
-- that stay below 2^53). Decided by reading (a sliding limit's common case by an HINCRBY checked
-- after, as a counter), charged on the first pass while everything fits, and restored from an
-- undo log if the call is then denied; a field moved to another window's hash is deleted only
-- once the call is admitted.
--   sliding: key <prefix>:{<bucket>}:s:<limit>:<window>:<window_id>:<slot>, field <subject>:
--     prev * 10^8 + cur (the previous window's count and this one's, each at most 9,999,999),
--     flags as a counter's. Read: this window's field; if the next window's exists, the state
--     is that one (a late call: another instance's decision of the next window already ran)
--     and the previous window weighs in full; if neither, the previous window's field gives
--     prev (its cur). Admitted iff cur + ceil(prev * weight / 10^6) + holds + cost <= quota,
--     weight the caller's (the previous window's share now, in millionths). The reply is the
--     packed value as the caller's window sees it (a late call: 0 * 10^8 + prev + cur). Written
--     with its expiry (expire_at, the window's end plus a window plus the grace; a window more
--     for the next window's key).
--   gcra: key <prefix>:{<bucket>}:g:<limit>:<window>:<period_id>:<slot> (periods of two
--     windows), field <subject>: the theoretical arrival time in microseconds after the start of
--     the key's period, kept in the period it falls in: this period's field or the next one's,
--     the later of the two.
--     debt = max(tat - now, 0); admitted iff holds + cost <= burst and
--     debt + (holds + cost) * interval <= burst * interval; charged (cost units) up to
--     max_debt. The reply is the debt. Expiry: the period's end plus the grace.
--   A value that is not a canonical integer, a sliding count above 9,999,999 or a debt above
--   a period is unusable, as an unusable counter (below).
--
-- Unusable counters: a valid counter is "0" or a decimal integer without leading zeros of at most
-- kMaxUsed (no admission takes an enforced limit's counter past its quota, no quota exceeds
-- kMaxUsed, and a shadow limit's counter stops at kMaxUsed). A field holding anything else — a
-- negative number, garbage, a value beyond kMaxUsed — or a counter key of another type was not
-- written by this script: the limit counts as exhausted (every request, peeks included, is
-- denied; the reply says -1 for it), its value is left as it was and nothing fires. An increment
-- that finds one fails (HINCRBY refuses non-integers and overflow) or is taken back in the same
-- call, and no increment runs on a counter whose value cannot be exact: a valid one plus the cost
-- stays below 2^53, exact in a Lua double. An earlier flag hash or an outbox key of the wrong
-- type is read as "already fired" / "full" instead of failing the call; any other error reading
-- a flag, or a refused XADD, leaves the threshold armed and counts it as refused.

local kMaxUsed = 1000000000000000
local kMaxCost = 1000000
local tonumber, find, sub = tonumber, string.find, string.sub
local nargs, nkeys = #ARGV, #KEYS

local deadline_us = tonumber(ARGV[1])
if deadline_us == nil then
  return redis.error_reply('ERR sluice decide: bad deadline_us')
end
if deadline_us > 0 then
  -- Unix microseconds, about 1.8e15: exact in a double.
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000000 + tonumber(t[2]) >= deadline_us then
    return { -1 }
  end
end

-- The helpers of the rarer paths are made on first need, by helpers(): a closure made on every
-- call costs every call (measured: about 65 ns each), and the common path needs none of them.
local read_counter, undo, expire_new, read_fit, fire, held_of
-- What open reservations hold, by reply slot (held[r] for the limit of reply[r]); nil when no part
-- has a hold hash (the common case).
local held = nil

local function helpers()
  -- read_counter(key, field): the value of a counter field, 0 when missing, or -1 when it holds
  -- no valid counter.
  read_counter = function(key, field)
    local v = redis.pcall('HGET', key, field)
    if v == false or v == nil then return 0 end
    if type(v) ~= 'string' or #v > 16 then return -1 end
    if v ~= '0' and not string.match(v, '^[1-9]%d*$') then return -1 end
    local n = tonumber(v)
    if n == nil or n > kMaxUsed then return -1 end
    return n
  end

  -- undo(key, field, cost, after): takes back an increment of `cost` that left `after` in the
  -- field (a field it created goes).
  undo = function(key, field, cost, after)
    if after == cost then
      redis.call('HDEL', key, field)
    else
      redis.call('HINCRBY', key, field, -cost)
    end
  end

  -- A new field (the increment returned the cost) may have created its hash: the hash gets its
  -- expiry in the same atomic step (EXPIREAT NX: the first one set stays; every subject of the
  -- hash shares the window). False if the limit's static part does not start with an expiry.
  -- A refused EXPIREAT (e.g. NX on a Redis older than 7.0) returns Redis's error reply: the
  -- caller takes back its increments and fails the call, so no key is left without a TTL.
  -- With `push` (a credit limit) the expiry also moves forward when it is later than the one
  -- set (GT; a key without one gets it by NX).
  expire_new = function(key, static, push)
    local space = find(static, ' ', 1, true)
    local at = space and tonumber(sub(static, 1, space - 1))
    if at == nil then return false end
    local ok = 0
    if push then ok = redis.pcall('EXPIREAT', key, string.format('%d', at), 'GT') end
    if ok == 0 then ok = redis.pcall('EXPIREAT', key, string.format('%d', at), 'NX') end
    if type(ok) == 'table' and ok.err then return ok end
    return true
  end

  -- What hold hash KEYS[k + n] holds of the n limits whose counter keys are KEYS[k..k+n-1], as
  -- held[r..r+n-1] (0 when nothing; a hash of another type or a value that is no count holds
  -- nothing).
  held_of = function(k, n, r)
    local fields = {}
    for j = 0, n - 1 do
      local kind, field = string.match(KEYS[k + j], '}:([hsg]):([^:]*:[^:]*):[^:]*:[^:]*$')
      fields[j + 1] = (kind == 'h' and field) or (kind and kind .. ':' .. field) or ''
    end
    local v = redis.pcall('HMGET', KEYS[k + n], unpack(fields))
    for j = 0, n - 1 do
      local amount = type(v) == 'table' and tonumber(v[j + 1]) or 0
      if amount == nil or amount < 0 or amount > kMaxUsed then amount = 0 end
      held[r + j] = amount
    end
  end

  -- The counter of `subject` in `key` if `cost` more fits `quota` there, else nil: the decision
  -- of a peek, of a cost that cannot fit, and of a call whose first write Redis refused (read
  -- only).
  read_fit = function(key, subject, cost, quota)
    local used = read_counter(key, subject)
    if used < 0 or used + cost > quota then return nil end
    return used
  end
end

-- Sliding and gcra limits: algo[r] is what was read of the limit of reply slot r (nil while no
-- such limit was met); algo_read and algo_write are made on first need.
local algo = nil
local algo_read, algo_write, algo_fits, algo_sliding_fast
-- What the algorithm writes of this call replaced: { key, field, old value or nil }, in order.
local undo_log = nil
-- Fields the algorithm writes moved elsewhere ({ key, field }): deleted only once the call is
-- admitted (deleting a hash's last field deletes the hash and its expiry, which a take_back
-- could not give back).
local moved = nil
local function delete_moved()
  for i = 1, moved and #moved or 0 do redis.pcall('HDEL', moved[i][1], moved[i][2]) end
  moved = nil
end

local function algo_helpers()
  local radix, max_count = 100000000, 9999999

  -- The field's value: a number, nil when missing, false when it is no canonical integer.
  local function stored(key, subject)
    local v = redis.pcall('HGET', key, subject)
    if v == false or v == nil then return nil end
    if type(v) ~= 'string' or #v > 16 or not (v == '0' or string.match(v, '^[1-9]%d*$')) then
      return false
    end
    return tonumber(v)
  end
  -- The key of the window (period) `delta` after `key`'s.
  local function beside(key, delta)
    local head, id, slot = string.match(key, '^(.*):(%d+):([^:]*)$')
    if head == nil then return nil end
    return head .. ':' .. string.format('%d', tonumber(id) + delta) .. ':' .. slot
  end
  local function split(v)
    local prev = math.floor(v / radix)
    return prev, v - prev * radix
  end

  -- What limit `kind` (its key, the subject, its "first" value) holds: a table with `usable`,
  -- `reply` (what the reply says of it as read) and what algo_write needs; nil if `params` is
  -- malformed.
  algo_read = function(kind, key, subject, params)
    local st = { kind = kind, key = key, write_key = key, usable = true }
    if kind == '5' or kind == '6' then
      local weight, check, first = string.match(params, '^(%d+) ([01]) ?(%d*)$')
      st.weight, st.first = tonumber(weight), tonumber(first)
      if st.weight == nil or st.weight > 1000000 then return nil end
      local v, next_key = nil, nil
      if check == '1' then
        next_key = beside(key, 1)
        if next_key == nil then return nil end
        v = stored(next_key, subject)
      end
      if v ~= nil then
        st.late, st.write_key, st.old = true, next_key, v
      else
        v = stored(key, subject)
        st.old = v
        if v == nil then
          -- The previous window's field: its count is this window's prev, and the field goes
          -- when this window's is written (one field per subject).
          local prev_key = beside(key, -1)
          local before = stored(prev_key, subject)
          if before ~= nil and before ~= false then
            st.prev_key, st.prev_old = prev_key, before
            local prev, cur = split(before)
            before = prev <= max_count and cur <= max_count and cur * radix or false
          end
          v = before or (before == nil and 0) or false
        end
      end
      if v == false then
        st.usable = false
      else
        st.prev, st.cur = split(v)
        st.usable = st.prev <= max_count and st.cur <= max_count
      end
      if not st.usable then
        st.reply = -1
        return st
      end
      local w = st.late and 1000000 or st.weight
      st.share = math.floor((st.prev * w + 999999) / 1000000)
      st.reply = st.late and st.prev + st.cur or st.prev * radix + st.cur
      return st
    end
    local now, interval, burst, max_debt, period, period_end, check =
      string.match(params, '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+) ([01])$')
    st.now, st.interval, st.burst = tonumber(now), tonumber(interval), tonumber(burst)
    st.max_debt, st.period, st.period_end = tonumber(max_debt), tonumber(period), tonumber(period_end)
    if st.now == nil or st.interval == nil or st.interval < 1 then return nil end
    -- Arrival times are kept as microseconds after the start of the period of their hash.
    st.a = stored(key, subject)
    if check == '1' then
      st.next_key = beside(key, 1)
      if st.next_key == nil then return nil end
      st.b = stored(st.next_key, subject)
    end
    if st.a == false or st.b == false then
      st.usable, st.reply = false, -1
      return st
    end
    local tat = 0
    if st.a ~= nil then tat = st.period_end - st.period + st.a end
    if st.b ~= nil then tat = math.max(tat, st.period_end + st.b) end
    st.debt = math.max(tat - st.now, 0)
    if st.debt > st.period then
      st.usable, st.reply = false, -1
      return st
    end
    st.reply = st.debt
    return st
  end

  -- Whether `need` more units fit (an enforced limit).
  algo_fits = function(st, quota, need)
    if not st.usable then return false end
    if st.kind == '5' then return st.cur + st.share + need <= quota end
    return need <= st.burst and st.debt + need * st.interval <= st.burst * st.interval
  end

  -- Remembers the value `old` (a number, or nil: no field) of `field` in `key`, for take_back.
  local function remember(key, field, old)
    if undo_log == nil then undo_log = {} end
    undo_log[#undo_log + 1] = { key, field, old }
  end

  -- The common case of a sliding limit charged in this window, where its field exists and no
  -- later window's can (its `next` flag 0): one HINCRBY (the cost adds to cur), checked after,
  -- as a counter is. Returns the limit's state (`denied` when it does not fit: the increment is
  -- taken back), or nil, having written nothing, when the general path must decide (a new field,
  -- a value that is no count, a refused increment).
  algo_sliding_fast = function(kind, key, subject, cost_text, cost, params, quota, extra)
    local weight, check, first = string.match(params, '^(%d+) ([01]) ?(%d*)$')
    weight = tonumber(weight)
    if check ~= '0' or weight == nil or weight > 1000000 then return nil end
    local after = redis.pcall('HINCRBY', key, subject, cost_text)
    if type(after) ~= 'number' then return nil end
    if after == cost then
      redis.call('HDEL', key, subject)
      return nil
    end
    local before = after - cost
    local prev, cur = split(before)
    if before < 0 or prev > max_count or cur > max_count then
      redis.call('HINCRBY', key, subject, -cost)
      return nil
    end
    local st = { kind = kind, key = key, write_key = key, usable = true, prev = prev, cur = cur,
                 first = tonumber(first), reply = before, old = before }
    st.share = math.floor((prev * weight + 999999) / 1000000)
    local charged = cur + cost
    if kind == '5' and charged + st.share + extra > quota then
      redis.call('HINCRBY', key, subject, -cost)
      st.denied = true
      return st
    end
    if charged > max_count then
      -- A charge past the largest count stops there.
      charged = max_count
      redis.call('HSET', key, subject, string.format('%d', prev * radix + charged))
    end
    remember(key, subject, before)
    st.charged, st.estimate = prev * radix + charged, charged + st.share
    return st
  end

  -- Charges `cost` (> 0): writes the new state (an expiry on a new field's hash), remembering
  -- the old one for take_back; sets st.charged (the reply) and, for sliding, st.estimate (what
  -- thresholds are compared with). `expire_at` is the key's (static's first word). Returns
  -- Redis's error reply if a write is refused.
  algo_write = function(st, subject, cost, expire_at)
    local key, at, value = st.write_key, expire_at, nil
    local sliding = st.kind == '5' or st.kind == '6'
    if sliding then
      local cur = math.min(st.cur + cost, max_count)
      value = st.prev * radix + cur
      st.charged = st.late and st.prev + cur or value
      st.estimate = cur + st.share
      if st.late then at = at + (tonumber(string.match(key, ':s:[^:]*:(%d+)s:')) or 0) end
    else
      local debt = st.debt
      if cost >= math.floor((st.max_debt - debt) / st.interval) + 1 then
        debt = math.max(debt, st.max_debt)
      else
        debt = debt + cost * st.interval
      end
      local tat = st.now + debt
      if tat >= st.period_end then
        if st.next_key == nil then st.next_key = beside(st.key, 1) end
        key = st.next_key
        at = at + math.floor(st.period / 1000000)
        value = tat - st.period_end
      else
        value = tat - (st.period_end - st.period)
      end
      st.charged = debt
    end
    local added = redis.pcall('HSET', key, subject, string.format('%d', value))
    if type(added) == 'table' and added.err then return added end
    if moved == nil then moved = {} end
    if sliding then
      remember(key, subject, st.old)
      if st.prev_key ~= nil then moved[#moved + 1] = { st.prev_key, subject } end
    else
      remember(st.key, subject, st.a)
      if st.next_key ~= nil then remember(st.next_key, subject, st.b) end
    end
    if added == 1 then
      local ok = redis.pcall('EXPIREAT', key, string.format('%d', at), 'NX')
      if type(ok) == 'table' and ok.err then return ok end
    end
    -- A gcra arrival time that moved to the next period leaves none behind.
    if not sliding then
      local other = key == st.key and st.next_key or st.key
      if (key == st.key and st.b ~= nil) or (key ~= st.key and st.a ~= nil) then
        moved[#moved + 1] = { other, subject }
      end
    end
    st.write_key = key
    return nil
  end
end

-- reply[1] is the verdict; reply[r] the counter of the (r-1)th limit of the call, part by part;
-- then `fired` and `refused` at reply[last] and reply[last + 1], and a nil at reply[last + 2]:
-- the reply ends at its first nil. Made with room for all that for up to three limits (a table
-- that grows is reallocated at 2, 3, 5 and 9 entries).
local reply = { 1, 0, 0, 0, 0, 0, 0 }
local last = 2

-- Admission, optimistically: each enforced counter of each paying part is incremented, each
-- enforced counter of a peek is read, in order, until one does not fit (`fits` false: nothing
-- more is written). Every part and limit is checked on the way, so that a malformed call is
-- refused with everything it did taken back. `done` counts the increments that stand; `more`
-- says whether any limit is shadow or reached its first threshold.
-- `ro`: Redis refused the first write (OOM, NOREPLICAS, MISCONF, READONLY, ...) before anything
-- was written: the rest is decided by reading only; a denial is answered as a denial, and the
-- refusal is returned only when everything would fit.
local fits, done, more, bad, failed, ro = true, 0, false, nil, nil, nil
do
  local h, k, r = 3, 1, 2
  while h <= nargs do
    local cost, n, subject = tonumber(ARGV[h]), tonumber(ARGV[h + 1]), ARGV[h + 2]
    if cost == nil or cost < 0 or cost > kMaxCost or cost % 1 ~= 0 then
      bad = 'bad cost'; break
    end
    if n == nil or n < 1 or n % 1 ~= 0 or ARGV[h + 4] == nil or k + n + 1 > nkeys or
        h + 4 + 4 * n > nargs then
      bad = 'expected N keys and a hold hash, 5 + 4 N values per part, then the outbox'; break
    end
    -- A reservation asks for `hold` more on every counting limit and for a slot.
    local hold, slot = 0, cost > 0
    if ARGV[h + 4] ~= '' then
      hold, slot = tonumber(ARGV[h + 4]), true
      if hold == nil or hold < 0 or hold > kMaxCost or hold % 1 ~= 0 then
        bad = 'bad hold'; break
      end
    end
    if redis.call('EXISTS', KEYS[k + n]) == 1 then
      if held_of == nil then helpers() end
      if held == nil then held = {} end
      held_of(k, n, r)
    end
    for a = h + 5, h + 4 + 4 * n, 4 do
      local quota, shadow, first = tonumber(ARGV[a]), ARGV[a + 1], ARGV[a + 2]
      -- What this limit must have room for besides the cost: its holds and the reservation's.
      local extra = (held and held[r] or 0) + hold
      local algorithm = shadow == '5' or shadow == '6' or shadow == '7' or shadow == '8'
      if algorithm then
        first = 0
      elseif first ~= '' then
        first = tonumber(first)
      end
      if quota == nil or quota < 0 or quota > kMaxUsed or quota % 1 ~= 0 or first == nil then
        bad = 'bad limit at ARGV ' .. a; break
      end
      if algorithm then
        -- Sliding or gcra: decided by reading, then (while everything fits) charged at once, as
        -- a counter is; take_back restores what it replaced.
        if ARGV[h] ~= string.format('%d', cost) then bad = 'bad cost'; break end
        if algo_read == nil then algo_helpers() end
        if algo == nil then algo = {} end
        local st = nil
        if (shadow == '5' or shadow == '6') and fits and cost > 0 and not ro then
          st = algo_sliding_fast(shadow, KEYS[k], subject, ARGV[h], cost, ARGV[a + 2], quota, extra)
        end
        if st ~= nil then
          algo[r] = st
          if st.denied then
            fits = false
            reply[r] = st.reply
          else
            reply[r] = st.charged
            if st.first and st.estimate >= st.first then more = true end
          end
        else
          st = algo_read(shadow, KEYS[k], subject, ARGV[a + 2])
          if st == nil then bad = 'bad limit at ARGV ' .. a; break end
          algo[r] = st
          reply[r] = st.reply
          if (shadow == '5' or shadow == '7') and not algo_fits(st, quota, cost + extra) then
            fits = false
          elseif fits and cost > 0 and st.usable and not ro then
            local at = tonumber(string.match(ARGV[a + 3], '^(%d+) '))
            if at == nil then bad = 'bad limit at ARGV ' .. a; break end
            local refused = algo_write(st, subject, cost, at)
            if refused and done == 0 and undo_log == nil then
              ro = refused  -- nothing written yet: decided by reading (below)
            elseif refused then
              failed = refused
              bad = 'refused'; break
            else
              reply[r] = st.charged
              if st.first and st.estimate >= st.first then more = true end
            end
          end
        end
      elseif shadow == '3' or shadow == '4' then
        -- A concurrent limit: no counter; a slot is free iff held + 1 <= quota.
        if ARGV[h] ~= string.format('%d', cost) then bad = 'bad cost'; break end
        reply[r] = 0
        if shadow == '3' and slot and (held and held[r] or 0) + 1 > quota then fits = false end
      elseif shadow == '1' then
        more = true
        -- The hot path leaves the cost's form to HINCRBY; the paths without it check it here.
        if ARGV[h] ~= string.format('%d', cost) then bad = 'bad cost'; break end
      elseif shadow ~= '0' and shadow ~= '2' then
        bad = 'bad limit at ARGV ' .. a; break
      elseif fits then
        local key = KEYS[k]
        if cost == 0 or ro or cost + extra > quota then
          -- A peek, a read-only decision, or a cost that cannot fit (no write for that denial).
          if ARGV[h] ~= string.format('%d', cost) then bad = 'bad cost'; break end
          if read_fit == nil then helpers() end
          local used = read_fit(key, subject, cost + extra, quota)
          if used == nil then fits = false else reply[r] = used end
        else
          -- HINCRBY refuses a field that is no integer, and one that would overflow. The cost
          -- goes as its text: a Lua number would be formatted on every call. Redis reads only a
          -- canonical decimal integer, so a cost text that tonumber took but is not one (1.0,
          -- 0x1, 1e0, 01) is refused below as a bad cost.
          local after = redis.pcall('HINCRBY', key, subject, ARGV[h])
          if type(after) ~= 'number' then
            -- A field that is no integer, one that would overflow, or a key of another type is
            -- an unusable counter; any other refusal (OOM, READONLY, ...) fails the call, as a
            -- write would have before anything else was written.
            local e = type(after) == 'table' and after.err or ''
            if find(e, 'not an integer', 1, true) and string.format('%d', cost) ~= ARGV[h] then
              bad = 'bad cost'
            elseif find(e, 'not an integer', 1, true) or find(e, 'overflow', 1, true) or
                find(e, 'WRONGTYPE', 1, true) then
              fits = false
            elseif done == 0 and undo_log == nil then
              ro = after
              if read_fit == nil then helpers() end
              local used = read_fit(key, subject, cost + extra, quota)
              if used == nil then fits = false else reply[r] = used end
            else
              failed = after
              bad = 'refused'
            end
          else
            if after == cost or shadow == '2' then
              if expire_new == nil then helpers() end
              local ok = expire_new(key, ARGV[a + 3], shadow == '2')
              if not ok then
                bad = 'bad limit at ARGV ' .. a
              elseif ok ~= true then
                failed = ok
                bad = 'refused'
              end
            end
            if bad or after < cost or after > kMaxUsed + cost or after + extra > quota then
              if undo == nil then helpers() end
              undo(key, subject, cost, after)
              fits = false
            else
              reply[r] = after
              done = done + 1
              if first ~= '' and after >= first then more = true end
            end
          end
        end
      end
      if bad then break end
      k, r = k + 1, r + 1
    end
    if bad then break end
    k = k + 1  -- the hold hash
    h = h + 5 + 4 * n
  end
  if not bad and (h ~= nargs + 1 or k ~= nkeys) then
    bad = 'ARGV does not match N and the keys'
  end
  last = r
end

-- Read-only and everything would fit: Redis's refusal is the answer.
if ro and fits and not bad then return ro end

-- The common case ends here: admitted, no shadow limit, no threshold reached.
if fits and not more and not bad then
  delete_moved()
  reply[last], reply[last + 1], reply[last + 2] = 0, 0, nil
  if held then
    for q = 2, last - 1 do reply[last + q] = held[q] or 0 end
  end
  return reply
end

-- Calls f(h, a, k, r, cost, subject) for every limit of every part, in order: h the part's
-- first ARGV, a the limit's, k its key, r its reply slot; stops early when f returns true.
local function each_limit(f)
  local h, k, r = 3, 1, 2
  while h <= nargs do
    local cost, n, subject = tonumber(ARGV[h]), tonumber(ARGV[h + 1]), ARGV[h + 2]
    for a = h + 5, h + 4 + 4 * n, 4 do
      if f(h, a, k, r, cost, subject) then return end
      k, r = k + 1, r + 1
    end
    k = k + 1  -- the hold hash
    h = h + 5 + 4 * n
  end
end

-- Takes back the increments that stand: the first `done` enforced limits of paying parts. It
-- stops at the last of them, so it never reads past a malformed part.
local function take_back()
  -- The algorithm writes first, newest first.
  for i = undo_log and #undo_log or 0, 1, -1 do
    local e = undo_log[i]
    if e[3] == nil then
      redis.pcall('HDEL', e[1], e[2])
    else
      redis.pcall('HSET', e[1], e[2], string.format('%d', e[3]))
    end
  end
  undo_log = nil
  moved = nil
  if algo then
    for r, st in pairs(algo) do reply[r] = st.reply end
  end
  if done == 0 then return end
  if undo == nil then helpers() end
  each_limit(function(h, a, k, r, cost, subject)
    -- Incremented on the first pass: every limit but a shadow one (1) and a concurrent one (3,
    -- 4), which has no counter.
    local kind = ARGV[a + 1]
    if cost > 0 and (kind == '0' or kind == '2') then
      undo(KEYS[k], subject, cost, reply[r])
      done = done - 1
    end
    return done == 0
  end)
end

if bad then
  take_back()
  if failed ~= nil then return failed end  -- Redis's own error reply, e.g. OOM
  return redis.error_reply('ERR sluice decide: ' .. bad)
end

local outbox = KEYS[nkeys]
local fired, refused = 0, 0
local room = nil    -- free places in the outbox, read once on first need
local event = nil   -- ARGV[2]'s words, on first need

-- The words of a limit's static part: expire_at, window_start, window_end, name, then
-- percent/count pairs.
local function words(text)
  local w = {}
  for s in string.gmatch(text, '%S+') do w[#w + 1] = s end
  return w
end

-- Whether `flag` fired before an upgrade, in the earlier flag hash of this subject and limit
-- (derived from the counter key: <prefix>:{<bucket>}:h:<limit>:<window>:<window_id>:<slot> ->
-- ...:a:...:<window_id>:<subject>): true, false, or nil when it cannot be read (e.g. a Cluster
-- slot in migration; the threshold stays armed). A key of another type reads as fired.
local function fired_before(key, subject, flag)
  local tag, middle = string.match(key, '^(.-}):h:(.*:)[^:]*$')
  if tag == nil then return false end
  local set = redis.pcall('HEXISTS', tag .. ':a:' .. middle .. subject, flag)
  if set == 0 then return false end
  if set == 1 then return true end
  local e = type(set) == 'table' and set.err or ''
  if find(e, 'WRONGTYPE', 1, true) then return true end
  return nil
end

-- Writes the event of threshold `percent` of the limit at ARGV[a] of the part at ARGV[h] at
-- counter value `used` to the outbox: true if written. A full outbox (or a refused XADD) leaves
-- the threshold armed, as the memory store does.
local function record(h, a, w, percent, used, quota)
  if event == nil then event = words(ARGV[2]) end
  if room == nil then
    local len = redis.pcall('XLEN', outbox)
    local max = tonumber(event[2])
    room = (type(len) == 'number' and max ~= nil) and max - len or 0
  end
  if room <= 0 then return false end
  local added = redis.pcall('XADD', outbox, '*',
    'type', 'quota.threshold_reached', 'subject', ARGV[h + 2], 'plan', ARGV[h + 3],
    'limit', w[4] or '',
    -- %d, not tostring: Lua prints doubles from 1e14 on with an exponent and 14 digits.
    'threshold', percent, 'used', string.format('%d', used), 'quota', quota,
    'window_start', w[2] or '0', 'window_end', w[3] or '0', 'occurred_at_ms', event[1] or '0')
  if type(added) == 'table' and added.err then return false end  -- e.g. OOM: stays armed
  room = room - 1
  return true
end

-- Fires the thresholds of the limit at ARGV[a] of the part at ARGV[h] (counter hash `key`,
-- static words `w`) that counter value `used` reached (`denied`: only its 100%), unless already
-- flagged: event first, then the flag. The flags are read once, on first need.
fire = function(h, a, key, w, used, denied)
  local subject = ARGV[h + 2]
  local field = '#' .. subject
  local quota = string.format('%d', tonumber(ARGV[a]))
  local flags = nil  -- ' <flag> <flag> ... ', or false when they cannot be read
  for j = 5, #w - 1, 2 do
    local percent, count = w[j], tonumber(w[j + 1])
    local reached
    if denied then reached = percent == '100' else reached = count ~= nil and used >= count end
    if reached then
      if flags == nil then
        local v = redis.pcall('HGET', key, field)
        if v == false or v == nil then
          flags = ' '
        elseif type(v) == 'string' then
          flags = ' ' .. v .. ' '
        else
          flags = false  -- e.g. a Cluster slot in migration
        end
      end
      local flag = percent .. ':' .. quota  -- this percent of this quota
      if flags == false then
        refused = refused + 1
      elseif not find(flags, ' ' .. flag .. ' ', 1, true) then
        local before = fired_before(key, subject, flag)
        if before == nil or (before == false and not record(h, a, w, percent, used, quota)) then
          refused = refused + 1
        elseif before == true then
          -- Copied beside the counter, so that it is read there from now on (and moves with the
          -- counter on a Cluster). If Redis refuses the write, it is read from the earlier hash
          -- again next time.
          local copied = redis.pcall('HSET', key, field, sub(flags .. flag .. ' ', 2, -2))
          if type(copied) == 'number' then
            flags = flags .. flag .. ' '
            if tonumber(w[1]) then redis.pcall('EXPIREAT', key, w[1], 'NX') end
          end
        else
          flags = flags .. flag .. ' '
          redis.call('HSET', key, field, sub(flags, 2, -2))
          -- The flag may have created the hash (a denial of a counter never written).
          if tonumber(w[1]) then redis.call('EXPIREAT', key, w[1], 'NX') end
          fired = fired + 1
        end
      end
    end
  end
end

if read_counter == nil then helpers() end

if fits then
  -- Admitted: shadow counters grow too (capped at kMaxUsed), and every threshold reached fires.
  -- The shadow counters first, so that a refused expiry takes everything back before any event.
  local grown, expire_error = {}, nil
  each_limit(function(h, a, k, r, cost, subject)
    local key = KEYS[k]
    if algo and algo[r] then
      return  -- charged on the first pass
    elseif ARGV[a + 1] == '1' then
      local used = read_counter(key, subject)
      if used >= 0 and cost > 0 then
        if used + cost > kMaxUsed then
          -- A shadow counter past its quota stops at kMaxUsed (so it stays a valid counter).
          -- It holds more than the cost, so the field exists and its hash has its expiry.
          if used < kMaxUsed then
            redis.call('HSET', key, subject, string.format('%d', kMaxUsed))
            grown[#grown + 1] = { key, subject, kMaxUsed - used, kMaxUsed }
          end
          used = kMaxUsed
        else
          used = redis.call('HINCRBY', key, subject, cost)
          grown[#grown + 1] = { key, subject, cost, used }
          local credit = string.match(ARGV[a + 3], '^%d+ 0 ') ~= nil
          if used == cost or credit then
            local ok = expire_new(key, ARGV[a + 3], credit)
            if ok ~= true then
              expire_error = ok or redis.error_reply('ERR sluice decide: bad limit at ARGV ' .. a)
              return true
            end
          end
        end
      end
      reply[r] = used
    end
  end)
  if expire_error then
    if undo == nil then helpers() end
    for i = #grown, 1, -1 do
      local g = grown[i]
      undo(g[1], g[2], g[3], g[4])
    end
    take_back()
    return expire_error
  end
  each_limit(function(h, a, k, r, cost, subject)
    local key = KEYS[k]
    local used, first = reply[r], ARGV[a + 2]
    local st = algo and algo[r]
    if st ~= nil then
      -- A sliding limit's thresholds are its estimate's, flagged in the window it counts in.
      if cost > 0 and st.estimate and st.first and st.estimate >= st.first then
        fire(h, a, st.write_key, words(ARGV[a + 3]), st.estimate, false)
      end
    -- Thresholds: none can be reached below the first count.
    elseif cost > 0 and used >= 0 and first ~= '' and used >= tonumber(first) then
      fire(h, a, key, words(ARGV[a + 3]), used, false)
    end
  end)
else
  -- Denied: take back the increments that stood, then read every counter as it is and fire the
  -- 100% threshold of each limit that itself denies (or, shadow, would have denied).
  reply[1] = 0
  take_back()
  each_limit(function(h, a, k, r, cost, subject)
    local key = KEYS[k]
    if ARGV[a + 1] == '3' or ARGV[a + 1] == '4' then  -- no counter
      reply[r] = 0
      return
    end
    local st = algo and algo[r]
    if st ~= nil then
      -- As read; a sliding limit that denied (or, shadow, would have) fires its 100%.
      if cost > 0 and st.usable and st.first and
          st.cur + st.share + cost + (held and held[r] or 0) > tonumber(ARGV[a]) then
        fire(h, a, st.write_key, words(ARGV[a + 3]), st.cur + st.share, true)
      end
      return
    end
    local used = read_counter(key, subject)
    reply[r] = used
    -- An unusable counter (-1) denies (unless shadow), but fires nothing: its value means
    -- nothing. Holds count as used.
    local extra = held and held[r] or 0
    if cost > 0 and used >= 0 and used + cost + extra > tonumber(ARGV[a]) and
        ARGV[a + 2] ~= '' then
      fire(h, a, key, words(ARGV[a + 3]), used, true)
    end
  end)
end

if fits then delete_moved() end
reply[last], reply[last + 1], reply[last + 2] = fired, refused, nil
if held then
  for q = 2, last - 1 do reply[last + q] = held[q] or 0 end
end
return reply
