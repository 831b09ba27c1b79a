#!/usr/bin/env ruby
# frozen_string_literal: true

# bench/run.rb: the comparative benchmark suite. Margay against the peer Rack servers in
# bench/Gemfile, over several workloads and a concurrency sweep, plus capacity under a
# latency SLO at a fixed arrival rate. One command re-runs every published figure.
#
#   bench/run.rb                  full run (see --help for the defaults)
#   bench/run.rb --quick          smoke run (< 3 min)
#   bench/run.rb --servers margay,puma --workloads hello,io --concurrency 16,64
#   bench/run.rb --report-only bench/results/suite-latest.json   # redo Markdown + charts
#
# Per repeat, per workload, per server (order rotated every repeat so drift hits all
# alike): start the server fresh, then for each concurrency a discarded warm-up and a
# measured wrk run (RSS/PSS of every server process sampled from /proc/PID/smaps_rollup
# meanwhile, server CPU time read before and after), then (for the SLO workloads) the
# capacity probes with bench/lib/arrival.rb, then stop the server. Medians over repeats.
#
# Results: bench/results/suite-<timestamp>.json, suite-latest.json, suite-latest.md;
# charts (SVG) in docs/charts/ with --charts (default for full runs). Exit status:
# 0 done, 1 some measurement failed, 2 a prerequisite is missing, 64 bad usage.

require "etc"
require "fileutils"
require "json"
require "optparse"
require "rbconfig"
require "time"
require "tmpdir"
require_relative "lib/procs"
require_relative "lib/suite_servers"
require_relative "lib/svg"

module MargayBench
  BENCH = File.join(ROOT, "bench") unless const_defined?(:BENCH)

  # The workloads: rackup file, path, wrk extras.
  WORKLOADS = {
    "hello" => { app: "bench/apps/hello.ru", path: "/", what: "13-byte `Hello, World!`" },
    "realistic" => { app: "bench/apps/rails/config.ru", path: "/",
                     what: "Rails 7.2 + ActiveRecord/SQLite: 2 queries + ERB template with layout (~2.5 KB)" },
    "io" => { app: "bench/apps/io.ru", path: "/", what: "sleep 10 ms + build a 2 KB JSON body" },
    "cpu" => { app: "bench/apps/cpu.ru", path: "/", what: "~5 ms of pure Ruby (fixed 72k-iteration loop)" },
    "big" => { app: "bench/apps/big.ru", path: "/", what: "1 MiB response body" },
    "upload" => { app: "bench/apps/upload.ru", path: "/", what: "8 MiB POST body, read fully by the app",
                  upload_bytes: 8 * 1024 * 1024 },
    "slow" => { app: "bench/apps/slow_clients.ru", path: "/",
                what: "hello, while extra connections (25% of N) trickle request heads at 1 byte/s " \
                      "and N/16 never read a 16 MiB response (bench/slow_clients.rb)" }
  }.freeze

  class SuiteOptions
    FULL = { repeats: 3, duration: 5, warmup: 1, concurrency: [1, 4, 16, 64, 256],
             workloads: WORKLOADS.keys, slo_duration: 5, charts: true }.freeze
    QUICK = { repeats: 1, duration: 1, warmup: 1, concurrency: [4, 64], workloads: %w[hello realistic],
              slo_duration: 1.5, slo_probes: 1, charts: false }.freeze

    attr_accessor :mode, :servers, :workloads, :concurrency, :repeats, :duration, :warmup, :wrk_timeout,
                  :slo_workloads, :slo_p99_ms, :slo_duration, :slo_probes, :slo_max_rate, :charts,
                  :results_dir, :charts_dir, :report_only, :noise_pct, :start_timeout, :update_docs

    def initialize(argv)
      @mode = "full"
      @servers = nil
      @wrk_timeout = 5
      @slo_workloads = %w[realistic io cpu]
      @slo_p99_ms = 100.0
      @slo_probes = nil
      @slo_max_rate = 2500
      @results_dir = File.join(BENCH, "results")
      @charts_dir = File.join(ROOT, "docs", "charts")
      @noise_pct = 5.0
      @start_timeout = 60
      @update_docs = false
      overrides = {}
      parser(overrides).parse!(argv)
      raise OptionParser::InvalidArgument, "unexpected argument(s): #{argv.join(' ')}" unless argv.empty?

      (@mode == "quick" ? QUICK : FULL).merge(overrides).each { |k, v| public_send(:"#{k}=", v) }
      @slo_probes ||= 5
      raise OptionParser::InvalidArgument, "--slo-probes must be at least 1" if @slo_probes < 1
      @servers ||= SuiteServers::ALL.dup
      bad = @servers - SuiteServers::ALL
      raise OptionParser::InvalidArgument, "unknown server(s) #{bad.join(', ')}" unless bad.empty?
      bad = @workloads - WORKLOADS.keys
      raise OptionParser::InvalidArgument, "unknown workload(s) #{bad.join(', ')}" unless bad.empty?
      raise OptionParser::InvalidArgument, "durations must be <= 60 s" if @duration > 60 || @slo_duration > 60
    end

    private

    def parser(ov)
      OptionParser.new do |o|
        o.banner = "usage: bench/run.rb [--quick] [options]"
        o.on("--quick", "smoke mode: 1 repeat, 1 s runs, concurrency 4,64, hello + realistic, one SLO probe, no charts (< 3 min)") do
          @mode = "quick"
        end
        o.on("--servers LIST", Array, "subset of #{SuiteServers::ALL.join(',')} (default: all)") { |v| @servers = v }
        o.on("--workloads LIST", Array, "subset of #{WORKLOADS.keys.join(',')} (full: all)") { |v| ov[:workloads] = v }
        o.on("--concurrency LIST", Array, "connection counts (full 1,4,16,64,256)") do |v|
          ov[:concurrency] = v.map { |c| Integer(c) }
        end
        o.on("--repeats N", Integer, "repeats, server order rotated each time (full 3)") { |v| ov[:repeats] = v }
        o.on("--duration S", Integer, "seconds per measured wrk run (full 5)") { |v| ov[:duration] = v }
        o.on("--warmup S", Integer, "seconds of discarded warm-up per concurrency (full 1; 0: none)") { |v| ov[:warmup] = v }
        o.on("--wrk-timeout S", Integer, "wrk --timeout (default 5)") { |v| @wrk_timeout = v }
        o.on("--slo-workloads LIST", Array, "workloads with a capacity search (default realistic,io,cpu; 'none')") do |v|
          @slo_workloads = v == ["none"] ? [] : v
        end
        o.on("--slo-p99-ms MS", Float, "the SLO: p99 latency bound (default 100)") { |v| @slo_p99_ms = v }
        o.on("--slo-duration S", Float, "seconds per arrival-rate probe (full 5)") { |v| ov[:slo_duration] = v }
        o.on("--slo-probes N", Integer, "arrival-rate probes per capacity search: the best closed-loop req/s, then bisection (default 5)") do |v|
          ov[:slo_probes] = v
        end
        o.on("--slo-max-rate R", Integer, "cap on probe rates (the Ruby client's own limit; default 2500)") do |v|
          @slo_max_rate = v
        end
        o.on("--[no-]charts", "write SVG charts to docs/charts (full: yes, quick: no)") { |v| ov[:charts] = v }
        o.on("--charts-dir DIR", "where the SVG charts go (default docs/charts)") { |v| @charts_dir = File.expand_path(v) }
        o.on("--update-docs", "replace the suite section of docs/BENCHMARKS.md with this run's report") do
          @update_docs = true
        end
        o.on("--results-dir DIR", "where the JSON and Markdown go (default bench/results)") do |v|
          @results_dir = File.expand_path(v)
        end
        o.on("--report-only JSON", "no measuring: rebuild Markdown (and charts) from a results file") do |v|
          @report_only = File.expand_path(v)
        end
      end
    end
  end

  class Suite
    def initialize(opts)
      @o = opts
      @t0 = Procs.now
      @failures = []
      @live = []
      @broken = {}
      @done = 0
    end

    def run
      return report_only if @o.report_only

      problems = prerequisites
      unless problems.empty?
        warn "bench/run.rb: cannot run, missing prerequisites:"
        problems.each { |p| warn "  - #{p}" }
        return 2
      end
      FileUtils.mkdir_p(@o.results_dir)
      @tmp = Dir.mktmpdir("margay-suite-")
      trap_signals
      @env = Env.clean.merge("BUNDLE_GEMFILE" => File.join(BENCH, "Gemfile"), "RACK_ENV" => "production",
                             "RAILS_ENV" => "production", "APP_ENV" => "production",
                             "BENCH_RAILS_DB" => File.join(@tmp, "rails.sqlite3"))
      @budget = SuiteServers.budget(Etc.nprocessors)
      @unavailable = unavailable_servers
      @servers = @o.servers - @unavailable.map { |u| u["server"] }
      load1 = Procs.loadavg&.first
      progress "WARNING: load average #{load1} before starting; runs are flagged NOISY when other processes use " \
               "> #{@o.noise_pct}% of the CPUs" if load1 && load1 > 0.5
      progress "mode #{@o.mode}: servers #{@servers.join(',')}; workloads #{@o.workloads.join(',')}; " \
               "concurrency #{@o.concurrency.join(',')}; #{@o.repeats} repeat(s) x #{@o.duration}s (+#{@o.warmup}s warm-up)"
      @unavailable.each { |u| progress "not run: #{u['server']}: #{u['reason']}" }
      seed_rails if @o.workloads.include?("realistic")
      result = {
        "schema" => 1, "benchmark" => "suite", "mode" => @o.mode, "started_at" => Time.now.utc.iso8601,
        "argv" => ARGV_COPY, "machine" => machine, "versions" => versions, "config" => config,
        "servers_run" => @servers, "servers_unavailable" => @unavailable
      }
      runs, probes = measure_all
      result["runs"] = runs
      result["capacity_probes"] = probes
      result["summary"] = summarize(runs)
      result["capacity"] = summarize_capacity(probes)
      result["failures"] = @failures
      result["finished_at"] = Time.now.utc.iso8601
      result["elapsed_s"] = (Procs.now - @t0).round(1)
      write(result)
      @failures.empty? ? 0 : 1
    ensure
      @live.each(&:stop)
      if @tmp
        @failures.empty? ? FileUtils.rm_rf(@tmp) : warn("bench/run.rb: server logs kept in #{@tmp}")
      end
    end

    private

    # --- setup ----------------------------------------------------------------

    def prerequisites
      problems = []
      problems << "wrk not found: `sudo apt-get install wrk`" unless Env.which("wrk")
      problems << "bundler not found: `sudo apt-get install ruby-bundler`" unless Env.which("bundle")
      if Dir.glob(File.join(ROOT, "lib", "margay", "margay_native.*")).empty?
        problems << "Margay's native extension is not built: `bundle install && bundle exec rake compile`"
      end
      env = Env.clean.merge("BUNDLE_GEMFILE" => File.join(BENCH, "Gemfile"))
      ok = system(env, "bundle", "check", unsetenv_others: true, chdir: ROOT, %i[out err] => File::NULL)
      problems << "the bench bundle is not installed: `bundle install --gemfile bench/Gemfile`" unless ok
      problems
    end

    # Servers that cannot run here, with the reason (never dropped silently).
    def unavailable_servers
      lock = File.read(File.join(BENCH, "Gemfile.lock"))
      @o.servers.filter_map do |s|
        if SuiteServers::KNOWN_UNAVAILABLE[s]
          { "server" => s, "reason" => SuiteServers::KNOWN_UNAVAILABLE[s] }
        elsif !lock.match?(/^    #{SuiteServers::GEM[s]} \(/)
          { "server" => s, "reason" => "not in bench/Gemfile.lock" }
        end
      end
    end

    def seed_rails
      progress "realistic: creating the SQLite database (#{@env['BENCH_RAILS_DB']})"
      ok = system(@env, "bundle", "exec", "ruby", "-e", 'require "./bench/apps/rails/config/environment"; ' \
                                                       'puts "posts: #{Post.count}, authors: #{Author.count}"',
                  unsetenv_others: true, chdir: ROOT, in: File::NULL)
      raise "could not set up bench/apps/rails (see above)" unless ok
    end

    def progress(msg)
      $stdout.puts format("[suite %6.1fs] %s", Procs.now - @t0, msg)
      $stdout.flush
    end

    def trap_signals
      %w[INT TERM].each do |sig|
        trap(sig) do
          Thread.new do
            [@load_pid, @slow_pid].compact.each { |pid| Procs.stop(pid, grace: 2) }
            @live.each(&:stop)
            FileUtils.rm_rf(@tmp) if @tmp
            warn "bench/run.rb: interrupted, load generators and servers stopped"
            exit!(130)
          end
        end
      end
    end

    # --- measuring --------------------------------------------------------------

    def measure_all
      runs = []
      probes = []
      total = @o.repeats * @o.workloads.size * @servers.size
      n = 0
      @o.repeats.times do |rep|
        @o.workloads.each_with_index do |wl, wi|
          @servers.rotate(rep + wi).each do |server|
            n += 1
            progress "#{n}/#{total}: repeat #{rep + 1}, #{wl}, #{server}"
            r, p = session(server, wl, rep + 1)
            runs.concat(r)
            probes.concat(p)
          end
        end
      end
      [runs, probes]
    end

    # One fresh server: the concurrency sweep, then the capacity probes.
    def session(server, wl, rep)
      if @broken[[server, wl]]
        progress "  #{server} skipped for #{wl}: it failed to start earlier"
        return [[], []]
      end
      spec = WORKLOADS.fetch(wl)
      inst = SuiteServers::Instance.new(server, app: spec[:app], path: spec[:path], tmp: @tmp, budget: @budget,
                                                env: @env, start_timeout: @o.start_timeout)
      @live << inst
      begin
        inst.start
      rescue StandardError => e
        @broken[[server, wl]] = true
        @failures << { "server" => server, "workload" => wl, "repeat" => rep, "error" => "start: #{brief(e)}",
                       "command" => inst.command, "log_tail" => inst.log_tail }
        progress "  #{server} FAILED to start: #{brief(e)}\n#{inst.log_tail.gsub(/^/, '    | ')}"
        return [[], []]
      end
      runs = []
      @o.concurrency.each do |c|
        run = measure(inst, wl, spec, c, rep)
        runs << run if run
        next if Procs.alive?(inst.pid)

        crash = inst.log_tail(200).lines.find { |line| line.include?("[BUG]") || line =~ /Segmentation|Aborted/ }
        @failures << { "server" => server, "workload" => wl, "concurrency" => c, "repeat" => rep,
                       "error" => "server process exited during the c=#{c} run#{crash ? ": #{crash.strip[0, 200]}" : ''}; " \
                                  "the rest of this session is skipped", "log_tail" => inst.log_tail }
        progress "  #{server} CRASHED during #{wl} c=#{c}#{crash ? " (#{crash.strip[0, 160]})" : ''}; skipping the rest of the session"
        return [runs, []]
      end
      probes = @o.slo_workloads.include?(wl) ? capacity(inst, wl, spec, runs, rep) : []
      [runs, probes]
    ensure
      if inst
        how = inst.stop
        @live.delete(inst)
        progress "  #{server} needed SIGKILL to stop" if how == :kill
      end
    end

    def wrk_argv(conns, seconds, port, path)
      ["wrk", "-t#{conns.is_a?(Integer) ? [2, conns].min : 2}", "-c#{conns}", "-d#{seconds}s", "--timeout", "#{@o.wrk_timeout}s", "--latency",
       "-s", "bench/wrk/report.lua", "http://127.0.0.1:#{port}#{path}"]
    end

    def run_wrk(conns, seconds, port, spec)
      argv = wrk_argv(conns, seconds, port, spec[:path])
      env = { "BENCH_UPLOAD_BYTES" => spec[:upload_bytes].to_s }
      out_path = File.join(@tmp, "wrk.out")
      pid = @load_pid = Process.spawn(env, *argv, chdir: ROOT, in: File::NULL, %i[out err] => [out_path, "w"])
      bound = seconds.ceil + @o.wrk_timeout + 30
      status = Procs.wait(pid, bound)
      @load_pid = nil
      unless status
        Procs.stop(pid, grace: 2)
        raise "wrk did not finish within #{bound}s"
      end
      out = File.read(out_path)
      json = out[/^BENCH_JSON (.*)$/, 1]
      raise "wrk failed (#{status}): #{out.lines.last(5).join}" unless json

      data = JSON.parse(json)
      data["command"] = (spec[:upload_bytes] ? ["BENCH_UPLOAD_BYTES=#{spec[:upload_bytes]}"] : []).concat(argv).join(" ")
      data
    end

    # Slow clients for the "slow" workload, alongside the measured wrk run.
    def start_slow_clients(port, conns, seconds)
      trickle = [conns / 4, 1].max
      non_readers = conns / 16
      argv = [RbConfig.ruby, "bench/slow_clients.rb", "--port", port.to_s, "--trickle", trickle.to_s,
              "--non-readers", non_readers.to_s, "--duration", (seconds + 1).ceil.to_s, "--settle", "1",
              "--request-timeout", "5", "--json", "--quiet"]
      @slow_out = File.join(@tmp, "slow.out")
      @slow_pid = Process.spawn(Env.clean, *argv, chdir: ROOT, unsetenv_others: true, in: File::NULL,
                                                  out: [@slow_out, "w"], err: [File.join(@tmp, "slow.err"), "w"])
      sleep 1 # the slow connections are open before the measured run starts
      { "trickle" => trickle, "non_readers" => non_readers, "command" => argv.drop(1).join(" ").sub(/--port \d+/, "--port PORT") }
    end

    def finish_slow_clients(seconds)
      status = Procs.wait(@slow_pid, seconds + 70)
      Procs.stop(@slow_pid, grace: 2) unless status
      @slow_pid = nil
      data = (JSON.parse(File.read(@slow_out)) rescue nil) # rubocop:disable Style/RescueModifier
      data && data.slice("requests", "errors", "latency_ms", "trickle_opened", "trickle_open_at_end",
                         "non_readers_opened", "non_readers_receiving")
    end

    def measure(inst, wl, spec, conns, rep)
      slow = nil
      total_s = @o.warmup + @o.duration
      slow = start_slow_clients(inst.port, conns, total_s) if wl == "slow"
      run_wrk(conns, @o.warmup, inst.port, spec) if @o.warmup.positive?
      load_before = Procs.loadavg
      cpu_before = Procs.cpu_s(inst.pid)
      sys_before = Procs.system_busy_s
      wrk_before = Procs.reaped_children_cpu_s
      sampler = Memory::Sampler.new(inst.pid, interval: [@o.duration / 10.0, 0.5].min)
      data = run_wrk(conns, @o.duration, inst.port, spec)
      mem = sampler.stop
      cpu = (Procs.cpu_s(inst.pid) - cpu_before).round(2)
      wrk_cpu = (Procs.reaped_children_cpu_s - wrk_before).round(2)
      secs = data["duration_us"] / 1e6
      other = [Procs.system_busy_s - sys_before - cpu - wrk_cpu, 0].max
      other_pct = (100.0 * other / (Etc.nprocessors * secs)).round(1)
      slow_result = finish_slow_clients(total_s) if slow
      e = data["errors"]
      run = {
        "server" => inst.name, "workload" => wl, "concurrency" => conns, "repeat" => rep,
        "server_command" => inst.command, "startup_s" => inst.startup_s, "wrk_command" => data["command"],
        "requests" => data["requests"], "duration_s" => secs.round(3), "rps" => (data["requests"] / secs).round(1),
        "bytes" => data["bytes"], "latency_us" => data["latency_us"],
        "non2xx" => e["status"], "timeouts" => e["timeout"], "socket_errors" => e["connect"] + e["read"] + e["write"],
        "errors" => e, "memory" => mem, "server_cpu_s" => cpu,
        "server_cpu_us_per_request" => data["requests"].positive? ? (cpu * 1e6 / data["requests"]).round(1) : nil,
        "wrk_cpu_s" => wrk_cpu, "other_cpu_pct" => other_pct, "loadavg_before" => load_before
      }
      run["slow_clients"] = slow.merge("result" => slow_result) if slow
      l = run["latency_us"]
      progress format("  %-9s %-9s c=%-3d %9.0f req/s  p50 %s p99 %s max %s  err %d/%d/%d  PSS %.0f MiB  " \
                      "CPU %.1fs  other %.0f%%%s",
                      inst.name, wl, conns, run["rps"], ms(l["p50"] / 1000.0), ms(l["p99"] / 1000.0),
                      ms(l["max"] / 1000.0), run["non2xx"], run["timeouts"], run["socket_errors"],
                      mem["pss_kib_max"].to_i / 1024.0, cpu, other_pct, other_pct > @o.noise_pct ? " NOISY" : "")
      run
    rescue StandardError => e
      finish_slow_clients(0) if @slow_pid
      @failures << { "server" => inst.name, "workload" => wl, "concurrency" => conns, "repeat" => rep,
                     "error" => brief(e), "log_tail" => inst.log_tail }
      progress "  #{inst.name} #{wl} c=#{conns} FAILED: #{brief(e)}"
      nil
    end

    # Capacity under the SLO: the highest fixed arrival rate whose p99 stays under the SLO.
    # The first probe runs at the best closed-loop req/s of this session (capped at the
    # client's limit); if it misses, the rate is bisected between the highest rate that met
    # the SLO so far (0 at first) and the lowest that missed, for --slo-probes probes in all.
    # Every server gets the same number of probes and the same relative resolution (1/16 of
    # its best with 5 probes), and a server whose closed-loop best is high is not charged for
    # it: a miss at a high rate only moves the search down.
    PROBE_SETTLE = 1.0

    def capacity(inst, wl, spec, runs, rep)
      best = runs.map { |r| r["rps"] }.max
      return [] unless best&.positive?

      top = [best.round, @o.slo_max_rate].min
      met_rate = 0
      missed_rate = nil
      probes = []
      @o.slo_probes.times do
        rate = missed_rate ? ((met_rate + missed_rate) / 2.0).round : top
        break if rate <= met_rate || rate <= 0 || probes.any? { |p| p["rate"] == rate }

        sleep PROBE_SETTLE unless probes.empty? # let the server drain what an overloaded probe left queued
        probe = arrival_probe(inst, wl, spec, rate, rep, best)
        break unless probe

        probes << probe
        break if probe["met"] && rate == top

        probe["met"] ? met_rate = rate : missed_rate = rate
      end
      probes
    end

    # One open-model run of bench/lib/arrival.rb at +rate+; the probe's record, or nil if
    # the client failed.
    def arrival_probe(inst, wl, spec, rate, rep, best)
      argv = [RbConfig.ruby, "bench/lib/arrival.rb", "--port", inst.port.to_s, "--path", spec[:path],
              "--rate", rate.to_s, "--duration", @o.slo_duration.to_s, "--connections", "256",
              "--timeout", "5", "--json"]
      out_path = File.join(@tmp, "arrival.out")
      pid = @load_pid = Process.spawn(Env.clean, *argv, chdir: ROOT, unsetenv_others: true, in: File::NULL,
                                                        out: [out_path, "w"], err: [File.join(@tmp, "arrival.err"), "w"])
      status = Procs.wait(pid, @o.slo_duration + 30)
      @load_pid = nil
      Procs.stop(pid, grace: 2) unless status
      data = status&.success? ? JSON.parse(File.read(out_path)) : nil
      unless data
        @failures << { "server" => inst.name, "workload" => wl, "error" => "arrival.rb failed at #{rate}/s",
                       "stderr" => File.read(File.join(@tmp, "arrival.err"))[-2000..] }
        return nil
      end
      p99 = data.dig("latency_ms", "p99")
      met = data["errors"].zero? && data["dropped"].zero? && p99 && p99 <= @o.slo_p99_ms &&
            data["achieved_rate"] >= 0.95 * rate
      progress format("  %-9s %-9s open model %5d/s: achieved %.0f/s, p99 %s, errors %d, dropped %d -> %s",
                      inst.name, wl, rate, data["achieved_rate"], ms(p99), data["errors"], data["dropped"],
                      met ? "meets SLO" : "misses SLO")
      { "server" => inst.name, "workload" => wl, "repeat" => rep, "rate" => rate, "met" => met,
        "capped" => rate == @o.slo_max_rate, "best_closed_loop_rps" => best,
        "command" => argv.drop(1).join(" ").sub(/--port \d+/, "--port PORT") }.merge(data)
    end

    def ms(v)
      return "-" if v.nil?

      v >= 100 ? format("%.0f ms", v) : format("%.2f ms", v)
    end

    def brief(err)
      "#{err.class}: #{err.message.lines.first.to_s.strip[0, 300]}"
    end

    # --- summaries ----------------------------------------------------------------

    def median(values)
      v = values.compact.sort
      return nil if v.empty?

      v.size.odd? ? v[v.size / 2] : (v[v.size / 2 - 1] + v[v.size / 2]) / 2.0
    end

    def summarize(runs)
      runs.group_by { |r| [r["workload"], r["server"], r["concurrency"]] }.map do |(wl, server, conns), rs|
        lat = ->(k) { median(rs.map { |r| r["latency_us"][k] })&./(1000.0)&.round(3) }
        {
          "workload" => wl, "server" => server, "concurrency" => conns, "repeats" => rs.size,
          "requests" => rs.sum { |r| r["requests"] }, "rps_median" => median(rs.map { |r| r["rps"] })&.round(1),
          "rps_all" => rs.map { |r| r["rps"] },
          "p50_ms" => lat.call("p50"), "p95_ms" => lat.call("p95"), "p99_ms" => lat.call("p99"),
          "max_ms" => (rs.map { |r| r["latency_us"]["max"] }.max / 1000.0).round(3),
          "non2xx" => rs.sum { |r| r["non2xx"] }, "timeouts" => rs.sum { |r| r["timeouts"] },
          "socket_errors" => rs.sum { |r| r["socket_errors"] },
          "rss_mib" => mib(median(rs.map { |r| r.dig("memory", "rss_kib_max") })),
          "pss_mib" => mib(median(rs.map { |r| r.dig("memory", "pss_kib_max") })),
          "processes" => median(rs.map { |r| r.dig("memory", "processes_at_peak")&.size }),
          "server_cpu_us_per_request" => median(rs.map { |r| r["server_cpu_us_per_request"] }),
          "other_cpu_pct_max" => rs.map { |r| r["other_cpu_pct"] }.max
        }
      end.sort_by { |r| [WORKLOADS.keys.index(r["workload"]), r["concurrency"], SuiteServers::ALL.index(r["server"])] }
    end

    def mib(kib)
      kib && (kib / 1024.0).round(1)
    end

    # Per repeat: the highest probed rate that met the SLO (0 if even the first missed);
    # median over repeats.
    def summarize_capacity(probes)
      probes.group_by { |p| [p["workload"], p["server"]] }.map do |(wl, server), ps|
        per_rep = ps.group_by { |p| p["repeat"] }.transform_values do |rp|
          rp.select { |p| p["met"] }.map { |p| p["rate"] }.max || 0
        end
        capped = ps.any? { |p| p["met"] && p["capped"] }
        all_met = ps.group_by { |p| p["repeat"] }.values.all? { |rp| rp.all? { |p| p["met"] } }
        {
          "workload" => wl, "server" => server, "slo_p99_ms" => @o.slo_p99_ms,
          "capacity_rps_median" => median(per_rep.values), "capacity_rps_per_repeat" => per_rep.values,
          "capped_by_client" => capped, "all_probes_met" => all_met
        }
      end.sort_by { |r| [WORKLOADS.keys.index(r["workload"]), SuiteServers::ALL.index(r["server"])] }
    end

    # --- output -------------------------------------------------------------------

    def write(result)
      stamp = Time.now.utc.strftime("%Y%m%dT%H%M%SZ")
      result["charts"] = @o.charts ? write_charts(result) : []
      json = JSON.pretty_generate(result)
      md = Report.new(result).markdown
      File.write(File.join(@o.results_dir, "suite-#{stamp}.json"), json)
      File.write(File.join(@o.results_dir, "suite-latest.json"), json)
      File.write(File.join(@o.results_dir, "suite-latest.md"), md)
      Report.update_docs(Report.new(result).markdown(full: false)) if @o.update_docs
      puts
      puts md
      progress "results: #{File.join(@o.results_dir, "suite-#{stamp}.json")} (+ suite-latest.json, suite-latest.md)"
    end

    def report_only
      result = JSON.parse(File.read(@o.report_only))
      result["charts"] = write_charts(result) if @o.charts
      md = Report.new(result).markdown
      File.write(File.join(File.dirname(@o.report_only), "suite-latest.md"), md)
      Report.update_docs(Report.new(result).markdown(full: false)) if @o.update_docs
      puts md
      0
    end

    def write_charts(result)
      FileUtils.mkdir_p(@o.charts_dir)
      Charts.new(result, @o.charts_dir).write_all.map { |p| p.delete_prefix("#{ROOT}/") }
    end

    # --- machine, versions, config ------------------------------------------------

    def machine
      cpuinfo = File.read("/proc/cpuinfo") rescue "" # rubocop:disable Style/RescueModifier
      {
        "nproc" => Etc.nprocessors, "cpu_model" => cpuinfo[/^model name\s*:\s*(.*)$/, 1] || "unknown",
        "kernel" => Etc.uname[:release], "arch" => Etc.uname[:machine], "hostname" => Etc.uname[:nodename],
        "loadavg" => Procs.loadavg&.join(" "),
        "mem_total_kib" => File.read("/proc/meminfo")[/^MemTotal:\s+(\d+)/, 1].to_i,
        "somaxconn" => (File.read("/proc/sys/net/core/somaxconn").strip.to_i rescue nil), # rubocop:disable Style/RescueModifier
        "nofile_limit" => Process.getrlimit(:NOFILE).first
      }
    end

    def capture(*argv)
      IO.popen(Env.clean, argv, chdir: ROOT, unsetenv_others: true, err: %i[child out], &:read).strip
    rescue SystemCallError
      nil
    end

    def versions
      lock = File.read(File.join(BENCH, "Gemfile.lock"))
      {
        "ruby" => capture(RbConfig.ruby, "-v"),
        "margay_commit" => capture("git", "rev-parse", "--short", "HEAD"),
        "servers" => SuiteServers.versions(lock).merge(
          "margay" => File.read(File.join(ROOT, "lib/margay/version.rb"))[/VERSION\s*=\s*"([^"]+)"/, 1]
        ),
        "rack" => lock[/^    rack \(([^)]+)\)/, 1], "rails" => lock[/^    railties \(([^)]+)\)/, 1],
        "sqlite3" => lock[/^    sqlite3 \(([^)]+)\)/, 1],
        "wrk" => capture("wrk", "-v").lines.first&.strip&.sub(/ Copyright.*/, "")
      }
    end

    def config
      {
        "servers" => @o.servers, "workloads" => @o.workloads, "concurrency" => @o.concurrency, "repeats" => @o.repeats,
        "duration_s" => @o.duration, "warmup_s" => @o.warmup, "wrk_timeout_s" => @o.wrk_timeout,
        "wrk_command" => wrk_argv("<N>", @o.duration, "<PORT>", "/").join(" ").sub("-t2", "-t<min(2,N)>"),
        "slo_workloads" => @o.slo_workloads & @o.workloads, "slo_p99_ms" => @o.slo_p99_ms,
        "slo_duration_s" => @o.slo_duration, "slo_probes" => @o.slo_probes, "slo_max_rate" => @o.slo_max_rate,
        "noise_pct" => @o.noise_pct, "budget" => @budget,
        "workloads_detail" => @o.workloads.to_h { |w| [w, WORKLOADS[w].transform_keys(&:to_s)] },
        "server_commands" => @servers.to_h do |s|
          argv, = SuiteServers.command(s, port: "PORT", app: "APP", tmp: @tmp, w: @budget["w"], t: @budget["t"])
          [s, "BUNDLE_GEMFILE=bench/Gemfile RACK_ENV=production #{argv.join(' ')}"]
        end
      }
    end
  end

  # The SVG charts of one result.
  class Charts
    def initialize(result, dir)
      @r = result
      @dir = dir
      order = SuiteServers::ALL
      @servers = (@r["servers_run"] || []).sort_by { |s| order.index(s) }
      @color = @servers.each_with_index.to_h { |s, i| [s, Svg::PALETTE[i % Svg::PALETTE.size]] }
    end

    def write_all
      files = []
      rows = @r["summary"]
      rows.map { |x| x["workload"] }.uniq.each do |wl|
        wr = rows.select { |x| x["workload"] == wl }
        files << put("suite-#{wl}-throughput.svg", Svg.line_chart(
          title: "#{wl}: throughput vs concurrency (median of #{@r.dig('config', 'repeats')})",
          xlabel: "concurrent connections (wrk -c)", ylabel: "requests/s",
          series: series(wr, "rps_median")
        ))
        lat = series(wr, "p99_ms").map { |s| s.merge(name: "#{s[:name]} p99") } +
              series(wr, "p50_ms").map { |s| s.merge(name: "#{s[:name]} p50", dash: true) }
        files << put("suite-#{wl}-latency.svg", Svg.line_chart(
          title: "#{wl}: latency vs concurrency (solid p99, dashed p50; log scale)",
          xlabel: "concurrent connections (wrk -c)", ylabel: "latency (ms)", series: lat, ylog: true, width: 820
        ))
      end
      files << put("suite-memory.svg", memory_chart(rows))
      files << put("suite-capacity.svg", capacity_chart) unless (@r["capacity"] || []).empty?
      files
    end

    private

    def series(rows, key)
      @servers.filter_map do |s|
        pts = rows.select { |x| x["server"] == s }.sort_by { |x| x["concurrency"] }.map { |x| [x["concurrency"], x[key]] }
        next if pts.empty?

        { name: s, points: pts, color: @color[s], bold: s == "margay" }
      end
    end

    # Peak PSS of all server processes (median over repeats), per server, at the highest
    # concurrency of each workload.
    def memory_chart(rows)
      wls = rows.map { |x| x["workload"] }.uniq
      top = rows.map { |x| x["concurrency"] }.max
      groups = @servers.map do |s|
        { name: s, values: wls.to_h { |w| [w, rows.find { |x| x["server"] == s && x["workload"] == w && x["concurrency"] == top }&.dig("pss_mib")] }.compact }
      end
      Svg.bar_chart(title: "Memory: peak PSS of all server processes at c=#{top} (MiB)",
                    xlabel: "MiB (PSS, sum over master + workers)", groups: groups, series: wls)
    end

    def capacity_chart
      cap = @r["capacity"]
      wls = cap.map { |c| c["workload"] }.uniq
      groups = wls.map do |w|
        { name: w, values: @servers.to_h { |s| [s, cap.find { |c| c["server"] == s && c["workload"] == w }&.dig("capacity_rps_median")] }.compact }
      end
      Svg.bar_chart(title: "Capacity: highest arrival rate with p99 <= #{@r.dig('config', 'slo_p99_ms')} ms (req/s)",
                    xlabel: "requests/s (open model, bench/lib/arrival.rb)", groups: groups, series: @servers)
    end

    def put(name, svg)
      path = File.join(@dir, name)
      File.write(path, svg)
      path
    end
  end

  # The Markdown report of one result.
  class Report
    BEGIN_MARK = "<!-- bench/run.rb suite: begin (generated by `bench/run.rb --update-docs`) -->"
    END_MARK = "<!-- bench/run.rb suite: end -->"

    def self.update_docs(md)
      path = File.join(ROOT, "docs", "BENCHMARKS.md")
      doc = File.read(path)
      block = "#{BEGIN_MARK}\n#{md}#{END_MARK}\n"
      doc = if doc.include?(BEGIN_MARK) && doc.include?(END_MARK)
              doc.sub(/#{Regexp.escape(BEGIN_MARK)}.*#{Regexp.escape(END_MARK)}\n?/m) { block }
            else
              "#{doc.chomp}\n\n#{block}"
            end
      File.write(path, doc)
    end

    def initialize(result)
      @r = result
    end

    def ms(v)
      return "–" if v.nil?

      v >= 100 ? format("%.0f", v) : format("%.2f", v)
    end

    # full: false (for docs/BENCHMARKS.md) leaves out the per-workload tables.
    def markdown(full: true)
      c = @r["config"]
      m = @r["machine"]
      v = @r["versions"]
      l = []
      l << "### Suite results (#{@r['mode']} mode), #{@r['started_at']}"
      l << ""
      l << "Machine: #{m['nproc']} CPUs (#{m['cpu_model']}), #{(m['mem_total_kib'] / 1048576.0).round(1)} GiB, " \
           "Linux #{m['kernel']}, load average at start #{m['loadavg']}. #{v['ruby']}. Margay #{v.dig('servers', 'margay')} " \
           "(#{v['margay_commit']}), rack #{v['rack']}, Rails #{v['rails']}, sqlite3 gem #{v['sqlite3']}, #{v['wrk']}. " \
           "#{c['repeats']} repeat(s) x #{c['duration_s']} s per point (+ #{c['warmup_s']} s warm-up), " \
           "elapsed #{(@r['elapsed_s'].to_f / 60).round(1)} min."
      l << ""
      l << "Servers: " + @r["servers_run"].map { |s| "#{s} #{v.dig('servers', s)} (#{c.dig('budget', s)})" }.join("; ") + "."
      unless @r["servers_unavailable"].empty?
        l << ""
        l << "Not run: " + @r["servers_unavailable"].map { |u| "**#{u['server']}**: #{u['reason']}" }.join(" ")
      end
      runs = @r["runs"]
      noisy = runs.select { |x| x["other_cpu_pct"].to_f > c["noise_pct"] }
      l << ""
      l << if runs.empty?
             "No runs."
           elsif noisy.empty?
             "Other processes used at most #{runs.map { |x| x['other_cpu_pct'] }.max}% of the CPUs during any measured run."
           else
             "**Noisy:** #{noisy.size} of #{runs.size} measured runs had other processes using > #{c['noise_pct']}% of " \
               "the CPUs (max #{noisy.map { |x| x['other_cpu_pct'] }.max}%)."
           end
      headline(l)
      capacity(l)
      if full
        per_workload(l)
      else
        l << ""
        l << "Every figure per workload and concurrency (req/s, p50/p95/p99/max, errors, RSS, PSS, CPU/request): " \
             "`bench/results/suite-latest.md`; raw data: `bench/results/suite-latest.json`."
      end
      charts(l)
      failures(l)
      l.join("\n") << "\n"
    end

    private

    def headline(l)
      rows = @r["summary"]
      return if rows.empty?

      top = [64, rows.map { |x| x["concurrency"] }.max].find { |cc| rows.any? { |x| x["concurrency"] == cc } }
      servers = @r["servers_run"]
      l << ""
      l << "#### Headline: req/s (p99 ms) at #{top} connections, median of repeats"
      l << ""
      l << "| workload | " + servers.join(" | ") + " |"
      l << "|---|" + servers.map { "---:" }.join("|") + "|"
      rows.map { |x| x["workload"] }.uniq.each do |wl|
        cells = servers.map do |s|
          x = rows.find { |y| y["workload"] == wl && y["server"] == s && y["concurrency"] == top }
          next "–" unless x

          err = x["non2xx"] + x["timeouts"] + x["socket_errors"]
          next "**0** (none completed)" if x["requests"].zero?

          "#{x['rps_median'].round} (#{ms(x['p99_ms'])})#{err.positive? ? " ⚠#{err} err" : ''}"
        end
        l << "| #{wl} | " + cells.join(" | ") + " |"
      end
      pss = servers.map do |s|
        v = rows.select { |y| y["server"] == s && y["concurrency"] == top }.map { |y| y["pss_mib"] }.compact.max
        v ? v.to_s : "–"
      end
      l << "| *peak PSS, MiB (max over workloads)* | " + pss.join(" | ") + " |"
    end

    def capacity(l)
      cap = @r["capacity"]
      return if cap.nil? || cap.empty?

      c = @r["config"]
      servers = @r["servers_run"]
      l << ""
      l << "#### Capacity under the SLO: highest arrival rate (req/s) with p99 ≤ #{c['slo_p99_ms']} ms, no errors"
      l << ""
      search = if c["slo_probes"]
                 "#{c['slo_probes']} probes per search: first at the server's best closed-loop req/s in the same " \
                   "session, then bisecting between the highest rate that met the SLO and the lowest that missed"
               else # results written before the bisection search
                 "rates at #{c['slo_fractions'].join('/')} × the server's best closed-loop req/s in the same session"
               end
      l << "Open model (`bench/lib/arrival.rb`, #{c['slo_duration_s']} s per probe, #{search}, capped at " \
           "#{c['slo_max_rate']}/s; latency from each request's due time). `≥` = the first probe passed, the true " \
           "capacity may be higher; 0 = no probe met the SLO."
      l << ""
      l << "| workload | " + servers.join(" | ") + " |"
      l << "|---|" + servers.map { "---:" }.join("|") + "|"
      cap.map { |x| x["workload"] }.uniq.each do |wl|
        cells = servers.map do |s|
          x = cap.find { |y| y["workload"] == wl && y["server"] == s }
          next "–" unless x

          "#{x['all_probes_met'] ? '≥' : ''}#{x['capacity_rps_median']&.round}"
        end
        l << "| #{wl} | " + cells.join(" | ") + " |"
      end
    end

    def per_workload(l)
      rows = @r["summary"]
      det = @r.dig("config", "workloads_detail") || {}
      rows.map { |x| x["workload"] }.uniq.each do |wl|
        l << ""
        l << "#### #{wl}: #{det.dig(wl, 'what')} (`#{det.dig(wl, 'app')}`)"
        l << ""
        l << "| c | server | req/s | p50 | p95 | p99 | max | non-2xx | timeouts | socket err | RSS MiB | PSS MiB | CPU µs/req |"
        l << "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        rows.select { |x| x["workload"] == wl }.each do |x|
          if x["requests"].zero?
            l << "| #{x['concurrency']} | #{x['server']} | **0** | – | – | – | – | #{x['non2xx']} | #{x['timeouts']} | " \
                 "#{x['socket_errors']} | #{x['rss_mib']} | #{x['pss_mib']} | – |"
            next
          end
          l << "| #{x['concurrency']} | #{x['server']} | #{x['rps_median'].round} | #{ms(x['p50_ms'])} | #{ms(x['p95_ms'])} | " \
               "#{ms(x['p99_ms'])} | #{ms(x['max_ms'])} | #{x['non2xx']} | #{x['timeouts']} | #{x['socket_errors']} | " \
               "#{x['rss_mib']} | #{x['pss_mib']} | #{x['server_cpu_us_per_request']&.round} |"
        end
      end
      l << ""
      l << "Latencies in ms (wrk, closed loop). **0** req/s: no request completed within the measured run (wrk " \
           "counts a timeout only for requests it sees expire). RSS/PSS: peak over the measured run of the sum over " \
           "all server processes (`/proc/PID/smaps_rollup`). CPU: user + system of all server processes / requests. " \
           "A row missing for a server: it crashed or failed (see Failures)."
    end

    def charts(l)
      files = @r["charts"] || []
      return if files.empty?

      l << ""
      l << "#### Charts"
      l << ""
      files.each do |f|
        rel = f.sub(%r{\Adocs/}, "")
        l << "![#{File.basename(f, '.svg')}](#{rel})"
      end
    end

    def failures(l)
      return if @r["failures"].empty?

      l << ""
      l << "#### Failures"
      l << ""
      @r["failures"].each do |f|
        where = [f["workload"], f["concurrency"] && "c=#{f['concurrency']}", f["repeat"] && "repeat #{f['repeat']}"].compact.join(", ")
        l << "- #{f['server']} (#{where}): #{f['error'].to_s.lines.first&.strip}"
      end
    end
  end

  ARGV_COPY = ARGV.dup.freeze unless const_defined?(:ARGV_COPY)
end

if $PROGRAM_NAME == __FILE__
  begin
    opts = MargayBench::SuiteOptions.new(ARGV)
  rescue OptionParser::ParseError, ArgumentError => e
    warn "bench/run.rb: #{e.message}"
    exit 64
  end
  exit MargayBench::Suite.new(opts).run
end
