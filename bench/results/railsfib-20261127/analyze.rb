# frozen_string_literal: true

# ruby analyze.rb PROBE.tsv [T0 T1]  - figures over the window [T0, T1] (monotonic s), or the
# per-sample series without a window.
path, t0, t1 = ARGV
rows = File.readlines(path).map { |l| l.chomp.split("\t") }
head = rows.shift
rows = rows.map { |r| head.zip(r).to_h }
num = ->(r, k) { Float(r[k]) rescue nil }
if t0.nil?
  prev = nil
  rows.each do |r|
    if prev
      dt = num[r, "mono"] - num[prev, "mono"]
      dfin = num[r, "finished"] - num[prev, "finished"]
      dcpu = num[r, "cpu"] - num[prev, "cpu"]
      dgc = num[r, "time"] - num[prev, "time"]
      puts format("%.1f cpu%% %5.1f fin %4d inflight %4d gc_ms %5.0f minor %3d major %2d live %8d fibers %5s pool busy %s wait %s",
                  num[r, "mono"], 100 * dcpu / dt, dfin, num[r, "started"] - num[r, "finished"], dgc,
                  num[r, "minor_gc_count"] - num[prev, "minor_gc_count"], num[r, "major_gc_count"] - num[prev, "major_gc_count"],
                  num[r, "heap_live_slots"], r["fibers"], r["pool_busy"], r["pool_waiting"])
    end
    prev = r
  end
  exit
end
t0 = Float(t0)
t1 = Float(t1)
win = rows.select { |r| num[r, "mono"].between?(t0, t1) }
a = win.first
b = win.last
d = ->(k) { num[b, k] - num[a, k] }
secs = d["mono"]
fin = d["finished"]
inflight = win.map { |r| num[r, "started"] - num[r, "finished"] }
fibers = win.map { |r| num[r, "fibers"] }.select(&:positive?)
live = win.map { |r| num[r, "heap_live_slots"] }
out = {
  "window_s" => secs.round(2), "finished" => fin.to_i, "rps_server" => (fin / secs).round(1),
  "cpu_s" => d["cpu"].round(2), "cpu_pct" => (100 * d["cpu"] / secs).round(1),
  "cpu_us_per_req" => (d["cpu"] * 1e6 / fin).round,
  "gc_ms" => d["time"].to_i, "gc_us_per_req" => (d["time"] * 1e3 / fin).round, "gc_share_pct" => (100 * d["time"] / 1e3 / d["cpu"]).round(1),
  "minor" => d["minor_gc_count"].to_i, "major" => d["major_gc_count"].to_i,
  "gc_per_req" => (d["count"] / fin).round(4),
  "ms_per_gc" => (d["time"] / d["count"]).round(2),
  "alloc_per_req" => (d["total_allocated_objects"] / fin).round,
  "heap_live_slots_mean" => (live.sum / live.size).round, "heap_live_slots_max" => live.max.to_i,
  "old_objects_end" => num[b, "old_objects"].to_i, "old_objects_limit_end" => num[b, "old_objects_limit"].to_i,
  "remembered_shady_end" => num[b, "remembered_wb_unprotected_objects"].to_i,
  "remembered_shady_limit_end" => num[b, "remembered_wb_unprotected_objects_limit"].to_i,
  "inflight_mean" => (inflight.sum / inflight.size).round(1), "inflight_max" => inflight.max.to_i,
  "fibers_samples" => fibers.map(&:to_i),
  "pool_busy_max" => win.map { |r| num[r, "pool_busy"] }.compact.max&.to_i,
  "pool_waiting_max" => win.map { |r| num[r, "pool_waiting"] }.compact.max&.to_i,
  "pool_waiting_mean" => (w = win.map { |r| num[r, "pool_waiting"] }.compact).empty? ? nil : (w.sum / w.size).round(2),
  "pool_conns_end" => num[b, "pool_conns"]&.to_i,
  "major_by" => win.map { |r| r["major_by"] }.tally
}
require "json"
puts JSON.generate(out)
