# frozen_string_literal: true

# bench/apps/io.ru (the app of bench/queue_bars.rb's wrk-W-C rows) with a GC and stall probe
# around it (README.md here; adapted from ../railsgc-20261128/gcprobe.ru). Per worker process
# (pid != the loading master's), from its first request, into GC_PROBE_DIR/<pid>.jsonl once a
# second: GC.stat, each GC since the last line (GC::Profiler: ms, major_by, gc_by), the pool's
# threads and the engine's connections (the worker's server), the lag sampler's late wake-ups,
# and per request:
#   [end (wall s), app ms, a major GC inside, queue ms (margay.queue_time: the kernel's arrival
#    stamp of its first byte to a thread taking it), GC.count and major count at its start,
#    GC.stat(:time) ms at its start and end, the pool's threads, requests in the app at its start]
# The lag sampler: a thread that sleeps 5 ms in a loop, as the app's threads sleep 10 ms, and
# records each wake-up later than 4 ms [wall s, late ms, GCs meanwhile, GC ms meanwhile]: how long
# a thread whose sleep ended waited to run (the GVL, or no CPU for the process).
require "json"

module IoProbe
  DIR = ENV.fetch("GC_PROBE_DIR", "/tmp/iogc")
  LOADER = Process.pid
  @pid = nil
  @reqs = []
  @lags = []
  @inflight = 0
  @lock = Mutex.new

  class << self
    attr_accessor :inflight

    def start
      @lock.synchronize do
        return if @pid == Process.pid

        @pid = Process.pid
        Dir.mkdir(DIR) unless Dir.exist?(DIR)
        @out = File.open(File.join(DIR, "#{@pid}.jsonl"), "a")
        @out.sync = true
        GC::Profiler.enable
        GC::Profiler.clear
        Thread.new { loop { sleep 1; flush } }
        Thread.new { lag_loop }
      end
    end

    def now = Process.clock_gettime(Process::CLOCK_REALTIME)

    def lag_loop
      loop do
        n = GC.count
        g = GC.stat(:time)
        t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        sleep 0.005
        late = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t - 0.005) * 1000
        next if late < 4

        row = [now.round(4), late.round(2), GC.count - n, GC.stat(:time) - g]
        @lock.synchronize { @lags << row }
      end
    end

    def record(row)
      @lock.synchronize { @reqs << row }
    end

    def pool
      server = defined?(Margay::Stats) && Margay::Stats.source&.server
      server&.instance_variable_get(:@pool)
    end

    def server_figures
      server = defined?(Margay::Stats) && Margay::Stats.source&.server
      return {} unless server

      s = server.stats(backlog: false)
      { "threads" => s[:threads], "busy" => s[:busy_threads], "connections" => s[:connections], "requests" => s[:requests] }
    rescue StandardError => e
      { "error" => e.message }
    end

    def flush
      reqs, lags = @lock.synchronize do
        r = [@reqs, @lags]
        @reqs = []
        @lags = []
        r
      end
      gcs = GC::Profiler.raw_data.map do |g|
        f = g[:GC_FLAGS] || {}
        { "ms" => (g[:GC_TIME] * 1000).round(2), "major_by" => f[:major_by], "gc_by" => f[:gc_by] }
      end
      GC::Profiler.clear
      @out.puts(JSON.generate("t" => now.round(3), "stat" => GC.stat, "server" => server_figures, "gcs" => gcs,
                              "lags" => lags, "reqs" => reqs))
    end
  end

  class Middleware
    def initialize(app) = @app = app

    def call(env)
      IoProbe.start if Process.pid != IoProbe::LOADER
      t = IoProbe.now
      n = GC.count
      m = GC.stat(:major_gc_count)
      g = GC.stat(:time)
      inflight = (IoProbe.inflight += 1)
      threads = IoProbe.pool&.instance_variable_get(:@threads)&.size
      res = @app.call(env)
      IoProbe.inflight -= 1
      t1 = IoProbe.now
      IoProbe.record([t1.round(4), ((t1 - t) * 1000).round(2), GC.stat(:major_gc_count) != m,
                      ((env["margay.queue_time"] || 0) * 1000).round(2), n, m, g, GC.stat(:time), threads, inflight])
      res
    end
  end
end

use IoProbe::Middleware
run Rack::Builder.parse_file(File.expand_path("../../apps/io.ru", __dir__))
