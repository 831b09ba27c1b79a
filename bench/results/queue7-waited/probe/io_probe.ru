# frozen_string_literal: true

# bench/apps/io.ru with a per-request record: arrival (kernel stamp), queue time, sleep and
# JSON times, threads in the app at the start, written to $PROBE_DIR/<pid>.log.
require "json"

ROWS = Array.new(50) { |i| { "id" => i, "name" => "item #{i}", "price" => i * 3 } }.freeze
PROBE_DIR = ENV.fetch("PROBE_DIR", "/tmp/q7probe")
LOCK = Mutex.new
RECS = []
INAPP = [0]

def flush_probe
  return if RECS.empty?

  File.open(File.join(PROBE_DIR, "#{Process.pid}.log"), "a") { |f| f.write(RECS.join) }
  RECS.clear
end

at_exit { LOCK.synchronize { flush_probe } }

run lambda { |env|
  t0 = Process.clock_gettime(Process::CLOCK_REALTIME)
  q = env["margay.queue_time"] || 0.0
  inapp = LOCK.synchronize { INAPP[0] += 1 }
  nthreads = Thread.list.size
  sleep 0.010
  t1 = Process.clock_gettime(Process::CLOCK_REALTIME)
  body = JSON.generate(ROWS.map { |r| r.merge("total" => r["price"] * 2) })
  t2 = Process.clock_gettime(Process::CLOCK_REALTIME)
  LOCK.synchronize do
    INAPP[0] -= 1
    arr = env["HTTP_X_REQUEST_START"].to_s[/t=([\d.]+)/, 1]&.to_f || (t0 - q)
    RECS << format("%d %.6f %.6f %.6f %.6f %.6f %d %d %.6f\n", Process.pid, arr, q, t1 - t0, t2 - t1, t2,
                   inapp, nthreads, t0 - arr - q)
    flush_probe if RECS.size >= 50
  end
  [200, { "content-type" => "application/json", "content-length" => body.bytesize.to_s }, [body]]
}
