-- Floor piece for bench/ab-decide-script: the deadline's TIME and the two counter increments,
-- what every admission of decide.lua does before any of its own logic.
local t = redis.call('TIME')
local a = redis.call('HINCRBY', KEYS[1], ARGV[5], 1)
local b = redis.call('HINCRBY', KEYS[2], ARGV[5], 1)
return { 1, a, b }
