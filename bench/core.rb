#!/usr/bin/env ruby
# frozen_string_literal: true

# bench/core.rb: the core benchmark of Margay against Puma and nginx, on loopback.
#
#   bench/core.rb                 full run: 3 rounds x 10 s per server and connection count
#   bench/core.rb --quick         smoke run: 1 round x 3 s, short slow-client scenario (< 2 min)
#   bench/core.rb --help          all options
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
# Results: bench/results/core-<timestamp>.json, core-latest.json and core-latest.md (or
# under --results-dir). Installs nothing: checks for wrk, nginx and the bench bundle and
# says what is missing. Exit status: 0 all good, 1 a server failed to start or a run
# failed, 2 a prerequisite is missing, 64 bad usage.

require "etc"
require "fileutils"
require "json"
require "net/http"
require "optparse"
require "rbconfig"
require "socket"
require "time"
require "tmpdir"
require_relative "lib/procs"

module MargayBench
  ROOT = File.expand_path("..", __dir__)
  BENCH = File.join(ROOT, "bench")

  # Command-line options with the defaults of the full and the quick mode.
  class CoreOptions
    ALL_SERVERS = %w[margay puma nginx].freeze
    ALL_SCENARIOS = %w[hello slow].freeze
    FULL = { rounds: 3, duration: 10, warmup: 2, slow_duration: 20, slow_settle: 2, slow_rounds: 1 }.freeze
    QUICK = { rounds: 1, duration: 3, warmup: 1, slow_duration: 5, slow_settle: 1, slow_rounds: 1 }.freeze

    attr_accessor :mode, :servers, :scenarios, :connections, :rounds, :duration, :warmup,
                  :wrk_threads, :wrk_timeout, :margay_threads, :slow_duration, :slow_settle,
                  :slow_rounds, :slow_trickle, :slow_non_readers, :slow_request_timeout,
                  :results_dir, :start_timeout, :margay_exe

    def initialize(argv)
      @mode = "full"
      @servers = ALL_SERVERS.dup
      @scenarios = ALL_SCENARIOS.dup
      @connections = [16, 64, 256]
      @wrk_threads = 2
      @wrk_timeout = 2
      @margay_threads = nil
      @slow_trickle = 200
      @slow_non_readers = 20
      @slow_request_timeout = 5.0
      @results_dir = File.join(BENCH, "results")
      @start_timeout = 30
      @margay_exe = "exe/margay"
      overrides = {}
      parser(overrides).parse!(argv)
      raise OptionParser::InvalidArgument, "unexpected argument(s): #{argv.join(' ')}" unless argv.empty?

      (@mode == "quick" ? QUICK : FULL).merge(overrides).each { |k, v| public_send(:"#{k}=", v) }
      bad = @servers - ALL_SERVERS
      raise OptionParser::InvalidArgument, "unknown server(s) #{bad.join(', ')}" unless bad.empty?
      bad = @scenarios - ALL_SCENARIOS
      raise OptionParser::InvalidArgument, "unknown scenario(s) #{bad.join(', ')}" unless bad.empty?
    end

    private

    def parser(overrides)
      OptionParser.new do |o|
        o.banner = "usage: bench/core.rb [--quick] [options]"
        o.on("--quick", "one short round of everything (smoke test, < 2 min)") { @mode = "quick" }
        o.on("--servers LIST", Array, "subset of #{ALL_SERVERS.join(',')} (default: all)") { |v| @servers = v }
        o.on("--scenarios LIST", Array, "subset of #{ALL_SCENARIOS.join(',')} (default: all)") { |v| @scenarios = v }
        o.on("--connections LIST", Array, "wrk connection counts (default 16,64,256)") do |v|
          @connections = v.map { |c| Integer(c) }
        end
        o.on("--rounds N", Integer, "hello rounds per server (full 3, quick 1)") { |v| overrides[:rounds] = v }
        o.on("--duration S", Integer, "seconds per measured wrk run (full 10, quick 3)") { |v| overrides[:duration] = v }
        o.on("--warmup S", Integer, "seconds of discarded wrk warm-up (full 2, quick 1; 0: none)") do |v|
          overrides[:warmup] = v
        end
        o.on("--wrk-threads N", Integer, "wrk -t (default 2)") { |v| @wrk_threads = v }
        o.on("--margay-threads MIN:MAX", "Margay -t for hello (default: Margay's own default)") { |v| @margay_threads = v }
        o.on("--slow-duration S", Integer, "seconds of measured requests in the slow scenario (full 20, quick 5)") do |v|
          overrides[:slow_duration] = v
        end
        o.on("--slow-rounds N", Integer, "slow-scenario rounds per server (default 1)") { |v| overrides[:slow_rounds] = v }
        o.on("--slow-trickle N", Integer, "trickling connections (default 200)") { |v| @slow_trickle = v }
        o.on("--slow-non-readers N", Integer, "non-reading 16 MiB downloads (default 20)") { |v| @slow_non_readers = v }
        o.on("--margay-exe PATH", "Margay executable, run with `bundle exec` (default exe/margay)") do |v|
          @margay_exe = v
        end
        o.on("--results-dir DIR", "where the JSON and Markdown go (default bench/results)") do |v|
          @results_dir = File.expand_path(v)
        end
      end
    end
  end

  # One server under test: how to start it, where it logs.
  class ServerProcess
    attr_reader :name, :pid, :port, :command, :log_path

    def initialize(name, opts, tmp, app:, threads: nil)
      @name = name
      @opts = opts
      @tmp = tmp
      @app = app
      @threads = threads
      @port = free_port
      @log_path = File.join(tmp, "#{name}-#{@port}.log")
    end

    def start
      env, argv, chdir = spawn_args
      @command = argv.join(" ")
      @started_at = Procs.now
      @pid = Process.spawn(env, *argv, chdir: chdir, unsetenv_others: true, pgroup: true,
                                       in: File::NULL, %i[out err] => [@log_path, "w"])
      wait_ready
      self
    end

    def stop
      return unless @pid

      how = Procs.stop(@pid)
      @pid = nil
      how
    end

    def rss
      Procs.rss_kib(@pid)
    end

    def log_tail(lines = 15)
      File.exist?(@log_path) ? File.readlines(@log_path).last(lines).join : ""
    end

    def self.clean_env
      Env.clean
    end

    private

    def free_port
      Env.free_port
    end

    def spawn_args
      env = self.class.clean_env
      case @name
      when "margay"
        argv = %W[bundle exec #{@opts.margay_exe} -b tcp://127.0.0.1:#{@port} -e production -q]
        argv += ["-t", @threads] if @threads
        [env.merge("BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile")), argv << @app, ROOT]
      when "puma"
        argv = %W[bundle exec puma -b tcp://127.0.0.1:#{@port} -e production -C - -q]
        argv += ["-t", @threads] if @threads
        [env.merge("BUNDLE_GEMFILE" => File.join(BENCH, "Gemfile")), argv << @app, ROOT]
      when "nginx"
        prefix = File.join(@tmp, "nginx-#{@port}")
        FileUtils.mkdir_p(prefix)
        conf = File.read(File.join(BENCH, "nginx", "hello.conf")).gsub("__PORT__", @port.to_s)
        File.write(File.join(prefix, "nginx.conf"), conf)
        [env, [Prereqs.which("nginx"), "-p", "#{prefix}/", "-c", File.join(prefix, "nginx.conf"), "-e", "stderr"], prefix]
      else
        raise ArgumentError, @name
      end
    end

    # Ready once GET / answers 200; fails early if the process exits.
    def wait_ready
      deadline = Procs.now + @opts.start_timeout
      until Procs.now > deadline
        raise "#{@name} exited during start-up" unless Procs.alive?(@pid)

        begin
          res = Net::HTTP.start("127.0.0.1", @port, open_timeout: 1, read_timeout: 2) { |h| h.get("/") }
          if res.code == "200"
            @startup_s = Procs.now - @started_at
            return
          end
        rescue SystemCallError, IOError, Net::OpenTimeout, Net::ReadTimeout, EOFError
          nil
        end
        sleep 0.1
      end
      raise "#{@name} did not answer GET / with 200 within #{@opts.start_timeout}s"
    end

    public

    attr_reader :startup_s
  end

  # Checks for the tools, without installing anything.
  module Prereqs
    module_function

    def which(cmd)
      Env.which(cmd)
    end

    def check(opts)
      problems = []
      if opts.scenarios.include?("hello") && !which("wrk")
        problems << "wrk not found: install it, e.g. `sudo apt-get install wrk` (Debian/Ubuntu)"
      end
      if opts.servers.include?("nginx") && opts.scenarios.include?("hello") && !which("nginx")
        problems << "nginx not found: `sudo apt-get install nginx-light` (or nginx), or leave it out with --servers margay,puma"
      end
      if (opts.servers & %w[margay puma]).any? && !which("bundle")
        problems << "bundler not found: `sudo apt-get install ruby-bundler` or `gem install bundler`"
      end
      if opts.servers.include?("puma") && which("bundle")
        env = ServerProcess.clean_env.merge("BUNDLE_GEMFILE" => File.join(BENCH, "Gemfile"))
        ok = system(env, "bundle", "check", unsetenv_others: true, chdir: ROOT, %i[out err] => File::NULL)
        problems << "the bench bundle (Puma) is not installed: `bundle install --gemfile bench/Gemfile`" unless ok
      end
      if opts.servers.include?("margay")
        unless File.exist?(File.expand_path(opts.margay_exe, ROOT))
          problems << "#{opts.margay_exe} is missing: Margay's executable is not in this tree yet"
        end
        if Dir.glob(File.join(ROOT, "lib", "margay", "margay_native.*")).empty?
          problems << "Margay's native extension is not built: `bundle install && bundle exec rake compile`"
        end
      end
      problems
    end
  end

  # The benchmark itself.
  class Core
    NOISY_PCT = 5.0 # other processes' share of the CPUs during a run above which it is flagged

    def initialize(opts)
      @o = opts
      @t0 = Procs.now
      @failures = []
      @live = []
      @broken = []
    end

    def run
      problems = Prereqs.check(@o)
      unless problems.empty?
        warn "bench/core.rb: cannot run, missing prerequisites:"
        problems.each { |p| warn "  - #{p}" }
        return 2
      end
      FileUtils.mkdir_p(@o.results_dir)
      @tmp = Dir.mktmpdir("margay-bench-")
      trap_signals
      load1 = Procs.loadavg&.first
      if load1 && load1 > 0.5
        progress "WARNING: load average #{load1} before starting; other processes will skew the figures " \
                 "(runs are flagged NOISY when others use > #{NOISY_PCT}% of the CPUs)"
      end
      progress "mode #{@o.mode}: servers #{@o.servers.join(',')}, scenarios #{@o.scenarios.join(',')}, tmp #{@tmp}"
      result = {
        "schema" => 1, "benchmark" => "core", "mode" => @o.mode,
        "started_at" => Time.now.utc.iso8601, "argv" => ARGV_COPY,
        "machine" => machine, "versions" => versions, "config" => config
      }
      result["hello"] = run_hello if @o.scenarios.include?("hello")
      result["slow"] = run_slow if @o.scenarios.include?("slow")
      result["bars"] = bars(result)
      result["failures"] = @failures
      result["finished_at"] = Time.now.utc.iso8601
      result["elapsed_s"] = (Procs.now - @t0).round(1)
      write(result)
      @failures.empty? ? 0 : 1
    ensure
      @live.each(&:stop)
      FileUtils.rm_rf(@tmp) if @tmp && @failures.empty?
      warn "bench/core.rb: server logs kept in #{@tmp}" if @tmp && !@failures.empty?
    end

    private

    def progress(msg)
      $stdout.puts format("[core %5.1fs] %s", Procs.now - @t0, msg)
      $stdout.flush
    end

    def trap_signals
      %w[INT TERM].each do |sig|
        trap(sig) do
          Thread.new do
            if (pid = @load_pid)
              Procs.stop(pid, grace: 2)
            end
            @live.each(&:stop)
            FileUtils.rm_rf(@tmp) if @tmp
            warn "bench/core.rb: interrupted, load generator and servers stopped"
            exit!(130)
          end
        end
      end
    end

    # Start a fresh server, yield it, stop it. A server that fails to start once is
    # skipped for the rest of the run (its failure and log tail are in the results).
    def with_server(name, app:, threads: nil, scenario: nil)
      if @broken.include?(name)
        progress "  #{name} skipped: it failed to start earlier in this run"
        return nil
      end
      server = ServerProcess.new(name, @o, @tmp, app: app, threads: threads)
      @live << server
      begin
        server.start
      rescue StandardError => e
        @broken << name
        @failures << { "server" => name, "scenario" => scenario, "error" => "start: #{e.message}",
                       "command" => server.command, "log_tail" => server.log_tail }
        progress "#{name} FAILED to start: #{e.message}\n#{server.log_tail.gsub(/^/, '    | ')}"
        return nil
      end
      yield server
    ensure
      if server
        how = server.stop
        @live.delete(server)
        progress "#{name} needed SIGKILL to stop" if how == :kill
      end
    end

    def wrk_argv(conns, seconds, port)
      ["wrk", "-t#{@o.wrk_threads}", "-c#{conns}", "-d#{seconds}s", "--timeout", "#{@o.wrk_timeout}s", "--latency",
       "-s", "bench/wrk/report.lua", "http://127.0.0.1:#{port}/"]
    end

    def run_wrk(conns, seconds, port)
      argv = wrk_argv(conns, seconds, port)
      out_path = File.join(@tmp, "wrk.out")
      pid = @load_pid = Process.spawn(*argv, chdir: ROOT, in: File::NULL, %i[out err] => [out_path, "w"])
      status = Procs.wait(pid, seconds + 30)
      @load_pid = nil
      unless status
        Procs.stop(pid, grace: 2)
        raise "wrk did not finish within #{seconds + 30}s"
      end
      out = File.read(out_path)
      json = out[/^BENCH_JSON (.*)$/, 1]
      raise "wrk failed (#{status}): #{out.lines.last(5).join}" unless json

      data = JSON.parse(json)
      data["command"] = argv.join(" ")
      data["wrk_text"] = out.sub(/^BENCH_JSON .*\n?/, "")
      data
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
      threads = name == "margay" ? @o.margay_threads : nil
      with_server(name, app: "bench/apps/hello.ru", threads: threads, scenario: "hello") do |server|
        run_wrk(conns, @o.warmup, server.port) if @o.warmup.positive?
        load_before = Procs.loadavg
        cpu_before = Procs.cpu_s(server.pid)
        sys_before = Procs.system_busy_s
        wrk_before = Procs.reaped_children_cpu_s
        data = run_wrk(conns, @o.duration, server.port)
        cpu = (Procs.cpu_s(server.pid) - cpu_before).round(2)
        wrk_cpu = (Procs.reaped_children_cpu_s - wrk_before).round(2)
        # CPU used by anything but the server and wrk during the run: other load on the machine.
        other = [Procs.system_busy_s - sys_before - cpu - wrk_cpu, 0].max
        other_pct = (100.0 * other / (Etc.nprocessors * (data["duration_us"] / 1e6))).round(1)
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
          "loadavg_before" => load_before, "wrk_text" => data["wrk_text"]
        }
        progress format("  %-6s c=%-3d %10.0f req/s  p50 %s  p99 %s  non-2xx %d  socket errors %d  RSS %.1f MiB  " \
                        "CPU: server %.1f s, wrk %.1f s, other %.0f%%%s",
                        name, conns, run["rps"], ms(run["latency_us"]["p50"] / 1000.0),
                        ms(run["latency_us"]["p99"] / 1000.0), run["non2xx"], run["socket_errors"], rss / 1024.0,
                        cpu, wrk_cpu, other_pct, other_pct > NOISY_PCT ? "  (NOISY: other load on the machine)" : "")
        run
      rescue StandardError => e
        @failures << { "server" => name, "scenario" => "hello", "connections" => conns, "error" => e.message,
                       "log_tail" => server.log_tail }
        progress "  #{name} c=#{conns} FAILED: #{e.message}"
        nil
      end
    end


    def median(values)
      v = values.compact.sort
      return nil if v.empty?

      v.size.odd? ? v[v.size / 2] : (v[v.size / 2 - 1] + v[v.size / 2]) / 2.0
    end

    def summarize_hello(runs)
      rows = runs.group_by { |r| [r["server"], r["connections"]] }.map do |(server, conns), rs|
        {
          "server" => server, "connections" => conns, "rounds" => rs.size,
          "requests" => rs.sum { |r| r["requests"] },
          "rps_median" => median(rs.map { |r| r["rps"] })&.round(1), "rps_all" => rs.map { |r| r["rps"] },
          "p50_ms" => lat_ms(rs, "p50"), "p90_ms" => lat_ms(rs, "p90"), "p99_ms" => lat_ms(rs, "p99"),
          "non2xx" => rs.sum { |r| r["non2xx"] }, "socket_errors" => rs.sum { |r| r["socket_errors"] },
          "rss_mib_median" => (median(rs.map { |r| r["rss_kib"] }) / 1024.0).round(1),
          "rss_mib_max" => (rs.map { |r| r["rss_kib"] }.max / 1024.0).round(1),
          "server_cpu_us_per_request_median" => median(rs.map { |r| r["server_cpu_us_per_request"] }),
          "other_cpu_pct_max" => rs.map { |r| r["other_cpu_pct"] }.max
        }
      end
      by = rows.to_h { |r| [[r["server"], r["connections"]], r] }
      rows.each do |r|
        %w[nginx puma].each do |peer|
          p = by[[peer, r["connections"]]]
          r["rps_vs_#{peer}"] = p && p["rps_median"]&.positive? ? (r["rps_median"] / p["rps_median"]).round(3) : nil
        end
      end
      order = CoreOptions::ALL_SERVERS
      rows.sort_by { |r| [r["connections"], order.index(r["server"])] }
    end

    def lat_ms(runs, key)
      m = median(runs.map { |r| r["latency_us"][key] })
      m && (m / 1000.0).round(3)
    end

    # --- slow clients ----------------------------------------------------------

    def run_slow
      servers = @o.servers & %w[margay puma]
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
          "p50_ms" => median(rs.map { |r| r["latency_ms"]["p50"] }),
          "p90_ms" => median(rs.map { |r| r["latency_ms"]["p90"] }),
          "p99_ms" => median(rs.map { |r| r["latency_ms"]["p99"] }),
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
        pid = @load_pid = Process.spawn(ServerProcess.clean_env, *argv, chdir: ROOT, unsetenv_others: true, in: File::NULL,
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
                        name, run["requests"], run["errors"], ms(l["p50"]), ms(l["p99"]), ms(l["max"]),
                        run["trickle_open_at_end"], run["trickle_opened"], rss / 1024.0)
        run
      rescue StandardError => e
        @failures << { "server" => name, "scenario" => "slow", "error" => e.message, "log_tail" => server.log_tail }
        progress "  #{name} slow FAILED: #{e.message}"
        nil
      end
    end

    # --- bars, reporting ------------------------------------------------------

    def bars(result)
      out = []
      rows = result.dig("hello", "summary") || []
      at = ->(server) { rows.find { |r| r["server"] == server && r["connections"] == 64 } }
      m = at.call("margay")
      n = at.call("nginx")
      p = at.call("puma")
      out << bar("req/s at 64 connections >= 0.5x nginx", m && n && m["rps_median"] / n["rps_median"], ">= 0.5") { |v| v >= 0.5 }
      out << bar("req/s at 64 connections >= 4x Puma", m && p && m["rps_median"] / p["rps_median"], ">= 4") { |v| v >= 4 }
      out << bar("p99 at 64 connections <= Puma's", m && p && [m["p99_ms"], p["p99_ms"]], "Margay <= Puma") { |a, b| a <= b }
      out << bar("RSS after the 64-connection run <= Puma's", m && p && [m["rss_mib_median"], p["rss_mib_median"]],
                 "Margay <= Puma (MiB, median)") { |a, b| a <= b }
      slow = (result.dig("slow", "summary") || []).find { |r| r["server"] == "margay" }
      out << bar("slow clients: Margay p99 < 50 ms", slow && slow["p99_ms"], "< 50 ms") { |v| v < 50 }
      out
    end

    def bar(name, value, target)
      met = value.nil? ? nil : yield(*Array(value))
      shown = case value
              when nil then "n/a"
              when Array then value.map { |v| v.round(2) }.join(" vs ")
              else value.round(3)
              end
      { "bar" => name, "target" => target, "value" => shown, "met" => met }
    end

    def ms(v)
      return "-" if v.nil?

      v >= 100 ? format("%.0f ms", v) : format("%.2f ms", v)
    end

    def write(result)
      stamp = Time.now.utc.strftime("%Y%m%dT%H%M%SZ")
      json = JSON.pretty_generate(result)
      md = markdown(result)
      File.write(File.join(@o.results_dir, "core-#{stamp}.json"), json)
      File.write(File.join(@o.results_dir, "core-latest.json"), json)
      File.write(File.join(@o.results_dir, "core-latest.md"), md)
      puts
      puts md
      progress "results: #{File.join(@o.results_dir, "core-#{stamp}.json")} (+ core-latest.json, core-latest.md)"
    end

    def markdown(result)
      m = result["machine"]
      v = result["versions"]
      lines = []
      lines << "## Core benchmark (#{result['mode']}) — #{result['started_at']}"
      lines << ""
      lines << "Machine: #{m['nproc']} CPUs (#{m['cpu_model']}), Linux #{m['kernel']}, load average at start #{m['loadavg']}. " \
               "#{v['ruby']}. Margay #{v['margay']} (#{v['margay_commit']}), Puma #{v['puma']}, #{v['nginx']}, #{v['wrk']}."
      if (h = result["hello"])
        c = result["config"]
        lines << ""
        lines << "### Hello world (keep-alive, `wrk -t#{c['wrk_threads']} -c<N> -d#{c['duration_s']}s --timeout " \
                 "#{c['wrk_timeout_s']}s --latency -s bench/wrk/report.lua`, median of #{c['rounds']} round(s))"
        lines << ""
        lines << "Margay threads: #{h['margay_threads'] == 'default' ? "default (#{v['margay_default_threads']})" : h['margay_threads']}; " \
                 "Puma: single mode, default threads (#{v['puma_default_threads']}); nginx: 1 worker."
        lines << ""
        lines << "| conns | server | req/s | vs nginx | vs Puma | p50 | p90 | p99 | non-2xx | socket errors | RSS after (MiB) | server CPU µs/req |"
        lines << "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        noisy = h["runs"].select { |r| r["other_cpu_pct"].to_f > NOISY_PCT }
        h["summary"].each do |r|
          lines << "| #{r['connections']} | #{r['server']} | #{r['rps_median'].round} | #{ratio(r['rps_vs_nginx'])} | " \
                   "#{ratio(r['rps_vs_puma'])} | #{ms(r['p50_ms'])} | #{ms(r['p90_ms'])} | #{ms(r['p99_ms'])} | " \
                   "#{r['non2xx']} | #{r['socket_errors']} | #{r['rss_mib_median']} | #{r['server_cpu_us_per_request_median']} |"
        end
        lines << "| – | (no results) |||||||||||" if h["summary"].empty?
        lines << ""
        if h["runs"].empty?
          nil
        elsif noisy.empty?
          lines << "Other processes used at most #{h['runs'].map { |r| r['other_cpu_pct'] }.max}% of the CPUs during any run."
        else
          lines << "**Noisy:** #{noisy.size} of #{h['runs'].size} runs had other processes using > #{NOISY_PCT}% of the " \
                   "CPUs (max #{noisy.map { |r| r['other_cpu_pct'] }.max}%); treat the figures with care."
        end
      end
      if (s = result["slow"])
        c = result["config"]
        lines << ""
        lines << "### Slow clients (1 thread; #{c['slow_trickle']} trickling at 1 byte/s, #{c['slow_non_readers']} " \
                 "non-reading 16 MiB downloads; sequential GET / for #{c['slow_duration_s']}s, " \
                 "#{c['slow_request_timeout_s']}s timeout per request)"
        lines << ""
        lines << "| server | threads | requests | ok | errors | p50 | p90 | p99 | max | trickling still open | non-readers with data | RSS after (MiB) |"
        lines << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        lines << "| (no results) ||||||||||||" if s["summary"].empty?
        s["summary"].each do |r|
          lines << "| #{r['server']} | #{r['threads']} | #{r['requests']} | #{r['ok']} | #{r['errors']} | #{ms(r['p50_ms'])} | " \
                   "#{ms(r['p90_ms'])} | #{ms(r['p99_ms'])} | #{ms(r['max_ms'])} | " \
                   "#{r['trickle_open_at_end']}/#{r['trickle_opened']} | #{r['non_readers_receiving']}/#{r['non_readers_opened']} | " \
                   "#{r['rss_mib_max']} |"
        end
      end
      lines << ""
      lines << "### Bars"
      lines << ""
      lines << "| bar | target | measured | met |"
      lines << "|---|---|---|---|"
      result["bars"].each do |b|
        met = { true => "yes", false => "**no**", nil => "n/a" }[b["met"]]
        lines << "| #{b['bar']} | #{b['target']} | #{b['value']} | #{met} |"
      end
      unless result["failures"].empty?
        lines << ""
        lines << "### Failures"
        lines << ""
        result["failures"].each do |f|
          where = [f["scenario"], f["connections"] && "#{f['connections']} connections"].compact.join(", ")
          lines << "- #{f['server']} (#{where}): #{f['error']}"
        end
      end
      lines.join("\n") << "\n"
    end

    def ratio(v)
      v.nil? ? "" : format("%.2fx", v)
    end

    # --- machine and versions ---------------------------------------------------

    def machine
      cpuinfo = File.read("/proc/cpuinfo") rescue ""
      {
        "nproc" => Etc.nprocessors, "cpu_model" => cpuinfo[/^model name\s*:\s*(.*)$/, 1] || "unknown",
        "kernel" => Etc.uname[:release], "arch" => Etc.uname[:machine],
        "loadavg" => (File.read("/proc/loadavg").split.first(3).join(" ") rescue nil),
        "mem_total_kib" => (File.read("/proc/meminfo")[/^MemTotal:\s+(\d+)/, 1].to_i rescue nil),
        "somaxconn" => (File.read("/proc/sys/net/core/somaxconn").strip.to_i rescue nil),
        "nofile_limit" => Process.getrlimit(:NOFILE).first
      }
    end

    def capture(env, *argv)
      out = IO.popen(env, argv, chdir: ROOT, unsetenv_others: true, err: %i[child out], &:read)
      out.strip
    rescue SystemCallError
      nil
    end

    def versions
      env = ServerProcess.clean_env
      lock = File.read(File.join(BENCH, "Gemfile.lock")) rescue ""
      defaults = capture(env, RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-rmargay/configuration", "-e",
                         "d = Margay::Configuration::DEFAULTS; print d[:min_threads], ':', d[:max_threads]")
      {
        "ruby" => capture(env, RbConfig.ruby, "-v"),
        "margay" => File.read(File.join(ROOT, "lib/margay/version.rb"))[/VERSION\s*=\s*"([^"]+)"/, 1],
        "margay_commit" => capture(env, "git", "rev-parse", "--short", "HEAD"),
        "margay_default_threads" => defaults,
        "puma" => lock[/^    puma \(([^)]+)\)/, 1],
        "puma_default_threads" => "0:5",
        "rack_bench_bundle" => lock[/^    rack \(([^)]+)\)/, 1],
        "nginx" => Prereqs.which("nginx") && capture(env, Prereqs.which("nginx"), "-v"),
        "wrk" => Prereqs.which("wrk") && capture(env, "wrk", "-v").lines.first&.strip&.sub(/ Copyright.*/, "")
      }
    end

    def config
      {
        "servers" => @o.servers, "scenarios" => @o.scenarios, "connections" => @o.connections,
        "rounds" => @o.rounds, "duration_s" => @o.duration, "warmup_s" => @o.warmup,
        "wrk_threads" => @o.wrk_threads, "wrk_timeout_s" => @o.wrk_timeout,
        "wrk_command" => wrk_argv("<N>", @o.duration, "<PORT>").join(" "),
        "margay_threads" => @o.margay_threads || "default",
        "slow_duration_s" => @o.slow_duration, "slow_settle_s" => @o.slow_settle, "slow_rounds" => @o.slow_rounds,
        "slow_trickle" => @o.slow_trickle, "slow_non_readers" => @o.slow_non_readers,
        "slow_request_timeout_s" => @o.slow_request_timeout,
        "server_commands" => {
          "margay" => "bundle exec #{@o.margay_exe} -b tcp://127.0.0.1:PORT -e production -q " \
                      "#{@o.margay_threads ? "-t #{@o.margay_threads} " : ''}APP",
          "puma" => "BUNDLE_GEMFILE=bench/Gemfile bundle exec puma -b tcp://127.0.0.1:PORT -e production -C - -q APP",
          "nginx" => "nginx -p TMP/ -c TMP/nginx.conf -e stderr (bench/nginx/hello.conf, __PORT__ replaced)"
        }
      }
    end
  end

  ARGV_COPY = ARGV.dup.freeze
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
