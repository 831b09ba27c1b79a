#!/usr/bin/env ruby
# frozen_string_literal: true

# bench/core.rb: the core benchmark of Margay against Iodine, Puma and nginx, on loopback.
#
#   bench/core.rb              full run: 3 rounds x 10 s per server and connection count
#   bench/core.rb --quick      smoke run: 1 round x 3 s, short slow-client scenario (< 2 min)
#   bench/core.rb --baseline ../margay-before   also run that checkout as margay-base
#   bench/core.rb --help       all options
#
# Servers: margay, iodine (-t 1 -w 1), puma and nginx (1 worker) by default; margay-w2 and
# nginx-w2 (2 workers each: the cluster row) with --servers.
#
# Scenario "hello": bench/apps/hello.ru (nginx: `return 200 "Hello, World!"`), keep-alive,
# wrk -t2 at 16/64/256 connections. Every measurement gets a freshly started server, a
# discarded warm-up run, the measured run, then the server's RSS (VmRSS of the server
# process and all its descendants). The server order rotates from one measurement to the
# next, so no server always runs first or last.
#
# Scenario "slow": each Ruby server with one thread (-t 1:1) and bench/apps/slow_clients.ru,
# loaded by bench/slow_clients.rb (200 trickling connections, 20 non-reading 16 MiB
# downloads, one client measuring sequential GET latency).
#
# --baseline DIR: another Margay checkout (a git worktree of an earlier commit, its
# extension compiled) runs as server "margay-base", started with that checkout's exe/ and
# lib/ and the same app, in the same rotation as the others; the report adds the ratios
# margay / margay-base (a before/after comparison that shares the machine's drift).
#
# Results: bench/results/core-<timestamp>.json, core-latest.json and core-latest.md (or
# under --results-dir). Installs nothing: checks for wrk, nginx and the bench bundle and
# says what is missing. Exit status: 0 all good, 1 a server failed to start or a run
# failed, 2 a prerequisite is missing, 64 bad usage.

require "json"
require "rbconfig"
require_relative "lib/harness"
require_relative "lib/stats"
require_relative "lib/wrk"
require_relative "lib/core/options"
require_relative "lib/core/servers"
require_relative "lib/core/report"

module MargayBench
  # The benchmark itself: the scenarios, one fresh server per measurement.
  class Core < Harness
    NOISY_PCT = CoreReport::NOISY_PCT

    def initialize(opts)
      super(opts, script: "bench/core.rb", tag: "core", width: 5)
    end

    def run
      return 2 unless prepare(CorePrereqs.check(@o), "margay-bench-")

      warn_if_loaded(NOISY_PCT)
      progress "mode #{@o.mode}: servers #{@o.servers.join(',')}, scenarios #{@o.scenarios.join(',')}, tmp #{@tmp}"
      result = result_head("core")
      result["hello"] = run_hello if @o.scenarios.include?("hello")
      result["slow"] = run_slow if @o.scenarios.include?("slow")
      result["baseline"] = compare_baseline(result) if @o.servers.include?("margay-base")
      result["bars"] = CoreReport.new(result).bars
      finish(result, "core")
    ensure
      clean_up
    end

    private

    # Start a fresh server, yield it, stop it. A server that fails to start once is
    # skipped for the rest of the run (its failure and log tail are in the results).
    def with_server(name, app:, threads: nil, scenario: nil)
      if @broken[name]
        progress "  #{name} skipped: it failed to start earlier in this run"
        return nil
      end
      server = CoreServer.new(name, @o, @tmp, app: app, threads: threads)
      return nil unless start_server(server, name, { "server" => name, "scenario" => scenario }, name, detail: :message)

      yield server
    ensure
      stop_server(server, name) if server
    end

    def wrk_argv(conns, seconds, port)
      Wrk.argv(threads: @o.wrk_threads, connections: conns, seconds: seconds, timeout: @o.wrk_timeout,
               url: "http://127.0.0.1:#{port}/")
    end

    def run_wrk(conns, seconds, port)
      argv = wrk_argv(conns, seconds, port)
      data, text = Wrk.run(argv, out_path: File.join(@tmp, "wrk.out"), bound: seconds + 30) { |pid| @load_pid = pid }
      data.merge("command" => argv.join(" "), "wrk_text" => text)
    ensure
      @load_pid = nil
    end

    # --- hello ---------------------------------------------------------------

    def run_hello
      runs = []
      servers = @o.servers
      total = @o.rounds * @o.connections.size * servers.size
      n = 0
      @o.rounds.times do |round|
        @o.connections.each_with_index do |conns, ci|
          servers.rotate(round + ci).each do |name|
            n += 1
            progress "hello #{n}/#{total}: round #{round + 1}, #{conns} connections, #{name}"
            run = hello_once(name, conns, round + 1)
            runs << run if run
          end
        end
      end
      { "app" => "bench/apps/hello.ru", "runs" => runs, "summary" => summarize_hello(runs),
        "margay_threads" => @o.margay_threads || "default" }
    end

    def hello_once(name, conns, round)
      threads = name.start_with?("margay") ? @o.margay_threads : nil
      with_server(name, app: "bench/apps/hello.ru", threads: threads, scenario: "hello") do |server|
        run_wrk(conns, @o.warmup, server.port) if @o.warmup.positive?
        window = CpuWindow.new(server.pid)
        data = run_wrk(conns, @o.duration, server.port)
        # CPU used by anything but the server and wrk during the run: other load on the machine.
        cpu, wrk_cpu, other_pct = window.finish(data["duration_us"] / 1e6)
        rss, detail = server.rss
        e = data["errors"]
        run = {
          "server" => name, "connections" => conns, "round" => round,
          "server_command" => server.command, "startup_s" => server.startup_s&.round(2),
          "wrk_command" => data["command"],
          "requests" => data["requests"], "duration_s" => (data["duration_us"] / 1e6).round(3),
          "rps" => (data["requests"] / (data["duration_us"] / 1e6)).round(1),
          "latency_us" => data["latency_us"],
          "non2xx" => e["status"], "socket_errors" => e["connect"] + e["read"] + e["write"] + e["timeout"],
          "errors" => e, "rss_kib" => rss, "rss_processes" => detail,
          "server_cpu_s" => cpu, "server_cpu_us_per_request" => data["requests"].positive? ? (cpu * 1e6 / data["requests"]).round(2) : nil,
          "wrk_cpu_s" => wrk_cpu, "other_cpu_pct" => other_pct,
          "loadavg_before" => window.loadavg_before, "wrk_text" => data["wrk_text"]
        }
        progress format("  %-6s c=%-3d %10.0f req/s  p50 %s  p99 %s  non-2xx %d  socket errors %d  RSS %.1f MiB  " \
                        "CPU: server %.1f s, wrk %.1f s, other %.0f%%%s",
                        name, conns, run["rps"], Stats.ms(run["latency_us"]["p50"] / 1000.0),
                        Stats.ms(run["latency_us"]["p99"] / 1000.0), run["non2xx"], run["socket_errors"], rss / 1024.0,
                        cpu, wrk_cpu, other_pct, other_pct > NOISY_PCT ? "  (NOISY: other load on the machine)" : "")
        run
      rescue StandardError => e
        @failures << { "server" => name, "scenario" => "hello", "connections" => conns, "error" => e.message,
                       "log_tail" => server.log_tail }
        progress "  #{name} c=#{conns} FAILED: #{e.message}"
        nil
      end
    end

    def summarize_hello(runs)
      rows = runs.group_by { |r| [r["server"], r["connections"]] }.map do |(server, conns), rs|
        {
          "server" => server, "connections" => conns, "rounds" => rs.size,
          "requests" => rs.sum { |r| r["requests"] },
          "rps_median" => Stats.median(rs.map { |r| r["rps"] })&.round(1), "rps_all" => rs.map { |r| r["rps"] },
          "p50_ms" => lat_ms(rs, "p50"), "p90_ms" => lat_ms(rs, "p90"), "p99_ms" => lat_ms(rs, "p99"),
          "non2xx" => rs.sum { |r| r["non2xx"] }, "socket_errors" => rs.sum { |r| r["socket_errors"] },
          "rss_mib_median" => (Stats.median(rs.map { |r| r["rss_kib"] }) / 1024.0).round(1),
          "rss_mib_max" => (rs.map { |r| r["rss_kib"] }.max / 1024.0).round(1),
          "server_cpu_us_per_request_median" => Stats.median(rs.map { |r| r["server_cpu_us_per_request"] }),
          "other_cpu_pct_max" => rs.map { |r| r["other_cpu_pct"] }.max
        }
      end
      by = rows.to_h { |r| [[r["server"], r["connections"]], r] }
      rows.each do |r|
        cluster = r["server"].end_with?("-w2") # a 2-worker row is compared with nginx's 2 workers
        { "nginx" => cluster ? "nginx-w2" : "nginx", "puma" => "puma", "iodine" => "iodine" }.each do |key, peer|
          p = by[[peer, r["connections"]]]
          r["rps_vs_#{key}"] = p && p["rps_median"]&.positive? ? (r["rps_median"] / p["rps_median"]).round(3) : nil
        end
      end
      order = CoreOptions::ORDER
      rows.sort_by { |r| [r["connections"], order.index(r["server"])] }
    end

    def lat_ms(runs, key)
      m = Stats.median(runs.map { |r| r["latency_us"][key] })
      m && (m / 1000.0).round(3)
    end

    # --- slow clients ----------------------------------------------------------

    def run_slow
      servers = @o.ruby_servers
      runs = []
      @o.slow_rounds.times do |round|
        servers.rotate(round).each do |name|
          progress "slow clients: round #{round + 1}, #{name} -t 1:1 (#{@o.slow_trickle} trickling, " \
                   "#{@o.slow_non_readers} non-readers, #{@o.slow_duration}s measured)"
          run = slow_once(name, round + 1)
          runs << run if run
        end
      end
      summary = runs.group_by { |r| r["server"] }.map do |server, rs|
        {
          "server" => server, "threads" => "1:1", "rounds" => rs.size,
          "requests" => rs.sum { |r| r["requests"] }, "ok" => rs.sum { |r| r["ok"] },
          "errors" => rs.sum { |r| r["errors"] },
          "p50_ms" => Stats.median(rs.map { |r| r["latency_ms"]["p50"] }),
          "p90_ms" => Stats.median(rs.map { |r| r["latency_ms"]["p90"] }),
          "p99_ms" => Stats.median(rs.map { |r| r["latency_ms"]["p99"] }),
          "max_ms" => rs.map { |r| r["latency_ms"]["max"] }.compact.max,
          "trickle_open_at_end" => rs.map { |r| r["trickle_open_at_end"] }.min,
          "trickle_opened" => rs.map { |r| r["trickle_opened"] }.min,
          "non_readers_opened" => rs.map { |r| r["non_readers_opened"] }.min,
          "non_readers_receiving" => rs.map { |r| r["non_readers_receiving"] }.compact.min,
          "rss_mib_max" => (rs.map { |r| r["rss_kib"] }.max / 1024.0).round(1)
        }
      end
      { "app" => "bench/apps/slow_clients.ru", "tool" => "bench/slow_clients.rb", "runs" => runs, "summary" => summary }
    end

    def slow_once(name, round)
      with_server(name, app: "bench/apps/slow_clients.ru", threads: "1:1", scenario: "slow") do |server|
        argv = [RbConfig.ruby, "bench/slow_clients.rb", "--port", server.port.to_s,
                "--trickle", @o.slow_trickle.to_s, "--non-readers", @o.slow_non_readers.to_s,
                "--duration", @o.slow_duration.to_s, "--settle", @o.slow_settle.to_s,
                "--request-timeout", @o.slow_request_timeout.to_s, "--json", "--quiet"]
        out_path = File.join(@tmp, "slow.out")
        pid = @load_pid = Process.spawn(Env.clean, *argv, chdir: ROOT, unsetenv_others: true, in: File::NULL,
                                                  out: [out_path, "w"], err: [File.join(@tmp, "slow.err"), "w"])
        bound = @o.slow_settle + @o.slow_duration + @o.slow_request_timeout + 60
        status = Procs.wait(pid, bound)
        @load_pid = nil
        Procs.stop(pid, grace: 2) unless status
        raise "slow_clients.rb did not finish within #{bound}s" unless status
        raise "slow_clients.rb failed (#{status}): #{File.read(File.join(@tmp, 'slow.err'))}" unless status.success?

        run = JSON.parse(File.read(out_path))
        rss, detail = server.rss
        run.merge!("server" => name, "round" => round, "server_command" => server.command,
                   "tool_command" => argv.drop(1).join(" ").sub(/--port \d+/, "--port PORT"),
                   "rss_kib" => rss, "rss_processes" => detail)
        l = run["latency_ms"]
        progress format("  %-6s %6d requests, %d errors, p50 %s p99 %s max %s, trickling open %d/%d, RSS %.1f MiB",
                        name, run["requests"], run["errors"], Stats.ms(l["p50"]), Stats.ms(l["p99"]), Stats.ms(l["max"]),
                        run["trickle_open_at_end"], run["trickle_opened"], rss / 1024.0)
        run
      rescue StandardError => e
        @failures << { "server" => name, "scenario" => "slow", "error" => e.message, "log_tail" => server.log_tail }
        progress "  #{name} slow FAILED: #{e.message}"
        nil
      end
    end

    # --- with --baseline: margay / margay-base ------------------------------------

    def compare_baseline(result)
      hello = result.dig("hello", "summary") || []
      ratios = hello.filter_map do |m|
        next unless m["server"] == "margay"

        b = hello.find { |r| r["server"] == "margay-base" && r["connections"] == m["connections"] }
        b && { "scenario" => "hello, #{m['connections']} connections", "rps" => quotient(m["rps_median"], b["rps_median"]),
               "p50" => quotient(m["p50_ms"], b["p50_ms"]), "p90" => quotient(m["p90_ms"], b["p90_ms"]),
               "p99" => quotient(m["p99_ms"], b["p99_ms"]),
               "cpu_us_per_request" => quotient(m["server_cpu_us_per_request_median"], b["server_cpu_us_per_request_median"]),
               "rss" => quotient(m["rss_mib_median"], b["rss_mib_median"]) }
      end
      slow = result.dig("slow", "summary") || []
      m = slow.find { |r| r["server"] == "margay" }
      b = slow.find { |r| r["server"] == "margay-base" }
      if m && b
        ratios << { "scenario" => "slow clients (1 thread)", "rps" => quotient(m["requests"], b["requests"]),
                    "p50" => quotient(m["p50_ms"], b["p50_ms"]), "p90" => quotient(m["p90_ms"], b["p90_ms"]),
                    "p99" => quotient(m["p99_ms"], b["p99_ms"]), "cpu_us_per_request" => nil,
                    "rss" => quotient(m["rss_mib_max"], b["rss_mib_max"]) }
      end
      { "dir" => @o.baseline, "margay" => Machine.margay_version(@o.baseline), "commit" => Machine.commit(@o.baseline),
        "margay_default_threads" => Machine.margay_default_threads(@o.baseline), "ratios" => ratios }
    end

    def quotient(a, b)
      a && b && b.to_f.positive? ? (a / b.to_f).round(3) : nil
    end

    # --- output ------------------------------------------------------------------

    def markdown(result)
      CoreReport.new(result).markdown
    end

    def versions
      lock = Machine.bench_lock
      {
        "ruby" => Machine.ruby_version,
        "margay" => Machine.margay_version,
        "margay_commit" => Machine.commit,
        "margay_default_threads" => Machine.margay_default_threads,
        "puma" => Machine.locked(lock, "puma"),
        "puma_default_threads" => "0:5",
        "iodine" => Machine.locked(lock, "iodine"),
        "rack_bench_bundle" => Machine.locked(lock, "rack"),
        "nginx" => Machine.nginx_version,
        "wrk" => Machine.wrk_version
      }
    end

    def config
      servers = CoreOptions::ORDER - ["margay-base"]
      servers.insert(1, "margay-base") if @o.baseline
      config = {
        "servers" => @o.servers, "scenarios" => @o.scenarios, "connections" => @o.connections,
        "rounds" => @o.rounds, "duration_s" => @o.duration, "warmup_s" => @o.warmup,
        "wrk_threads" => @o.wrk_threads, "wrk_timeout_s" => @o.wrk_timeout,
        "wrk_command" => wrk_argv("<N>", @o.duration, "<PORT>").join(" "),
        "margay_threads" => @o.margay_threads || "default",
        "slow_duration_s" => @o.slow_duration, "slow_settle_s" => @o.slow_settle, "slow_rounds" => @o.slow_rounds,
        "slow_trickle" => @o.slow_trickle, "slow_non_readers" => @o.slow_non_readers,
        "slow_request_timeout_s" => @o.slow_request_timeout,
        "server_commands" => servers.to_h { |s| [s, CoreServer.command_template(s, @o)] }
      }
      config["baseline"] = @o.baseline if @o.baseline
      config
    end
  end
end

if $PROGRAM_NAME == __FILE__
  begin
    opts = MargayBench::CoreOptions.new(ARGV)
  rescue OptionParser::ParseError => e
    warn "bench/core.rb: #{e.message}"
    exit 64
  end
  exit MargayBench::Core.new(opts).run
end
