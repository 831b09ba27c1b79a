#!/usr/bin/env ruby
# frozen_string_literal: true

# Health probes under saturation: app threads oversubscribed --oversubscribe times by slow
# requests (wrk on bench/apps/probe.ru's /slow), and meanwhile, at --hz for --seconds, two
# probes, each on a new connection with a 1 s timeout (a Kubernetes probe's):
#
#   health   Margay: GET /readyz on its health listener (answered by the engine);
#            Puma 8: GET /stats on its control app (the nearest it has)
#   app      GET /health through the app, as people do today (must fail: the load is real)
#
# Reports per server and mode each probe's failures, p50, p99 and max. Single process and a
# 2-worker cluster (--modes single,cluster), --threads per process.
#
#   bundle exec ruby bench/probes.rb [--seconds 60] [--hz 10] [--threads 4] [--oversubscribe 25]
#                                    [--modes single,cluster] [--servers margay,puma] [--results-dir DIR]
#
# Writes DIR/probes-<time>.json and .md (DIR: bench/results/probes-<UTC date>).
require "json"
require "optparse"
require "socket"
require "time"
require "tmpdir"
require_relative "lib/procs"
require_relative "lib/servers"
require_relative "lib/stats"
require_relative "lib/result_files"
require_relative "lib/wrk"

module MargayBench
  class ProbesBench
    APP = "bench/apps/probe.ru"
    TOKEN = "probe"
    TIMEOUT = 1.0

    def initialize(argv)
      @o = { seconds: 60, hz: 10, threads: 4, oversubscribe: 25, modes: %w[single cluster], servers: %w[margay puma],
             results_dir: File.join(ROOT, "bench/results", "probes-#{Time.now.utc.strftime('%Y%m%d')}") }
      OptionParser.new do |p|
        %i[seconds hz threads oversubscribe].each { |k| p.on("--#{k} N", Integer) { |v| @o[k] = v } }
        %i[modes servers].each { |k| p.on("--#{k} LIST", Array) { |v| @o[k] = v } }
        p.on("--results-dir DIR") { |v| @o[:results_dir] = File.expand_path(v) }
      end.parse!(argv)
    end

    def run
      abort "bench/probes.rb: needs wrk" unless Env.which("wrk")
      @rows = []
      Dir.mktmpdir("margay-probes-") do |tmp|
        @o[:modes].each do |mode|
          @o[:servers].each do |server|
            row = measure(server, mode, tmp)
            @rows << row
            warn format("[probes] %-6s %-7s health: %d/%d failed, p99 %.1f ms | app: %d/%d failed, p99 %.0f ms",
                        server, mode, row["health"]["failed"], row["health"]["probes"], row["health"]["p99_ms"],
                        row["app"]["failed"], row["app"]["probes"], row["app"]["p99_ms"])
          end
        end
      end
      write
      0
    end

    private

    def measure(server, mode, tmp)
      workers = mode == "cluster" ? 2 : 0
      port = Env.free_port
      side = Env.free_port
      argv, env = command(server, port, side, workers)
      log = File.join(tmp, "#{server}-#{mode}.log")
      pid = Procs.spawn_server(env, argv, log, chdir: ROOT)
      begin
        Procs.await_server("bench/probes.rb: server on #{port}", log) { probe(port, "/")[0] }
        health_path = server == "margay" ? "/readyz" : "/stats?token=#{TOKEN}"
        conns = @o[:threads] * [workers, 1].max * @o[:oversubscribe]
        load = Wrk.argv(threads: 2, connections: conns, seconds: @o[:seconds] + 5, timeout: 30,
                        url: "http://127.0.0.1:#{port}/slow")
        loader = Thread.new { Wrk.run(load, out_path: File.join(tmp, "wrk-#{server}-#{mode}.out"), bound: @o[:seconds] + 60).first }
        sleep 2 # every thread taken, the queue built
        health = Thread.new { probe_loop(side, health_path) }
        app = Thread.new { probe_loop(port, "/health") }
        row = { "server" => server, "mode" => mode, "workers" => workers, "threads" => @o[:threads],
                "slow_connections" => conns, "health_path" => health_path,
                "health" => summary(health.value), "app" => summary(app.value) }
        data = loader.value
        row.merge("slow_requests" => data["requests"], "command" => argv.join(" "), "load" => load.join(" "))
      ensure
        Procs.stop_group(pid)
      end
    end

    def command(server, port, side, workers)
      app = File.expand_path(APP, ROOT)
      threads = "#{@o[:threads]}:#{@o[:threads]}"
      if server == "margay"
        [Servers.margay(port, app, workers: workers, threads: threads, extra: %W[--health-bind tcp://127.0.0.1:#{side}]),
         Env.clean]
      else
        [Servers.puma(port, app, workers: workers, threads: threads,
                                 extra: %W[--control-url tcp://127.0.0.1:#{side} --control-token #{TOKEN}]),
         Env.clean.merge("BUNDLE_GEMFILE" => File.join(BENCH, "Gemfile"))]
      end
    end

    # One probe every 1/hz s for --seconds, each on its own thread (a probe that waits does not
    # hold up the next, as with a prober): [[ok, seconds]...].
    def probe_loop(port, path)
      t0 = Procs.now
      Array.new(@o[:seconds] * @o[:hz]) do |i|
        wait = t0 + (i.to_f / @o[:hz]) - Procs.now
        sleep wait if wait.positive?
        Thread.new { probe(port, path) }
      end.map(&:value)
    end

    # GET +path+ on a new connection within TIMEOUT: [200 answered in time, seconds].
    def probe(port, path)
      t0 = Procs.now
      Socket.tcp("127.0.0.1", port, connect_timeout: TIMEOUT) do |s|
        s.write("GET #{path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
        head = +""
        until head.include?("\r\n")
          left = TIMEOUT - (Procs.now - t0)
          return [false, Procs.now - t0] if left <= 0 || !s.wait_readable(left)

          chunk = s.read_nonblock(4096, exception: false)
          break if chunk.nil?

          head << chunk unless chunk == :wait_readable
        end
        [head.start_with?("HTTP/1.1 200", "HTTP/1.0 200") && Procs.now - t0 <= TIMEOUT, Procs.now - t0]
      end
    rescue SystemCallError, IOError
      [false, Procs.now - t0]
    end

    def summary(results)
      ms = results.map { |_, s| s * 1000 }.sort
      { "probes" => results.size, "failed" => results.count { |ok, _| !ok }, "p50_ms" => Stats.percentile(ms, 50),
        "p99_ms" => Stats.percentile(ms, 99), "max_ms" => ms.max }
    end

    def write
      ResultFiles.write("probes", @o, @rows, markdown)
    end

    def markdown
      lines = ["Probes at #{@o[:hz]} Hz for #{@o[:seconds]} s, 1 s timeout, while /slow requests oversubscribe the " \
               "app threads #{@o[:oversubscribe]}x (#{@o[:threads]} threads per process)", "",
               "| server | mode | health probe | failed | p50 ms | p99 ms | max ms | app /health failed | app p99 ms |",
               "|---|---|---|---:|---:|---:|---:|---:|---:|"]
      @rows.each do |r|
        h = r["health"]
        a = r["app"]
        lines << format("| %s | %s | `%s` | %d/%d | %.1f | %.1f | %.1f | %d/%d | %.0f |", r["server"], r["mode"],
                        r["health_path"], h["failed"], h["probes"], h["p50_ms"], h["p99_ms"], h["max_ms"],
                        a["failed"], a["probes"], a["p99_ms"])
      end
      "#{lines.join("\n")}\n"
    end
  end
end

exit MargayBench::ProbesBench.new(ARGV).run if $PROGRAM_NAME == __FILE__
