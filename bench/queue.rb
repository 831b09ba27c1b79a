#!/usr/bin/env ruby
# frozen_string_literal: true

# One queue across cluster workers: Margay and Puma 8 with the same workers and threads on the
# same app, alternated round by round (the order rotates: no server always starts first), each
# round one load per server:
#
#   ab     a new connection per request (`ab -n N -c C`, no keep-alive: the seeds' method)
#   wrk    closed loop over keep-alive connections (`wrk -t2 -cC -dSs --latency`)
#   arrival  open loop (bench/lib/arrival.rb: a constant arrival rate over 256 keep-alive
#          connections, latency from each request's due time): the highest rate whose p99 stays
#          under --slo-ms with no error, bisected from --max-rate over --probes probes of
#          --seconds each (capacity.rb's method): the capacity, per server and round
#
# While the load runs, every 100 ms `ss` reads how the clients are spread, the same way for
# every server: per worker process its accepted connections, and the listener's backlog (the
# clients no worker accepted yet). Reports per round req/s, p50, p99, p99/p50, the workers'
# connections (median of each sample's fewest and most) and the backlog's median, and
# Margay/Puma ratios. --baseline DIR adds another Margay checkout (margay-base). The load starts
# once every worker of the server runs. Margay (this tree) also serves its control app, whose
# GET /queue is read with each sample: per worker its waiting requests and the longest wait
# among them, reported as median and max over the run (the tree's own view of its queues).
#
#   bundle exec ruby bench/queue.rb [--load ab|wrk|arrival] [--rounds 5] [--workers 2] [--threads 5] [--min-threads 0]
#                                   [--connections 50] [--requests 3000] [--seconds 6]
#                                   [--max-rate 400] [--probes 7] [--slo-ms 100]
#                                   [--app bench/apps/io.ru | --rails] [--fibers] [--baseline DIR]
#                                   [--margay-arg ARG]... [--results-dir DIR]
#
# --fibers: the Margay trees in fiber mode (a fiber per request; Puma keeps its threads).
# --margay-arg ARG (repeatable): ARG added to this tree's Margay command (not margay-base's), e.g.
# --margay-arg=--heap-room-before-fork=0.4 against --baseline DIR without it.
# --rails: the Rails bench app (bench/apps/rails, GET /: a page from SQLite), every server with the
# bench bundle in production, the database made in the run's temp dir before the first server.
#
# Writes DIR/queue-<load>-<time>.json and .md (DIR: bench/results/queue-<UTC date>).
require "json"
require "net/http"
require "rbconfig"
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

    attr_reader :rows # every round's figures, per server, once #run returned (bench/queue_bars.rb)

    def initialize(argv)
      @o = { load: "ab", rounds: 5, workers: 2, threads: 5, min_threads: 0, connections: 50, requests: 3000, seconds: 6,
             max_rate: 400, probes: 7, slo_ms: 100,
             app: "bench/apps/io.ru", baseline: nil, margay_args: [],
             results_dir: File.join(ROOT, "bench/results", "queue-#{Time.now.utc.strftime('%Y%m%d')}") }
      OptionParser.new do |p|
        p.on("--load NAME", %w[ab wrk arrival]) { |v| @o[:load] = v }
        %i[rounds workers threads min_threads connections requests seconds max_rate probes slo_ms].each do |k|
          p.on("--#{k.to_s.tr('_', '-')} N", Integer) { |v| @o[k] = v }
        end
        p.on("--app PATH") { |v| @o[:app] = v }
        p.on("--rails") { @o[:app] = RAILS_APP }
        p.on("--fibers") { @o[:fibers] = true }
        p.on("--margay-arg ARG") { |v| @o[:margay_args] << v }
        p.on("--baseline DIR") { |v| @o[:baseline] = File.expand_path(v) }
        p.on("--results-dir DIR") { |v| @o[:results_dir] = File.expand_path(v) }
      end.parse!(argv)
      @servers = ["margay", ("margay-base" if @o[:baseline]), "puma"].compact
    end

    def run
      missing = [(@o[:load] unless @o[:load] == "arrival"), "ss"].compact.reject { |cmd| Env.which(cmd) }
      abort "bench/queue.rb: missing #{missing.join(', ')}" unless missing.empty?
      @rows = []
      Dir.mktmpdir("margay-queue-") do |tmp|
        @env = server_env(tmp)
        Prereqs.seed_rails(@env["puma"], "SQLite") if rails?
        @o[:rounds].times do |round|
          @servers.rotate(round).each do |name| # no server always starts first on a cold machine
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
      control = name == "margay" ? Env.free_port : nil
      argv, chdir, env = command(name, port, control)
      log = File.join(tmp, "#{name}-#{port}.log")
      pid = Procs.spawn_server(env, argv, log, chdir: chdir)
      begin
        Procs.await_server("bench/queue.rb: server on #{port}", log) { Env.ok?("127.0.0.1", port) }
        await_workers(pid, log)
        sampler = Thread.new { sample(port, control) }
        result = case @o[:load]
                 when "ab" then ab(port)
                 when "wrk" then wrk(port, tmp)
                 else arrival(port, tmp)
                 end
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

    def command(name, port, control = nil)
      threads = "#{@o[:min_threads]}:#{@o[:threads]}" # 0: as both servers default, the pool grows from one thread
      app = File.expand_path(@o[:app], ROOT)
      case name
      when "margay", "margay-base"
        extra = margay_extra(control) + (name == "margay" ? @o[:margay_args] : [])
        [Servers.margay(port, app, workers: @o[:workers], threads: margay_threads(threads), extra: extra),
         name == "margay" ? ROOT : @o[:baseline], @env[name]]
      else [Servers.puma(port, app, workers: @o[:workers], threads: threads), ROOT, @env[name]]
      end
    end

    def rails? = @o[:app] == RAILS_APP

    def margay_extra(control)
      (@o[:fibers] ? %w[--fibers] : []) +
        (control ? %W[--control-url tcp://127.0.0.1:#{control} --control-token none] : [])
    end

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

    # [[per-process connection counts], backlog, per-worker queue looks or nil] every SAMPLE_EVERY
    # until killed; the looks from the control app on +control+ (Margay's GET /queue).
    def sample(port, control)
      @samples = []
      loop do
        conns = Hash.new(0)
        `ss -tnpH state established '( sport = :#{port} )' 2>/dev/null`.scan(/pid=(\d+)/) { |(pid)| conns[pid] += 1 }
        backlog = `ss -tlnH '( sport = :#{port} )' 2>/dev/null`.split[1].to_i # Recv-Q of a listener: its backlog
        @samples << [conns.values, backlog, control && queue_looks(control)]
        sleep SAMPLE_EVERY
      end
    end

    # Per worker [waiting requests, oldest wait ms] from GET /queue; nil when it did not answer.
    def queue_looks(control)
      body = Net::HTTP.get(URI("http://127.0.0.1:#{control}/queue"))
      JSON.parse(body)["workers"].map { |w| w.values_at("waiting_requests", "oldest_wait_ms") }
    rescue StandardError
      nil
    end

    def spread(samples)
      busy = samples.select { |counts, _| counts.size == @o[:workers] }
      fewest = busy.map { |counts, _| counts.min }
      most = busy.map { |counts, _| counts.max }
      { "samples" => samples.size, "conns_median" => [Stats.median(fewest), Stats.median(most)],
        "backlog_median" => Stats.median(samples.map { |s| s[1] }), "backlog_max" => samples.map { |s| s[1] }.max,
        "workers_queue" => worker_queues(samples.filter_map(&:last)) }
    end

    # Per worker index: its waiting requests and oldest wait (ms), median and max over the
    # looks; nil without looks (a server without the control app's /queue).
    def worker_queues(looks)
      return nil if looks.empty?

      Array.new(looks.map(&:size).max) do |i|
        mine = looks.filter_map { |l| l[i] }
        waiting = mine.map(&:first)
        oldest = mine.map(&:last)
        { "waiting_median" => Stats.median(waiting), "waiting_max" => waiting.max,
          "oldest_wait_ms_median" => Stats.median(oldest), "oldest_wait_ms_max" => oldest.max }
      end
    end

    # The open loop: the highest arrival rate whose p99 stays under --slo-ms, bisected between
    # the highest rate that met it (0 at first) and the lowest that missed, from --max-rate.
    def arrival(port, tmp)
      met = 0
      missed = nil
      probes = []
      @o[:probes].times do
        rate = missed ? ((met + missed) / 2.0).round : @o[:max_rate]
        break if rate <= met || probes.any? { |pr| pr["rate"] == rate }

        sleep 1 unless probes.empty? # what an overloaded probe left queued drains
        probe = arrival_probe(port, rate, tmp)
        probes << probe
        probe["met"] ? met = rate : missed = rate
        break if met == @o[:max_rate]
      end
      best = probes.select { |pr| pr["met"] }.max_by { |pr| pr["rate"] }
      { "rps" => met, "p50_ms" => best ? best["p50_ms"] : 0.0, "p99_ms" => best ? best["p99_ms"] : 0.0,
        "capped" => met == @o[:max_rate], "probes" => probes, "failed" => 0, "non_2xx" => 0 }
    end

    def arrival_probe(port, rate, tmp)
      out = File.join(tmp, "arrival.json")
      argv = [RbConfig.ruby, "bench/lib/arrival.rb", "--port", port.to_s, "--rate", rate.to_s,
              "--duration", @o[:seconds].to_s, "--connections", "256", "--timeout", "5", "--json"]
      pid = Process.spawn(Env.clean, *argv, chdir: ROOT, in: File::NULL, out: [out, "w"], err: File::NULL)
      ok = Procs.wait(pid, @o[:seconds] + 30)&.success?
      Procs.stop(pid, grace: 2) unless ok
      data = ok ? JSON.parse(File.read(out)) : {}
      p99 = data.dig("latency_ms", "p99")
      met = ok && data["errors"].zero? && data["dropped"].zero? && p99 && p99 <= @o[:slo_ms] &&
            data["achieved_rate"] >= 0.95 * rate
      warn format("[queue]   %4d/s: achieved %s/s, p99 %s ms, errors %s, dropped %s -> %s", rate, data["achieved_rate"],
                  p99, data["errors"], data["dropped"], met ? "met" : "missed")
      { "rate" => rate, "met" => met ? true : false, "achieved" => data["achieved_rate"], "p50_ms" => data.dig("latency_ms", "p50"),
        "p99_ms" => p99, "errors" => data["errors"], "dropped" => data["dropped"] }
    end

    def ab(port)
      out = `ab -q -n #{@o[:requests]} -c #{@o[:connections]} -s 30 http://127.0.0.1:#{port}/ 2>&1`
      { "rps" => out[/Requests per second:\s+([\d.]+)/, 1].to_f, "p50_ms" => out[/^\s+50%\s+(\d+)/, 1].to_f,
        "p99_ms" => out[/^\s+99%\s+(\d+)/, 1].to_f, "mean_ms" => out[/^Time per request:\s+([\d.]+) \[ms\] \(mean\)$/, 1]&.to_f,
        "failed" => ab_failed(out),
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
      lines = ["#{load_text}, #{@o[:workers]} workers x #{@o[:min_threads]}:#{@o[:threads]} threads#{mode_text}, #{@o[:app]}", ""]
      lines.concat(@o[:load] == "arrival" ? capacity_table : latency_table)
      lines << ""
      @rows.each do |r|
        next unless r["workers_queue"]

        lines << format("round %d %s per worker, waiting requests and oldest wait ms (median/max over the run): %s",
                        r["round"], r["server"], r["workers_queue"].each_with_index.map do |w, i|
                          format("w%d %s/%s, %s/%s ms", i, w["waiting_median"], w["waiting_max"],
                                 w["oldest_wait_ms_median"], w["oldest_wait_ms_max"])
                        end.join("; "))
      end
      lines << ""
      @servers.grep(/margay/).each do |name|
        lines << "#{name} / puma per round (#{ratio_text}): #{ratios(name).join('; ')}"
      end
      "#{lines.join("\n")}\n"
    end

    def load_text
      case @o[:load]
      when "ab" then "ab -n #{@o[:requests]} -c #{@o[:connections]}"
      when "wrk" then "wrk -c#{@o[:connections]} -d#{@o[:seconds]}s"
      else "open loop (bench/lib/arrival.rb, 256 connections), p99 <= #{@o[:slo_ms]} ms, #{@o[:probes]} probes of " \
           "#{@o[:seconds]} s from #{@o[:max_rate]}/s"
      end
    end

    def mode_text
      (@o[:fibers] ? " (Margay in fiber mode)" : "") +
        (@o[:margay_args].empty? ? "" : " (margay with #{@o[:margay_args].join(' ')})")
    end

    def ratio_text = @o[:load] == "arrival" ? "capacity ratio" : "p99 ratio at req/s ratio"

    def latency_table
      lines = ["| round | server | req/s | p50 ms | p99 ms | p99/p50 | p99/mean | conns per worker (fewest, most) | " \
               "backlog median (max) | failed |",
               "|---:|---|---:|---:|---:|---:|---:|---|---|---:|"]
      @rows.each do |r|
        over_mean = r["mean_ms"] ? format("%.2f", r["p99_ms"] / r["mean_ms"]) : "-"
        lines << format("| %d | %s | %.1f | %.1f | %.1f | %.2f | %s | %s | %s (%s) | %d |", r["round"], r["server"], r["rps"],
                        r["p50_ms"], r["p99_ms"], r["p99_ms"] / r["p50_ms"], over_mean, r["conns_median"].join(", "),
                        r["backlog_median"], r["backlog_max"], r["failed"] + r["non_2xx"])
      end
      lines
    end

    def capacity_table
      lines = ["| round | server | capacity req/s | p99 ms there | probes (rate: p99 ms, met) |", "|---:|---|---:|---:|---|"]
      @rows.each do |r|
        probes = r["probes"].map { |pr| format("%d: %s%s", pr["rate"], pr["p99_ms"] || "-", pr["met"] ? "" : " x") }
        lines << format("| %d | %s | %d%s | %.1f | %s |", r["round"], r["server"], r["rps"], r["capped"] ? " (cap)" : "",
                        r["p99_ms"], probes.join(", "))
      end
      lines
    end

    def ratios(name)
      @rows.group_by { |r| r["round"] }.map do |round, rows|
        m = rows.find { |r| r["server"] == name }
        p = rows.find { |r| r["server"] == "puma" }
        next format("%d: %.2fx", round, p["rps"].positive? ? m["rps"].fdiv(p["rps"]) : Float::NAN) if @o[:load] == "arrival"

        format("%d: %.2fx at %.2fx", round, m["p99_ms"] / p["p99_ms"], m["rps"] / p["rps"])
      end
    end
  end
end

exit MargayBench::QueueBench.new(ARGV).run if $PROGRAM_NAME == __FILE__
