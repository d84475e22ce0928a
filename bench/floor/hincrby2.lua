-- Floor piece for bench/ab-decide-script: decide.lua's two counter increments alone (a field of
-- the slot's counter hash per limit, as docs/redis.md lays them out), no deadline, no logic.
local a = redis.call('HINCRBY', KEYS[1], ARGV[5], 1)
local b = redis.call('HINCRBY', KEYS[2], ARGV[5], 1)
return { 1, a, b }
