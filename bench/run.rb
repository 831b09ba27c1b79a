#!/usr/bin/env ruby
# frozen_string_literal: true

# bench/run.rb: the comparative benchmark suite. Margay against the peer Rack servers in
# bench/Gemfile, over several workloads and a concurrency sweep, plus capacity under a
# latency SLO at a fixed arrival rate. One command re-runs every published figure.
#
#   bench/run.rb               full run (see --help for the defaults)
#   bench/run.rb --quick       smoke run (< 3 min)
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
require "json"
require "rbconfig"
require_relative "lib/harness"
require_relative "lib/stats"
require_relative "lib/wrk"
require_relative "lib/suite/options"
require_relative "lib/suite/servers"
require_relative "lib/suite/capacity"
require_relative "lib/suite/charts"
require_relative "lib/suite/report"
require_relative "lib/postgres"
require_relative "lib/waiting/backends"

module MargayBench
  # The suite: every repeat, workload and server, a fresh session (see the top of the file).
  class Suite < Harness
    include SuiteCapacity

    def initialize(opts)
      super(opts, script: "bench/run.rb", tag: "suite", width: 6)
    end

    def run
      return report_only if @o.report_only
      return 2 unless prepare(prerequisites, "margay-suite-")

      @env = bench_env
      @budget = SuiteServers.budget(Etc.nprocessors)
      @unavailable = unavailable_servers
      @servers = @o.servers - @unavailable.map { |u| u["server"] }
      warn_if_loaded(@o.noise_pct)
      progress "mode #{@o.mode}: servers #{@servers.join(',')}; workloads #{@o.workloads.join(',')}; " \
               "concurrency #{@o.concurrency.join(',')}; #{@o.repeats} repeat(s) x #{@o.duration}s (+#{@o.warmup}s warm-up)"
      @unavailable.each { |u| progress "not run: #{u['server']}: #{u['reason']}" }
      seed_rails if @o.workloads.include?("realistic")
      start_backends
      result = result_head("suite").merge("servers_run" => @servers, "servers_unavailable" => @unavailable)
      runs, probes = measure_all
      result["runs"] = runs
      result["capacity_probes"] = probes
      result["summary"] = summarize(runs)
      result["capacity"] = summarize_capacity(probes)
      finish(result, "suite")
    ensure
      clean_up
    end

    private

    # --- setup ----------------------------------------------------------------

    def prerequisites
      Prereqs.runner(ROOT, postgres: @o.workloads.any? { |w| WORKLOADS[w][:postgres] })
    end

    # Servers that cannot run here, with the reason (never dropped silently).
    def unavailable_servers
      lock = Machine.bench_lock
      @o.servers.filter_map do |s|
        if SuiteServers::KNOWN_UNAVAILABLE[s]
          { "server" => s, "reason" => SuiteServers::KNOWN_UNAVAILABLE[s] }
        elsif s == "margay-fibers" && !margay_help.include?("--fibers")
          { "server" => s, "reason" => "this tree's Margay has no --fibers (issue 13's fiber mode)" }
        elsif Machine.locked(lock, SuiteServers::GEM[s]).nil?
          { "server" => s, "reason" => "not in bench/Gemfile.lock" }
        end
      end
    end

    def margay_help
      @margay_help ||= Machine.capture("bundle", "exec", "exe/margay", "--help", env: @env).to_s
    end

    # PostgreSQL (and the slow service) for the rails-pg workloads, once per run.
    def start_backends
      specs = @o.workloads.map { |w| WORKLOADS[w] }
      return unless specs.any? { |w| w[:postgres] }

      @backends = WaitingBackends.new(tmp: @tmp, env: @env, progress: method(:progress))
      @backends.start(slow: specs.any? { |w| w[:slow_service] })
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
      env = spec[:postgres] ? @env.merge(@backends.env(fibers: SuiteServers::FIBER.include?(server))) : @env
      inst = SuiteServers::Instance.new(server, app: spec[:app], path: spec[:path], tmp: @tmp, budget: @budget,
                                                env: env, start_timeout: @o.start_timeout)
      return [[], []] unless start_server(inst, [server, wl], { "server" => server, "workload" => wl, "repeat" => rep },
                                          "  #{server}")

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
      stop_server(inst, "  #{server}") if inst
    end


    # What report.lua reads for an upload workload's POST body (empty: a GET).
    def upload_env(spec)
      { "BENCH_UPLOAD_BYTES" => spec[:upload_bytes].to_s }
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
      run_wrk(conns, @o.warmup, inst.port, spec[:path], env: upload_env(spec)) if @o.warmup.positive?
      window = CpuWindow.new(inst.pid)
      sampler = Memory::Sampler.new(inst.pid, interval: [@o.duration / 10.0, 0.5].min)
      data = run_wrk(conns, @o.duration, inst.port, spec[:path], env: upload_env(spec))
      mem = sampler.stop
      secs = data["duration_us"] / 1e6
      cpu, wrk_cpu, other_pct = window.finish(secs)
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
        "wrk_cpu_s" => wrk_cpu, "other_cpu_pct" => other_pct, "loadavg_before" => window.loadavg_before
      }
      run["slow_clients"] = slow.merge("result" => slow_result) if slow
      l = run["latency_us"]
      progress format("  %-9s %-9s c=%-3d %9.0f req/s  p50 %s p99 %s max %s  err %d/%d/%d  PSS %.0f MiB  " \
                      "CPU %.1fs  other %.0f%%%s",
                      inst.name, wl, conns, run["rps"], Stats.ms(l["p50"] / 1000.0), Stats.ms(l["p99"] / 1000.0),
                      Stats.ms(l["max"] / 1000.0), run["non2xx"], run["timeouts"], run["socket_errors"],
                      mem["pss_kib_max"].to_i / 1024.0, cpu, other_pct, other_pct > @o.noise_pct ? " NOISY" : "")
      run
    rescue StandardError => e
      finish_slow_clients(0) if @slow_pid
      @failures << { "server" => inst.name, "workload" => wl, "concurrency" => conns, "repeat" => rep,
                     "error" => brief(e), "log_tail" => inst.log_tail }
      progress "  #{inst.name} #{wl} c=#{conns} FAILED: #{brief(e)}"
      nil
    end

    # --- summaries ----------------------------------------------------------------

    def summarize(runs)
      runs.group_by { |r| [r["workload"], r["server"], r["concurrency"]] }.map do |(wl, server, conns), rs|
        lat = ->(k) { Stats.median(rs.map { |r| r["latency_us"][k] })&./(1000.0)&.round(3) }
        {
          "workload" => wl, "server" => server, "concurrency" => conns, "repeats" => rs.size,
          "requests" => rs.sum { |r| r["requests"] }, "rps_median" => Stats.median(rs.map { |r| r["rps"] })&.round(1),
          "rps_all" => rs.map { |r| r["rps"] },
          "p50_ms" => lat.call("p50"), "p95_ms" => lat.call("p95"), "p99_ms" => lat.call("p99"),
          "max_ms" => (rs.map { |r| r["latency_us"]["max"] }.max / 1000.0).round(3),
          "non2xx" => rs.sum { |r| r["non2xx"] }, "timeouts" => rs.sum { |r| r["timeouts"] },
          "socket_errors" => rs.sum { |r| r["socket_errors"] },
          "rss_mib" => mib(Stats.median(rs.map { |r| r.dig("memory", "rss_kib_max") })),
          "pss_mib" => mib(Stats.median(rs.map { |r| r.dig("memory", "pss_kib_max") })),
          "processes" => Stats.median(rs.map { |r| r.dig("memory", "processes_at_peak")&.size }),
          "server_cpu_us_per_request" => Stats.median(rs.map { |r| r["server_cpu_us_per_request"] }),
          "other_cpu_pct_max" => rs.map { |r| r["other_cpu_pct"] }.max
        }
      end.sort_by { |r| [WORKLOADS.keys.index(r["workload"]), r["concurrency"], SuiteServers::ALL.index(r["server"])] }
    end

    def mib(kib)
      kib && (kib / 1024.0).round(1)
    end

    # --- output -------------------------------------------------------------------

    def write(result, prefix)
      result["charts"] = @o.charts ? write_charts(result) : []
      super
      SuiteReport.update_docs(SuiteReport.new(result).markdown(full: false)) if @o.update_docs
    end

    def markdown(result)
      SuiteReport.new(result).markdown
    end

    def report_only
      result = JSON.parse(File.read(@o.report_only))
      result["charts"] = write_charts(result) if @o.charts
      md = SuiteReport.new(result).markdown
      File.write(File.join(File.dirname(@o.report_only), "suite-latest.md"), md)
      SuiteReport.update_docs(SuiteReport.new(result).markdown(full: false)) if @o.update_docs
      puts md
      0
    end

    def write_charts(result)
      FileUtils.mkdir_p(@o.charts_dir)
      SuiteCharts.new(result, @o.charts_dir).write_all.map { |p| p.delete_prefix("#{ROOT}/") }
    end

    # --- config ---------------------------------------------------------------------

    def versions
      lock = Machine.bench_lock
      {
        "ruby" => Machine.ruby_version,
        "margay_commit" => Machine.commit,
        "servers" => SuiteServers.versions(lock).merge("margay" => Machine.margay_version),
        "rack" => Machine.locked(lock, "rack"), "rails" => Machine.locked(lock, "railties"),
        "sqlite3" => Machine.locked(lock, "sqlite3"), "pg" => Machine.locked(lock, "pg"),
        "postgresql" => @backends&.postgres&.version,
        "wrk" => Machine.wrk_version
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
end

MargayBench::Suite.main("bench/run.rb", MargayBench::SuiteOptions) if $PROGRAM_NAME == __FILE__
