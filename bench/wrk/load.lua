-- wrk script for bench/run: requests spread round-robin over N API keys (GET /v1/authorize) or N
-- subjects (POST /v1/check), optionally paced to a fixed offered rate, and a machine-readable
-- summary line (SLUICE_JSON {...}) with p50/p99/p99.9 at the end.
--
-- Environment (read by every wrk thread):
--   SLUICE_BENCH_KEYS      number of keys/subjects (default 10000)
--   SLUICE_BENCH_MODE      "authorize" (X-API-Key: bench-key-<i>), "check" (subject user-<i>),
--                          "reserve" (pairs: POST /v1/reserve for user-<i> with cost 1, then POST
--                          /v1/reservations/<id>/settle {"cost":1} once the id is back),
--                          "authreserve" (the gateway's pairs: GET /v1/authorize with X-API-Key:
--                          bench-key-<i> and Sluice-Reserve: 1, then the settle of the id its
--                          Sluice-Reservation header returned), or
--                          the admin plane's registry writes: "put_subject" (PUT
--                          /v1/subjects/w<run>-<i> {"plan": <plan>}, a new subject each time) or
--                          "add_key" (POST /v1/subjects/user-<i mod keys>/keys {}, a new key each time),
--                          or "hot" (GET /v1/authorize: SLUICE_BENCH_HOT_PERCENT of the requests
--                          with the hot subject's keys <hot key>-<j mod hot keys>, evenly
--                          interleaved with the rest, round-robin over bench-key-<i>)
--   SLUICE_BENCH_PLAN      plan name for "check" (default bench)
--   SLUICE_BENCH_RATE      offered requests/s per wrk thread; 0 or unset: as fast as possible
--   SLUICE_BENCH_TOKEN     admin token for the write modes (Authorization: Bearer)
--   SLUICE_BENCH_RUN       a tag making put_subject's ids differ from run to run (default 0)
--   SLUICE_BENCH_OFFSET    where the round-robin over keys/subjects starts (default 0), so that a
--                          run can go on where the previous one stopped
--   SLUICE_BENCH_HOT_PERCENT  "hot": the share of requests for the hot subject (default 90)
--   SLUICE_BENCH_HOT_KEY   "hot": the prefix of the hot subject's API keys (default hot-key)
--   SLUICE_BENCH_HOT_KEYS  "hot": how many API keys the hot subject has, used round-robin
--                          (default 1)
--
-- Pacing: each thread keeps one schedule (slot k is due at t0 + k / rate). After a response wrk
-- asks delay() before the connection's next request; the connection takes the next slot and waits
-- until it is due (0 when the schedule is behind: it catches up as fast as the connections allow).
-- wrk's timers have 1 ms granularity and its latency clock starts when the request is written, so
-- a request sent late because every connection was busy does not count its wait: `late` and
-- `max_lag_ms` report how far the schedule slipped (coordinated omission is visible, not hidden).
local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } sluice_timespec_t;
int clock_gettime(int clk_id, sluice_timespec_t *tp);
]]
local ts = ffi.new("sluice_timespec_t")
local function now_ms()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

local n = tonumber(os.getenv("SLUICE_BENCH_KEYS") or "10000")
local mode = os.getenv("SLUICE_BENCH_MODE") or "authorize"
local plan = os.getenv("SLUICE_BENCH_PLAN") or "bench"
local rate = tonumber(os.getenv("SLUICE_BENCH_RATE") or "0")
local counter = tonumber(os.getenv("SLUICE_BENCH_OFFSET") or "0")
late = 0
max_lag_ms = 0

if mode == "put_subject" or mode == "add_key" then
  local run = os.getenv("SLUICE_BENCH_RUN") or "0"
  wrk.headers["Authorization"] = "Bearer " .. (os.getenv("SLUICE_BENCH_TOKEN") or "")
  wrk.headers["Content-Type"] = "application/json"
  request = function()
    counter = counter + 1
    if mode == "put_subject" then
      return wrk.format("PUT", "/v1/subjects/w" .. run .. "-" .. counter, nil,
                        '{"plan":"' .. plan .. '"}')
    end
    return wrk.format("POST", "/v1/subjects/user-" .. (counter % n) .. "/keys", nil, "{}")
  end
elseif mode == "reserve" then
  -- A connection's next request settles a reservation whose id has come back, if any (ids of
  -- one thread's connections are shared: whichever connection is free settles the oldest).
  local ids, first, last = {}, 1, 0
  wrk.headers["Content-Type"] = "application/json"
  request = function()
    if first <= last then
      local id = ids[first]
      ids[first] = nil
      first = first + 1
      return wrk.format("POST", "/v1/reservations/" .. id .. "/settle", nil, '{"cost":1}')
    end
    local body = '{"subject":"user-' .. (counter % n) .. '","plan":"' .. plan .. '","cost":1}'
    counter = counter + 1
    return wrk.format("POST", "/v1/reserve", nil, body)
  end
  response = function(status, headers, body)
    if status ~= 200 or string.find(body, '"settled"', 1, true) then return end
    local id = string.match(body, '"reservation":"([^"]+)"')
    if id then
      last = last + 1
      ids[last] = id
    end
  end
elseif mode == "authreserve" then
  local ids, first, last = {}, 1, 0
  local settle_headers = { ["Content-Type"] = "application/json" }
  request = function()
    if first <= last then
      local id = ids[first]
      ids[first] = nil
      first = first + 1
      return wrk.format("POST", "/v1/reservations/" .. id .. "/settle", settle_headers,
                        '{"cost":1}')
    end
    local key = "bench-key-" .. (counter % n)
    counter = counter + 1
    return wrk.format("GET", "/v1/authorize", { ["X-API-Key"] = key, ["Sluice-Reserve"] = "1" })
  end
  response = function(status, headers, body)
    local id = status == 200 and headers["Sluice-Reservation"]
    if id then
      last = last + 1
      ids[last] = id
    end
  end
elseif mode == "check" then
  wrk.method = "POST"
  wrk.path = "/v1/check"
  wrk.headers["Content-Type"] = "application/json"
  request = function()
    local body = '{"subject":"user-' .. (counter % n) .. '","plan":"' .. plan .. '"}'
    counter = counter + 1
    return wrk.format("POST", "/v1/check", nil, body)
  end
elseif mode == "hot" then
  -- Bresenham over 100: `cold` collects the other requests' share and sends one whenever it
  -- reaches 100, so at 90 % every tenth request is a cold one.
  local hot_percent = tonumber(os.getenv("SLUICE_BENCH_HOT_PERCENT") or "90")
  local hot_key = os.getenv("SLUICE_BENCH_HOT_KEY") or "hot-key"
  local hot_keys = tonumber(os.getenv("SLUICE_BENCH_HOT_KEYS") or "1")
  local cold, hot_counter = 0, 0
  request = function()
    cold = cold + (100 - hot_percent)
    if cold >= 100 then
      cold = cold - 100
      wrk.headers["X-API-Key"] = "bench-key-" .. (counter % n)
      counter = counter + 1
    else
      wrk.headers["X-API-Key"] = hot_key .. "-" .. (hot_counter % hot_keys)
      hot_counter = hot_counter + 1
    end
    return wrk.format("GET", "/v1/authorize")
  end
else
  request = function()
    wrk.headers["X-API-Key"] = "bench-key-" .. (counter % n)
    counter = counter + 1
    return wrk.format("GET", "/v1/authorize")
  end
end

if rate > 0 then
  local interval = 1000.0 / rate
  local next_at = nil
  delay = function()
    local t = now_ms()
    if next_at == nil then next_at = t end
    next_at = next_at + interval
    local d = next_at - t
    if d < 0 then
      late = late + 1
      if -d > max_lag_ms then max_lag_ms = -d end
      return 0
    end
    return math.floor(d)
  end
end

local threads = {}
function setup(thread)
  table.insert(threads, thread)
end

function done(summary, latency, requests)
  local l, lag = 0, 0
  for _, t in ipairs(threads) do
    l = l + (t:get("late") or 0)
    lag = math.max(lag, t:get("max_lag_ms") or 0)
  end
  local e = summary.errors
  io.write(string.format(
    'SLUICE_JSON {"requests":%d,"duration_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,' ..
    '"p999_us":%d,"max_us":%d,"status_errors":%d,"socket_errors":%d,"late":%d,"max_lag_ms":%.1f}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9), latency.max, e.status,
    e.connect + e.read + e.write + e.timeout, l, lag))
end
