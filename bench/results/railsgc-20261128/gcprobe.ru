# frozen_string_literal: true

# The Rails bench app with a GC probe around it (bench/results/railsgc-20261128/README.md).
# Per worker process (pid != the loading process's), from its first request: GC::Profiler on
# (each GC's time and flags, major_by among them), and once a second one JSON line appended to
# GC_PROBE_DIR/<pid>.jsonl: GC.stat, the GCs since the last line (time ms, major_by, gc_by),
# and the requests since then: count, and per request its app time and whether a major GC ran
# inside it (GC.stat(:major_gc_count) before and after), its queue time (margay.queue_time: from the
# kernel's arrival stamp to a thread taking it) and the GC counts at its start.
require "json"
require_relative "../../apps/rails/config/environment"

module GcProbe
  DIR = ENV.fetch("GC_PROBE_DIR", "/tmp/gcprobe")
  LOADER = Process.pid
  @pid = nil
  @reqs = []
  @lock = Mutex.new

  class << self
    def start
      return if @pid == Process.pid

      @pid = Process.pid
      Dir.mkdir(DIR) unless Dir.exist?(DIR)
      @out = File.open(File.join(DIR, "#{@pid}.jsonl"), "a")
      @out.sync = true
      GC::Profiler.enable
      GC::Profiler.clear
      Thread.new { loop { sleep 1; flush } }
      Thread.new { trace } if ENV["GC_PROBE_TRACE"]
    end

    # GC_PROBE_TRACE=1: one worker (the first to get here) traces allocations for 4 s after 4 s of
    # load, then writes ObjectSpace.dump_all (no GC first) to GC_PROBE_DIR/dump-<pid>.json: the
    # objects allocated in the window that are old ("old": true, with "file" and "line") are
    # those promoted meanwhile (dump.rb groups them).
    def trace
      File.open(File.join(DIR, "trace.lock"), File::WRONLY | File::CREAT | File::EXCL).close
      require "objspace"
      sleep 4
      ObjectSpace.trace_object_allocations_start
      sleep 4
      ObjectSpace.trace_object_allocations_stop
      File.open(File.join(DIR, "dump-#{@pid}.json"), "w") { |f| ObjectSpace.dump_all(output: f) }
    rescue Errno::EEXIST
      nil
    end

    def record(row)
      @lock.synchronize { @reqs << row }
    end

    def flush
      reqs = @lock.synchronize { r = @reqs; @reqs = []; r }
      gcs = GC::Profiler.raw_data.map do |g|
        f = g[:GC_FLAGS] || {}
        { "ms" => (g[:GC_TIME] * 1000).round(2), "major_by" => f[:major_by], "gc_by" => f[:gc_by],
          "at" => g[:GC_INVOKE_TIME].round(3) }
      end
      GC::Profiler.clear
      @out.puts(JSON.generate("t" => Process.clock_gettime(Process::CLOCK_MONOTONIC).round(3), "stat" => GC.stat,
                              "gcs" => gcs, "reqs" => reqs))
    end
  end

  class Middleware
    def initialize(app) = @app = app

    def call(env)
      GcProbe.start if Process.pid != GcProbe::LOADER
      t = Process.clock_gettime(Process::CLOCK_REALTIME)
      n = GC.count
      m = GC.stat(:major_gc_count)
      res = @app.call(env)
      t1 = Process.clock_gettime(Process::CLOCK_REALTIME)
      # [end (wall s), app ms, a major GC inside, queue ms (Margay: kernel arrival to a thread), GC.count and
      #  major count at the start]
      GcProbe.record([t1.round(4), ((t1 - t) * 1000).round(2), GC.stat(:major_gc_count) != m,
                      ((env["margay.queue_time"] || 0) * 1000).round(2), n, m])
      res
    end
  end
end

use GcProbe::Middleware
run Rails.application
