-- wrk reporting hook for bench/core.rb and bench/run.rb. Defines only done() (and, when
-- BENCH_UPLOAD_BYTES is set, a static POST body set at load time), so wrk keeps its
-- pre-built request: no per-request Lua. Prints one line:
--   BENCH_JSON {...}
-- with the totals and the latency percentiles in microseconds.
local upload = tonumber(os.getenv("BENCH_UPLOAD_BYTES") or "")
if upload and upload > 0 then
  wrk.method = "POST"
  wrk.body = string.rep("x", upload)
  wrk.headers["Content-Type"] = "application/octet-stream"
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH_JSON {\"requests\":%d,\"duration_us\":%d,\"bytes\":%d," ..
    "\"errors\":{\"connect\":%d,\"read\":%d,\"write\":%d,\"status\":%d,\"timeout\":%d}," ..
    "\"latency_us\":{\"min\":%d,\"mean\":%.1f,\"stdev\":%.1f,\"max\":%d," ..
    "\"p50\":%d,\"p75\":%d,\"p90\":%d,\"p95\":%d,\"p99\":%d,\"p99.9\":%d}}\n",
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.stdev, latency.max,
    latency:percentile(50), latency:percentile(75), latency:percentile(90),
    latency:percentile(95), latency:percentile(99), latency:percentile(99.9)))
end
