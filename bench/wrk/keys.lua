-- Spreads requests over N API keys (bench-key-0 .. bench-key-(N-1)), round-robin per connection.
local n = tonumber(os.getenv("SLUICE_BENCH_KEYS") or "10000")
local counter = 0
request = function()
  counter = counter + 1
  wrk.headers["X-API-Key"] = "bench-key-" .. (counter % n)
  return wrk.format("GET", "/v1/authorize")
end
