-- Floor piece for bench/ab-decide-script: the article's two INCR with decide.lua's keys and
-- arguments (string counters, no expiry, no logic). What decide.lua's arguments cost Redis.
local a = redis.call('INCR', KEYS[1])
local b = redis.call('INCR', KEYS[2])
return { 1, a, b }
