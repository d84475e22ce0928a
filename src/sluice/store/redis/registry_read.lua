-- registry_read.lua — the changes after a version, with the current state of every record they
-- touched, read atomically (RedisRegistry's follower, store/redis/redis_registry.h). Because it is
-- one script, the records are a consistent snapshot taken at the log's last entry: a follower that
-- sets each touched record to the state returned here, in log order, ends exactly where Redis was.
--
-- KEYS[1]  <base>:version, KEYS[2] <base>:epoch, KEYS[3] <base>:log (registry_write.lua)
-- ARGV[1]  base ("<prefix>:{registry}"; record keys are derived from it, all in KEYS' slot)
-- ARGV[2]  the follower's version: entries after it are returned
-- ARGV[3]  the follower's epoch ("" if it has none yet)
-- ARGV[4]  at most this many entries
--
-- Reply (integers and strings only; arrays nest 2 deep):
--   {1, version, epoch}  the follower cannot catch up from the log: the epoch is not its own (the
--                        registry was wiped and rewritten), the version went backwards, or the
--                        log no longer reaches back to ARGV[2] (trimmed, or deleted). It must load
--                        everything again.
--   {0, version, epoch, entry…}  entries ARGV[2]+1 … in order, none if up to date; fewer than the
--                        version implies when ARGV[4] cut them short (ask again from the last).
--   entry = {entry_version, kind, subject_id, subject_record, key_id_1, key_record_1, …}
--     subject_id is "" unless kind is put_subject, delete_subject or grant_credits (whose record
--     carries the new total); subject_record is the
--     subject's record now ("" = absent). Then each key the change touched with its record now
--     ("" = absent).

local base = ARGV[1]
local after = tonumber(ARGV[2]) or 0
local version = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local epoch = redis.call('GET', KEYS[2]) or ''

-- A follower that has seen nothing (version 0) has no epoch yet and may adopt any.
if (epoch ~= ARGV[3] and not (ARGV[3] == '' and after == 0)) or version < after then
  return {1, version, epoch}
end
local out = {0, version, epoch}
if version == after then return out end

local start = after == 0 and '-' or ('(' .. ARGV[2] .. '-0')
local entries = redis.call('XRANGE', KEYS[3], start, '+', 'COUNT', tonumber(ARGV[4]))
local expected = after + 1
for _, e in ipairs(entries) do
  local v = tonumber(string.match(e[1], '^(%d+)'))
  -- Versions are consecutive: a hole means entries were trimmed (or the log was rewritten).
  if v ~= expected then return {1, version, epoch} end
  expected = v + 1
  local f = {}
  for i = 1, #e[2], 2 do f[e[2][i]] = e[2][i + 1] end
  local entry = {v, f.kind or '', '', ''}
  if f.kind == 'put_subject' or f.kind == 'delete_subject' or f.kind == 'grant_credits' then
    entry[3] = f.subject or ''
    entry[4] = redis.call('GET', base .. ':subject:' .. entry[3]) or ''
  end
  for kid in string.gmatch(f.keys or '', '[^,]+') do
    entry[#entry + 1] = kid
    entry[#entry + 1] = redis.call('GET', base .. ':key:' .. kid) or ''
  end
  out[#out + 1] = entry
end
if expected == after + 1 then return {1, version, epoch} end  -- version moved, log empty
return out
