#!/usr/bin/env ruby
# frozen_string_literal: true

# One queue across cluster workers: Margay and Puma 8 with the same workers and threads on the
# same app, alternated round by round, each round one load per server:
#
#   ab     a new connection per request (`ab -n N -c C`, no keep-alive: the seeds' method)
#   wrk    closed loop over keep-alive connections (`wrk -t2 -cC -dSs --latency`)
#
# While the load runs, every 100 ms `ss` reads how the clients are spread, the same way for
# every server: per worker process its accepted connections, and the listener's backlog (the
# clients no worker accepted yet). Reports per round req/s, p50, p99, p99/p50, the workers'
# connections (median of each sample's fewest and most) and the backlog's median, and
# Margay/Puma ratios. --baseline DIR adds another Margay checkout (margay-base). The load starts
# once every worker of the server runs.
#
#   bundle exec ruby bench/queue.rb [--load ab|wrk] [--rounds 5] [--workers 2] [--threads 5] [--min-threads 0]
#                                   [--connections 50] [--requests 3000] [--seconds 6]
#                                   [--app bench/apps/io.ru | --rails] [--fibers] [--baseline DIR]
#                                   [--results-dir DIR]
#
# --fibers: the Margay trees in fiber mode (a fiber per request; Puma keeps its threads).
# --rails: the Rails bench app (bench/apps/rails, GET /: a page from SQLite), every server with the
# bench bundle in production, the database made in the run's temp dir before the first server.
#
# Writes DIR/queue-<load>-<time>.json and .md (DIR: bench/results/queue-<UTC date>).
require "json"
require "optparse"
require "socket"
require "time"
require "tmpdir"
require_relative "lib/procs"
require_relative "lib/servers"
require_relative "lib/stats"
require_relative "lib/machine"
require_relative "lib/result_files"
require_relative "lib/wrk"
require_relative "lib/harness" # Prereqs.seed_rails

module MargayBench
  class QueueBench
    SAMPLE_EVERY = 0.1
    RAILS_APP = "bench/apps/rails/config.ru"

    def initialize(argv)
      @o = { load: "ab", rounds: 5, workers: 2, threads: 5, min_threads: 0, connections: 50, requests: 3000, seconds: 6,
             app: "bench/apps/io.ru", baseline: nil,
             results_dir: File.join(ROOT, "bench/results", "queue-#{Time.now.utc.strftime('%Y%m%d')}") }
      OptionParser.new do |p|
        p.on("--load NAME", %w[ab wrk]) { |v| @o[:load] = v }
        %i[rounds workers threads min_threads connections requests seconds].each do |k|
          p.on("--#{k.to_s.tr('_', '-')} N", Integer) { |v| @o[k] = v }
        end
        p.on("--app PATH") { |v| @o[:app] = v }
        p.on("--rails") { @o[:app] = RAILS_APP }
        p.on("--fibers") { @o[:fibers] = true }
        p.on("--baseline DIR") { |v| @o[:baseline] = File.expand_path(v) }
        p.on("--results-dir DIR") { |v| @o[:results_dir] = File.expand_path(v) }
      end.parse!(argv)
      @servers = ["margay", ("margay-base" if @o[:baseline]), "puma"].compact
    end

    def run
      missing = [@o[:load], "ss"].reject { |cmd| Env.which(cmd) }
      abort "bench/queue.rb: missing #{missing.join(', ')}" unless missing.empty?
      @rows = []
      Dir.mktmpdir("margay-queue-") do |tmp|
        @env = server_env(tmp)
        Prereqs.seed_rails(@env["puma"], "SQLite") if rails?
        @o[:rounds].times do |round|
          @servers.each do |name|
            row = measure(name, tmp).merge("round" => round + 1, "server" => name)
            @rows << row
            warn format("[queue] round %d %-12s %7.1f req/s p50 %6.1f p99 %6.1f ms backlog %s conns %s",
                        round + 1, name, row["rps"], row["p50_ms"], row["p99_ms"], row["backlog_median"],
                        row["conns_median"].inspect)
          end
        end
      end
      write
      0
    end

    private

    def measure(name, tmp)
      port = Env.free_port
      argv, chdir, env = command(name, port)
      log = File.join(tmp, "#{name}-#{port}.log")
      pid = Procs.spawn_server(env, argv, log, chdir: chdir)
      begin
        Procs.await_server("bench/queue.rb: server on #{port}", log) { Env.ok?("127.0.0.1", port) }
        await_workers(pid, log)
        sampler = Thread.new { sample(port) }
        result = @o[:load] == "ab" ? ab(port) : wrk(port, tmp)
        sampler.kill.join
        result.merge(spread(@samples))
      ensure
        Procs.stop_group(pid)
      end
    end

    # The load starts once every worker runs: a cluster answers as soon as its first worker
    # does, and keep-alive clients that all connect to it meanwhile stay there.
    def await_workers(pid, log)
      Procs.await_server("bench/queue.rb: #{@o[:workers]} workers of #{pid}", log) do
        workers(pid) >= @o[:workers]
      end
    end

    # The processes of +pid+'s process group besides itself (Procs.spawn_server makes the
    # group), read from /proc/PID/stat (after the command: state, ppid, pgrp).
    def workers(pid)
      Dir.glob("/proc/[0-9]*/stat").count do |path|
        fields = File.read(path).split(") ", 2).last.split
        fields[2].to_i == pid && File.basename(File.dirname(path)).to_i != pid
      rescue SystemCallError
        false
      end
    end

    def command(name, port)
      threads = "#{@o[:min_threads]}:#{@o[:threads]}" # 0: as both servers default, the pool grows from one thread
      app = File.expand_path(@o[:app], ROOT)
      case name
      when "margay", "margay-base"
        [Servers.margay(port, app, workers: @o[:workers], threads: margay_threads(threads), extra: margay_extra),
         name == "margay" ? ROOT : @o[:baseline], @env[name]]
      else [Servers.puma(port, app, workers: @o[:workers], threads: threads), ROOT, @env[name]]
      end
    end

    def rails? = @o[:app] == RAILS_APP

    def margay_extra = @o[:fibers] ? %w[--fibers] : []

    # In fiber mode Margay runs its default fiber threads (-t sets them otherwise).
    def margay_threads(threads) = @o[:fibers] ? nil : threads

    # Each server's environment: Puma (and every server of the Rails app) with the bench
    # bundle; the Rails app in production on SQLite in +tmp+.
    def server_env(tmp)
      bench = Env.clean.merge("BUNDLE_GEMFILE" => File.join(BENCH, "Gemfile"))
      return { "margay" => Env.clean, "margay-base" => Env.clean, "puma" => bench } unless rails?

      rails = bench.merge("RACK_ENV" => "production", "RAILS_ENV" => "production",
                          "BENCH_RAILS_DB" => File.join(tmp, "rails.sqlite3"))
      { "margay" => rails, "margay-base" => rails, "puma" => rails }
    end

    # [[per-process connection counts], backlog] every SAMPLE_EVERY until killed.
    def sample(port)
      @samples = []
      loop do
        conns = Hash.new(0)
        `ss -tnpH state established '( sport = :#{port} )' 2>/dev/null`.scan(/pid=(\d+)/) { |(pid)| conns[pid] += 1 }
        backlog = `ss -tlnH '( sport = :#{port} )' 2>/dev/null`.split[1].to_i # Recv-Q of a listener: its backlog
        @samples << [conns.values, backlog]
        sleep SAMPLE_EVERY
      end
    end

    def spread(samples)
      busy = samples.select { |counts, _| counts.size == @o[:workers] }
      fewest = busy.map { |counts, _| counts.min }
      most = busy.map { |counts, _| counts.max }
      { "samples" => samples.size, "conns_median" => [Stats.median(fewest), Stats.median(most)],
        "backlog_median" => Stats.median(samples.map(&:last)), "backlog_max" => samples.map(&:last).max }
    end

    def ab(port)
      out = `ab -q -n #{@o[:requests]} -c #{@o[:connections]} -s 30 http://127.0.0.1:#{port}/ 2>&1`
      { "rps" => out[/Requests per second:\s+([\d.]+)/, 1].to_f, "p50_ms" => out[/^\s+50%\s+(\d+)/, 1].to_f,
        "p99_ms" => out[/^\s+99%\s+(\d+)/, 1].to_f, "failed" => ab_failed(out),
        "non_2xx" => out[/Non-2xx responses:\s+(\d+)/, 1].to_i }
    end

    # ab's failed requests, less those it counts for a body length unlike the first response's
    # (a page whose length varies, as the Rails app's does, is not a failure).
    def ab_failed(out)
      failed = out[/Failed requests:\s+(\d+)/, 1].to_i
      failed - out[/Length: (\d+)/, 1].to_i
    end

    def wrk(port, tmp)
      argv = Wrk.argv(threads: 2, connections: @o[:connections], seconds: @o[:seconds], timeout: 10,
                      url: "http://127.0.0.1:#{port}/")
      data, = Wrk.run(argv, out_path: File.join(tmp, "wrk-#{port}.out"), bound: @o[:seconds] + 30)
      lat = data["latency_us"]
      e = data["errors"]
      { "rps" => data["requests"] / (data["duration_us"] / 1e6), "p50_ms" => lat["p50"] / 1000.0,
        "p99_ms" => lat["p99"] / 1000.0, "mean_ms" => lat["mean"] / 1000.0,
        "failed" => e["connect"] + e["read"] + e["write"] + e["timeout"], "non_2xx" => e["status"] }
    end

    def write
      ResultFiles.write("queue-#{@o[:load]}", @o, @rows, markdown,
                        head: { "baseline_commit" => (@o[:baseline] && Machine.commit(@o[:baseline])) })
    end

    def markdown
      load = @o[:load] == "ab" ? "ab -n #{@o[:requests]} -c #{@o[:connections]}" : "wrk -c#{@o[:connections]} -d#{@o[:seconds]}s"
      mode = @o[:fibers] ? " (Margay in fiber mode)" : ""
      lines = ["#{load}, #{@o[:workers]} workers x #{@o[:min_threads]}:#{@o[:threads]} threads#{mode}, #{@o[:app]}", "",
               "| round | server | req/s | p50 ms | p99 ms | p99/p50 | conns per worker (fewest, most) | backlog median (max) | failed |",
               "|---:|---|---:|---:|---:|---:|---|---|---:|"]
      @rows.each do |r|
        lines << format("| %d | %s | %.1f | %.1f | %.1f | %.2f | %s | %s (%s) | %d |", r["round"], r["server"], r["rps"],
                        r["p50_ms"], r["p99_ms"], r["p99_ms"] / r["p50_ms"], r["conns_median"].join(", "),
                        r["backlog_median"], r["backlog_max"], r["failed"] + r["non_2xx"])
      end
      lines << ""
      @servers.grep(/margay/).each do |name|
        lines << "#{name} / puma per round (p99 ratio at req/s ratio): #{ratios(name).join('; ')}"
      end
      "#{lines.join("\n")}\n"
    end

    def ratios(name)
      @rows.group_by { |r| r["round"] }.map do |round, rows|
        m = rows.find { |r| r["server"] == name }
        p = rows.find { |r| r["server"] == "puma" }
        format("%d: %.2fx at %.2fx", round, m["p99_ms"] / p["p99_ms"], m["rps"] / p["rps"])
      end
    end
  end
end

exit MargayBench::QueueBench.new(ARGV).run if $PROGRAM_NAME == __FILE__
