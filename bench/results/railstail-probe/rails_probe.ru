# frozen_string_literal: true

# bench/apps/rails behind a recorder: one line per request in $PROBE_DIR/<pid>.log with the
# arrival (X-Request-Start, else start - margay.queue_time), the app's start and end, the
# thread's CPU time in the app, GC counts and GC time (cumulative, at start and end), the
# requests in the app at the start and the thread. Lines are written after the response.
require_relative "../../apps/rails/config/environment"

module RailsProbe
  DIR = ENV.fetch("PROBE_DIR", "/tmp/railsprobe")
  LOCK = Mutex.new
  RECS = []
  INAPP = [0]
  LAST_GC = [GC.count]

  def self.flush
    return if RECS.empty?

    File.open(File.join(DIR, "#{Process.pid}.log"), "a") { |f| f.write(RECS.join) }
    RECS.clear
  end

  at_exit { LOCK.synchronize { flush } }

  # The recorder around the app.
  class Recorder
    def initialize(app) = @app = app

    def call(env)
      now = Process.clock_gettime(Process::CLOCK_REALTIME)
      cpu0 = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
      g0 = GC.stat
      inapp = LOCK.synchronize { INAPP[0] += 1 }
      res = @app.call(env)
      body = +""
      res[2].each { |s| body << s }
      res[2].close if res[2].respond_to?(:close)
      t1 = Process.clock_gettime(Process::CLOCK_REALTIME)
      cpu = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - cpu0
      g1 = GC.stat
      q = env["margay.queue_time"]
      arr = env["HTTP_X_REQUEST_START"].to_s[/t=([\d.]+)/, 1]&.to_f || (q ? now - q : now)
      LOCK.synchronize do
        INAPP[0] -= 1
        RECS << format("%d %.6f %.6f %.6f %.6f %.6f %d %d %d %d %d %d %d %d\n", Process.pid, arr, q || -1.0, now, t1, cpu,
                       g0[:minor_gc_count], g0[:major_gc_count], g0[:time], g1[:minor_gc_count], g1[:major_gc_count],
                       g1[:time], inapp, Thread.current.object_id)
        if LAST_GC[0] != g1[:count]
          LAST_GC[0] = g1[:count]
          info = GC.latest_gc_info
          RECS << format("GC %.6f %s %s\n", t1, info.values_at(:major_by, :gc_by, :immediate_sweep).inspect.delete(" "),
                         g1.slice(:count, :major_gc_count, :old_objects, :old_objects_limit, :oldmalloc_increase_bytes,
                                  :oldmalloc_increase_bytes_limit, :remembered_wb_unprotected_objects,
                                  :remembered_wb_unprotected_objects_limit, :heap_live_slots, :malloc_increase_bytes_limit)
                                  .map { |k, v| "#{k}=#{v}" }.join(","))
        end
        RailsProbe.flush if RECS.size >= 200
      end
      [res[0], res[1], [body]]
    end
  end
end

use RailsProbe::Recorder
run Rails.application
