-- wrk reporting hook for bench/core. Defines only done(), so wrk keeps its
-- static, pre-built request (no per-request Lua). Prints one line:
--   BENCH_JSON {...}
-- with the totals and the latency percentiles in microseconds.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH_JSON {\"requests\":%d,\"duration_us\":%d,\"bytes\":%d," ..
    "\"errors\":{\"connect\":%d,\"read\":%d,\"write\":%d,\"status\":%d,\"timeout\":%d}," ..
    "\"latency_us\":{\"min\":%d,\"mean\":%.1f,\"stdev\":%.1f,\"max\":%d," ..
    "\"p50\":%d,\"p75\":%d,\"p90\":%d,\"p99\":%d,\"p99.9\":%d}}\n",
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.stdev, latency.max,
    latency:percentile(50), latency:percentile(75), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9)))
end
