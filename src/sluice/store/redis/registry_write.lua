-- registry_write.lua — one admin write to the registry (RedisRegistry::Apply,
-- store/redis/redis_registry.h), all of it or none of it: every precondition is checked before the
-- first write, and no call after it can fail on keys of the right type, so Redis (which does not
-- roll back a script) never keeps half a change. Then the version is incremented and the change is
-- appended to the log that other instances follow.
--
-- Every key is <base>:<part> with base = "<prefix>:{registry}": one hash tag, so one slot, and the
-- keys this script derives from ARGV (records, sets, digests) live in the slot of KEYS[1..3].
--
-- KEYS[1]  <base>:version  (string) the number of the last change
-- KEYS[2]  <base>:epoch    (string) set once, NX, to ARGV[2]: it changes only if the registry was
--                          wiped (FLUSHALL, a Redis restarted empty), which followers must notice
-- KEYS[3]  <base>:log      (stream) one entry per change, id "<version>-0", fields kind, subject,
--                          keys (comma-separated key ids; "" for none)
-- ARGV[1]  base
-- ARGV[2]  epoch candidate (random hex, used only if KEYS[2] is absent)
-- ARGV[3]  log bound (XADD MAXLEN ~)
-- ARGV[4]  kind: put_subject | delete_subject | add_key | revoke_key | grant_credits
-- put_subject     ARGV[5] subject id, ARGV[6] the subject record (JSON, without "credits": the
--                 record keeps the credits it has)
-- delete_subject  ARGV[5] subject id
-- add_key         ARGV[5] key id (16 hex digits), ARGV[6] subject id, ARGV[7] digest (64 hex),
--                 ARGV[8] max keys per subject, ARGV[9] idempotency key ("" none),
--                 ARGV[10] fingerprint, ARGV[11] idempotency TTL (s),
--                 ARGV[12] the key record (JSON; its "subject" and "digest" are ARGV[6], ARGV[7])
-- revoke_key      ARGV[5] key id
-- grant_credits   ARGV[5] subject id, ARGV[6] idempotency key (required), ARGV[7] fingerprint,
--                 ARGV[8] amount (>= 1), ARGV[9] the largest total, ARGV[10] the most grants,
--                 ARGV[11] the grant's record (JSON: at, amount, reason, actor; this script
--                 appends seq and balance)
--
-- Credits: <base>:credits:<id> (hash) holds a subject's ledger: "n" the number of grants, "total"
-- the granted total, "e:<seq>" each grant's record, "k:<idempotency key>" its seq and
-- "f:<idempotency key>" its fingerprint (kept as long as the subject). The total also travels
-- in the subject record as its last member, ',"credits":<total>}', so that followers get it
-- with the record; put_subject carries it over to the new record.
--
-- Reply (integers and strings only): {code, version, flag, key_id}
--   code 0 done; 1 not found; 2 already exists (digest or key id); 3 the subject has max keys;
--   4 idempotency key reused with another fingerprint; 5 the total would pass the largest one;
--   6 the subject has the most grants. version: the change's version (0 unless code 0 and
--   something was written). flag: put_subject 1 = created; add_key and grant_credits 1 =
--   replayed (no write: key_id is the key made the first time, the grant is the first one).
--   key_id: add_key's key id; grant_credits: the grant's record with seq and balance; else "".

local base = ARGV[1]
local kind = ARGV[4]

local function k(part) return base .. ':' .. part end

-- The next version: past both the counter and the log's last id, so that XADD can never fail
-- (a version key deleted or overwritten by hand would otherwise make XADD refuse a smaller id).
local function commit(subject, keys)
  local v = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
  local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)[1]
  if last then
    local lv = tonumber(string.match(last[1], '^(%d+)')) or 0
    if lv > v then v = lv end
  end
  v = string.format('%d', v + 1)
  redis.call('SET', KEYS[1], v)
  redis.call('SET', KEYS[2], ARGV[2], 'NX')
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], v .. '-0', 'kind', kind, 'subject', subject,
             'keys', keys)
  return tonumber(v)
end

-- The digest of a stored key record ("" if it has none).
local function digest_of(record)
  local ok, decoded = pcall(cjson.decode, record)
  if ok and type(decoded) == 'table' and type(decoded.digest) == 'string' then
    return decoded.digest
  end
  return ''
end

-- The credits a subject record ends with (written only by this script), or nil.
local function credits_of(record)
  return record and string.match(record, ',"credits":(%d+)}$')
end

-- `record` (a JSON object as the caller writes it, without credits) ending with `credits`.
local function with_credits(record, credits)
  if not credits or credits == '0' then return record end
  return string.sub(record, 1, -2) .. ',"credits":' .. credits .. '}'
end

if kind == 'put_subject' then
  local id = ARGV[5]
  local rec = k('subject:' .. id)
  local old = redis.call('GET', rec)
  local created = old and 0 or 1
  redis.call('SET', rec, with_credits(ARGV[6], credits_of(old)))
  redis.call('ZADD', k('subjects'), 0, id)
  return {0, commit(id, ''), created, ''}

elseif kind == 'delete_subject' then
  local id = ARGV[5]
  local rec = k('subject:' .. id)
  if redis.call('EXISTS', rec) == 0 then return {1, 0, 0, ''} end
  local set = k('keys:' .. id)
  local ids = redis.call('SMEMBERS', set)
  table.sort(ids)
  local digests = {}  -- read every record before the first write
  for i, kid in ipairs(ids) do digests[i] = digest_of(redis.call('GET', k('key:' .. kid)) or '') end
  for i, kid in ipairs(ids) do
    redis.call('DEL', k('key:' .. kid), k('digest:' .. digests[i]))
    redis.call('ZREM', k('keys'), kid)
  end
  redis.call('DEL', rec, set, k('credits:' .. id))
  redis.call('ZREM', k('subjects'), id)
  return {0, commit(id, table.concat(ids, ',')), 0, ''}

elseif kind == 'add_key' then
  local kid, subject, digest = ARGV[5], ARGV[6], ARGV[7]
  local idem = ARGV[9]
  local idem_key = k('idem:' .. idem)
  if idem ~= '' then
    local seen = redis.call('HMGET', idem_key, 'fingerprint', 'key')
    if seen[1] then
      if seen[1] ~= ARGV[10] then return {4, 0, 0, ''} end
      return {0, 0, 1, seen[2] or ''}
    end
  end
  if redis.call('EXISTS', k('subject:' .. subject)) == 0 then return {1, 0, 0, ''} end
  if redis.call('EXISTS', k('digest:' .. digest)) == 1 then return {2, 0, 0, ''} end
  if redis.call('EXISTS', k('key:' .. kid)) == 1 then return {2, 0, 0, ''} end
  local set = k('keys:' .. subject)
  if redis.call('SCARD', set) >= tonumber(ARGV[8]) then return {3, 0, 0, ''} end
  redis.call('SET', k('key:' .. kid), ARGV[12])
  redis.call('SET', k('digest:' .. digest), kid)
  redis.call('SADD', set, kid)
  redis.call('ZADD', k('keys'), 0, kid)
  if idem ~= '' then
    redis.call('HSET', idem_key, 'fingerprint', ARGV[10], 'key', kid)
    redis.call('EXPIRE', idem_key, ARGV[11])
  end
  return {0, commit(subject, kid), 0, kid}

elseif kind == 'revoke_key' then
  local kid = ARGV[5]
  local rec = k('key:' .. kid)
  local record = redis.call('GET', rec)
  if not record then return {1, 0, 0, ''} end
  local ok, decoded = pcall(cjson.decode, record)
  local subject = (ok and type(decoded) == 'table' and type(decoded.subject) == 'string')
                  and decoded.subject or ''
  redis.call('DEL', k('digest:' .. digest_of(record)), rec)
  redis.call('SREM', k('keys:' .. subject), kid)
  redis.call('ZREM', k('keys'), kid)
  return {0, commit(subject, kid), 0, ''}

elseif kind == 'grant_credits' then
  local id, idem, fingerprint = ARGV[5], ARGV[6], ARGV[7]
  local amount, max_total, max_grants = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
  if idem == '' or not amount or amount < 1 or not max_total or not max_grants then
    return redis.error_reply('registry_write.lua: bad grant_credits arguments')
  end
  local ledger = k('credits:' .. id)
  local seen = redis.call('HMGET', ledger, 'k:' .. idem, 'f:' .. idem)
  if seen[1] then
    if seen[2] ~= fingerprint then return {4, 0, 0, ''} end
    return {0, 0, 1, redis.call('HGET', ledger, 'e:' .. seen[1]) or ''}
  end
  local rec = k('subject:' .. id)
  local record = redis.call('GET', rec)
  if not record then return {1, 0, 0, ''} end
  local state = redis.call('HMGET', ledger, 'n', 'total')
  local n, total = tonumber(state[1] or '0') or 0, tonumber(state[2] or '0') or 0
  -- Totals stay below 2^53: exact in a Lua double.
  if amount > max_total - total then return {5, 0, 0, ''} end
  if n >= max_grants then return {6, 0, 0, ''} end
  local seq = string.format('%d', n + 1)
  local balance = string.format('%d', total + amount)
  local entry = string.sub(ARGV[11], 1, -2) .. ',"seq":' .. seq .. ',"balance":' .. balance .. '}'
  redis.call('HSET', ledger, 'n', seq, 'total', balance, 'e:' .. seq, entry, 'k:' .. idem, seq,
             'f:' .. idem, fingerprint)
  local bare = record
  if credits_of(record) then bare = string.gsub(record, ',"credits":%d+}$', '}') end
  redis.call('SET', rec, with_credits(bare, balance))
  return {0, commit(id, ''), 0, entry}
end

return redis.error_reply('registry_write.lua: unknown kind ' .. tostring(kind))
