#!/usr/bin/env ruby
# frozen_string_literal: true

# bench/waiting.rb: issue 13's bars for apps that mostly wait. Margay (threads, -t 128:128,
# --fibers) against Puma 8, Falcon and Itsi's fiber-scheduler mode, servers alternated in
# the same run, medians of N rounds, ratios and a met/not met verdict per bar:
#
#   sleep    10 ms sleep app (bench/apps/io.ru), single process, c=256 and c=1024
#   cluster  the same app, 2 workers, c=256: Margay fibers vs Falcon with 2 processes
#   rails    Rails 7.2 + PostgreSQL + a 50 ms Net::HTTP call (GET /slow), c=64 and c=256:
#            req/s, p99, errors and the PSS of the server's process tree
#
# and issue 12's (part 4, the tail at saturation; not run unless named): tail-sleep-wW and
# tail-rails-wW, W = 1, 2, 4 workers: the sleep app and the Rails app on SQLite at c=64 and
# c=256, Margay against Puma with their default threads; Margay's p99 against 0.8x Puma's at
# equal or higher req/s. `--bars tail` runs all six (~16 min), `--bars tail-rails` three.
#
#   bench/waiting.rb                                   full: 3 rounds x 5 s (+2 s warm-up) (~11 min)
#   bench/waiting.rb --quick                           smoke: 1 round x 2 s (+1 s warm-up)
#   bench/waiting.rb --bars sleep,cluster --margay-dir ../fibers   # another (built) Margay tree
#   bench/waiting.rb --bars tail                       issue 12's tail bars: 3 rounds x 5 s (~16 min)
#   bench/waiting.rb --bars tail-rails-w2 --baseline ../before   # margay-base: an earlier (built)
#                                                      tree beside margay, alternated in the same run
#   bench/waiting.rb --help
#
# Per round, per bar, per server (order rotated every round): a fresh server, then for each
# concurrency a discarded warm-up and a measured wrk run (PSS of the server's processes
# sampled meanwhile; CPU of the server, of PostgreSQL and of the slow service read before
# and after), then stop it. The rails bar runs its own PostgreSQL cluster (bench/lib/postgres.rb,
# unix socket in a temp dir, removed at the end, also on ^C) and bench/slow_service.rb.
#
# Results: bench/results/waiting-<timestamp>.json, waiting-latest.json, waiting-latest.md
# (or --results-dir). Exit status: 0 done, 1 some measurement failed, 2 a prerequisite is
# missing, 64 bad usage. Never a speed assertion: the verdicts are figures to read.

require "json"
require_relative "lib/harness"
require_relative "lib/stats"
require_relative "lib/wrk"
require_relative "lib/postgres"
require_relative "lib/waiting/options"
require_relative "lib/waiting/servers"
require_relative "lib/waiting/backends"
require_relative "lib/waiting/report"

module MargayBench
  # The runner (see the top of the file).
  class Waiting < Harness
    def initialize(opts)
      super(opts, script: "bench/waiting.rb", tag: "waiting", width: 6)
    end

    def run
      return report_only if @o.report_only
      return 2 unless prepare(prerequisites, "margay-waiting-")

      @env = bench_env
      lock = Machine.bench_lock
      help = Machine.capture("bundle", "exec", File.join(@o.margay_dir, "exe", "margay"), "--help",
                             env: @env)
      servers = @o.bars.flat_map { |b| @o.servers_for(b) }.uniq
      @unavailable = servers.filter_map do |s|
        reason = WaitingServers.unavailable(s, lock, @o.margay_dir_for(s), help)
        reason && { "server" => s, "reason" => reason }
      end
      warn_if_loaded(5.0)
      seed_rails if @o.bars.any? { |b| WaitingBars::ALL[b][:sqlite] }
      progress "mode #{@o.mode}: bars #{@o.bars.join(',')}; #{@o.rounds} round(s) x #{@o.duration}s " \
               "(+#{@o.warmup}s warm-up); Margay from #{@o.margay_dir}#{", margay-base from #{@o.baseline}" if @o.baseline}"
      @unavailable.each { |u| progress "not run: #{u['server']}: #{u['reason']}" }
      start_backends
      result = result_head("waiting").merge("servers_unavailable" => @unavailable)
      result["runs"] = measure_all
      result["summary"] = summarize(result["runs"])
      result["verdicts"] = WaitingReport.verdicts(result["summary"])
      finish(result, "waiting")
    ensure
      clean_up
    end

    private

    def prerequisites
      problems = Prereqs.runner(@o.margay_dir, what: "--margay-dir #{@o.margay_dir}: ",
                                               postgres: @o.bars.any? { |b| WaitingBars::ALL[b][:postgres] })
      problems.concat(Prereqs.margay(@o.baseline, "exe/margay", "--baseline #{@o.baseline}: ")) if @o.baseline
      problems
    end

    def start_backends
      bars = @o.bars.map { |b| WaitingBars::ALL[b] }
      return unless bars.any? { |b| b[:postgres] }

      @backends = WaitingBackends.new(tmp: @tmp, env: @env, progress: method(:progress), pool: @o.rails_pool)
      @backends.start(slow: bars.any? { |b| b[:slow_service] })
    end

    # --- measuring --------------------------------------------------------------

    def measure_all
      runs = []
      plan = @o.bars.map { |b| [b, @o.servers_for(b) - @unavailable.map { |u| u["server"] }] }
      total = @o.rounds * plan.sum { |_, s| s.size }
      n = 0
      @o.rounds.times do |round|
        plan.each_with_index do |(bar, servers), bi|
          servers.rotate(round + bi).each do |server|
            n += 1
            progress "#{n}/#{total}: round #{round + 1}, #{bar}, #{server}"
            runs.concat(session(bar, server, round + 1))
          end
        end
      end
      runs
    end

    def session(bar, server, round)
      if @broken[[bar, server]]
        progress "  #{server} skipped: it failed to start earlier"
        return []
      end
      spec = WaitingBars::ALL.fetch(bar)
      env = @env.dup
      fibers = WaitingServers::FIBER.include?(server)
      env.merge!(@backends.env(fibers: fibers)) if spec[:postgres]
      env["BENCH_RAILS_ISOLATION"] = "fiber" if spec[:sqlite] && fibers
      inst = WaitingServers::Instance.new(server, app: spec[:app], path: spec[:path], tmp: @tmp, env: env,
                                                  workers: spec[:workers], margay_dir: @o.margay_dir_for(server),
                                                  start_timeout: @o.start_timeout)
      return [] unless start_server(inst, [bar, server], { "bar" => bar, "server" => server, "round" => round }, "  #{server}")

      runs = []
      @o.concurrency_for(bar).each do |c|
        run = measure(inst, bar, spec, c, round)
        runs << run if run
        next if Procs.alive?(inst.pid)

        @failures << { "bar" => bar, "server" => server, "concurrency" => c, "round" => round,
                       "error" => "server exited during the c=#{c} run", "log_tail" => inst.log_tail }
        progress "  #{server} EXITED during #{bar} c=#{c}; skipping the rest of the session"
        break
      end
      runs
    ensure
      stop_server(inst, "  #{server}") if inst
    end

    def measure(inst, bar, spec, conns, round)
      run_wrk(conns, @o.warmup, inst.port, spec[:path]) if @o.warmup.positive?
      window = CpuWindow.new(inst.pid)
      helpers_before = @backends&.cpu_s
      sampler = Memory::Sampler.new(inst.pid, interval: [@o.duration / 10.0, 0.5].min)
      data = run_wrk(conns, @o.duration, inst.port, spec[:path])
      mem = sampler.stop
      secs = data["duration_us"] / 1e6
      cpu, wrk_cpu, other_pct = window.finish(secs)
      helpers = helpers_cpu(helpers_before, secs)
      # PostgreSQL and the slow service are part of the workload, not noise.
      other_pct = [other_pct - helpers.values.sum / Etc.nprocessors, 0].max.round(1) if helpers
      e = data["errors"]
      run = {
        "bar" => bar, "server" => inst.name, "concurrency" => conns, "round" => round,
        "server_command" => inst.command, "startup_s" => inst.startup_s, "wrk_command" => data["command"],
        "requests" => data["requests"], "duration_s" => secs.round(3), "rps" => (data["requests"] / secs).round(1),
        "latency_us" => data["latency_us"], "non2xx" => e["status"], "timeouts" => e["timeout"],
        "socket_errors" => e["connect"] + e["read"] + e["write"], "errors" => e, "memory" => mem,
        "server_cpu_s" => cpu, "wrk_cpu_s" => wrk_cpu, "other_cpu_pct" => other_pct,
        "helpers_cpu_pct_of_one_cpu" => helpers, "loadavg_before" => window.loadavg_before
      }
      l = run["latency_us"]
      progress format("  %-13s %-7s c=%-4d %8.0f req/s  p50 %s p99 %s  err %d/%d/%d  PSS %.0f MiB  CPU %.1fs%s%s",
                      inst.name, bar, conns, run["rps"], Stats.ms(l["p50"] / 1000.0), Stats.ms(l["p99"] / 1000.0),
                      run["non2xx"], run["timeouts"], run["socket_errors"], mem["pss_kib_max"].to_i / 1024.0, cpu,
                      helpers ? "  pg #{helpers['postgres']}% slow #{helpers['slow_service']}%" : "",
                      other_pct > 5 ? "  NOISY (other #{other_pct}%)" : "")
      run
    rescue StandardError => e
      @failures << { "bar" => bar, "server" => inst.name, "concurrency" => conns, "round" => round,
                     "error" => brief(e), "log_tail" => inst.log_tail }
      progress "  #{inst.name} #{bar} c=#{conns} FAILED: #{brief(e)}"
      nil
    end

    # CPU of PostgreSQL and the slow service over the run, in % of one CPU.
    def helpers_cpu(before, secs)
      return nil unless before

      after = @backends.cpu_s
      after.to_h { |k, v| [k, (100.0 * (v - before[k]) / secs).round(1)] }
    end

    # --- summaries ----------------------------------------------------------------

    def summarize(runs)
      runs.group_by { |r| [r["bar"], r["server"], r["concurrency"]] }.map do |(bar, server, conns), rs|
        lat = ->(k) { Stats.median(rs.map { |r| r["latency_us"][k] })&./(1000.0)&.round(2) }
        pss = Stats.median(rs.map { |r| r.dig("memory", "pss_kib_max") })
        {
          "bar" => bar, "server" => server, "concurrency" => conns, "rounds" => rs.size,
          "requests" => rs.sum { |r| r["requests"] }, "rps_median" => Stats.median(rs.map { |r| r["rps"] })&.round(1),
          "rps_all" => rs.map { |r| r["rps"] }, "p50_ms" => lat.call("p50"), "p99_ms" => lat.call("p99"),
          "mean_ms" => lat.call("mean"),
          "p99_all_ms" => rs.map { |r| (r["latency_us"]["p99"] / 1000.0).round(2) },
          "max_ms" => (rs.map { |r| r["latency_us"]["max"] }.max / 1000.0).round(2),
          "errors" => rs.sum { |r| r["non2xx"] + r["timeouts"] + r["socket_errors"] },
          "non2xx" => rs.sum { |r| r["non2xx"] }, "timeouts" => rs.sum { |r| r["timeouts"] },
          "socket_errors" => rs.sum { |r| r["socket_errors"] },
          "pss_mib" => pss && (pss / 1024.0).round(1),
          "processes" => Stats.median(rs.map { |r| r.dig("memory", "processes_at_peak")&.size }),
          "server_cpu_us_per_request" => Stats.median(rs.map { |r| r["requests"].positive? ? (r["server_cpu_s"] * 1e6 / r["requests"]).round(1) : nil }),
          "helpers_cpu_pct_median" => helpers_median(rs),
          "other_cpu_pct_max" => rs.map { |r| r["other_cpu_pct"] }.max
        }
      end.sort_by { |r| [WaitingBars::ALL.keys.index(r["bar"]), r["concurrency"], WaitingServers::ALL.index(r["server"])] }
    end

    def helpers_median(runs)
      hs = runs.map { |r| r["helpers_cpu_pct_of_one_cpu"] }.compact
      return nil if hs.empty?

      hs.first.keys.to_h { |k| [k, Stats.median(hs.map { |h| h[k] })] }
    end

    # --- output -------------------------------------------------------------------

    def markdown(result)
      WaitingReport.new(result).markdown
    end

    def report_only
      md = WaitingReport.new(JSON.parse(File.read(@o.report_only))).markdown
      File.write(@o.report_only.sub(/\.json\z/, "") + ".md", md)
      puts md
      0
    end

    def versions
      lock = Machine.bench_lock
      {
        "ruby" => Machine.ruby_version,
        "margay_dir" => @o.margay_dir, "margay_commit" => Machine.commit(@o.margay_dir),
        "margay" => Machine.margay_version(@o.margay_dir),
        "baseline_dir" => @o.baseline, "baseline_commit" => @o.baseline && Machine.commit(@o.baseline),
        "puma" => Machine.locked(lock, "puma"), "falcon" => Machine.locked(lock, "falcon"),
        "async" => Machine.locked(lock, "async"), "io-event" => Machine.locked(lock, "io-event"),
        "itsi-server" => Machine.locked(lock, "itsi-server"), "itsi-scheduler" => Machine.locked(lock, "itsi-scheduler"),
        "rails" => Machine.locked(lock, "railties"), "pg" => Machine.locked(lock, "pg"), "rack" => Machine.locked(lock, "rack"),
        "postgresql" => @backends&.postgres&.version, "wrk" => Machine.wrk_version
      }
    end

    def config
      {
        "bars" => @o.bars, "rounds" => @o.rounds, "duration_s" => @o.duration, "warmup_s" => @o.warmup,
        "wrk_timeout_s" => @o.wrk_timeout, "margay_dir" => @o.margay_dir,
        "wrk_command" => wrk_argv(2, @o.duration, "PORT", "PATH").join(" ").sub("-c2", "-c<N>").sub("-t2", "-t<min(2,N)>"),
        "bars_detail" => @o.bars.to_h do |b|
          spec = WaitingBars::ALL[b]
          [b, { "what" => spec[:what], "app" => spec[:app], "path" => spec[:path], "workers" => spec[:workers],
                "concurrency" => @o.concurrency_for(b), "servers" => @o.servers_for(b),
                "commands" => @o.servers_for(b).to_h do |s|
                  argv, = WaitingServers.command(s, port: "PORT", app: spec[:app], workers: spec[:workers],
                                                    margay_dir: @o.margay_dir_for(s) || "BASELINE", tmp: @tmp)
                  [s, "BUNDLE_GEMFILE=bench/Gemfile RACK_ENV=production #{argv.join(' ')}"]
                end }]
        end,
        "rails_env" => "DATABASE_URL=postgresql:///bench?host=<tmp socket dir>, BENCH_RAILS_POOL=#{WaitingBackends::POOL}, " \
                       "BENCH_SLOW_URL=http://127.0.0.1:<port>/ (#{WaitingBackends::SLOW_DELAY_MS} ms), " \
                       "BENCH_RAILS_ISOLATION=fiber for #{WaitingServers::FIBER.join(', ')}"
      }
    end
  end
end

MargayBench::Waiting.main("bench/waiting.rb", MargayBench::WaitingOptions) if $PROGRAM_NAME == __FILE__
