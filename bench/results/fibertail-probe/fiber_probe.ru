# frozen_string_literal: true

# bench/apps/io.ru (10 ms sleep + ~2 KB JSON) with a record per request, written to
# $PROBE_DIR/<pid>.log: arrival (app start - margay.queue_time), queue time, when the sleep
# returned, when the app ended, the pool thread, and the request fibers live on that thread
# when the request started and when its sleep returned, the GCs (count, ms, major count) during its sleep. Run with --queue-time-header (the
# arrival from X-Request-Start; else the app's start less margay.queue_time). With
# PROBE_TURNS=1 also each fiber thread's turns (turns.rb).
require "json"
require_relative "turns" if ENV["PROBE_TURNS"] == "1"

ROWS = Array.new(50) { |i| { "id" => i, "name" => "item #{i}", "price" => i * 3 } }.freeze
PROBE_DIR = ENV.fetch("PROBE_DIR", "/tmp/fibertail-probe")
RECS = []
LIVE = Hash.new(0) # thread => request fibers in the app (only that thread touches its entry)

def flush_probe
  return if RECS.empty?

  File.open(File.join(PROBE_DIR, "#{Process.pid}.log"), "a") { |f| f.write(RECS.join) }
  RECS.clear
end

at_exit { flush_probe }

run lambda { |env|
  clock = Process::CLOCK_REALTIME
  t0 = Process.clock_gettime(clock)
  q = env["margay.queue_time"] || 0.0
  th = Thread.current
  live0 = (LIVE[th] += 1)
  gc0 = GC.stat(:count)
  gct0 = GC.stat(:time)
  maj0 = GC.stat(:major_gc_count)
  sleep 0.010
  t1 = Process.clock_gettime(clock)
  gcs = GC.stat(:count) - gc0
  gct = GC.stat(:time) - gct0
  maj = GC.stat(:major_gc_count) - maj0
  live1 = LIVE[th]
  body = JSON.generate(ROWS.map { |r| r.merge("total" => r["price"] * 2) })
  t2 = Process.clock_gettime(clock)
  LIVE[th] -= 1
  hdr = env["HTTP_X_REQUEST_START"].to_s[/t=([\d.]+)/, 1]&.to_f
  arr = hdr ? hdr + 0.0005 : t0 - q # the header's ms, truncated: the middle of its ms
  RECS << format("%d %d %.6f %.6f %.6f %.6f %d %d %.6f %d %d %d\n", Process.pid, th.native_thread_id, arr, t0, t1, t2, live0,
                 live1, q, gcs, gct, maj)
  flush_probe if RECS.size >= 200
  [200, { "content-type" => "application/json", "content-length" => body.bytesize.to_s }, [body]]
}
