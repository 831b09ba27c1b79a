#!/usr/bin/env ruby
# frozen_string_literal: true

# Margay on JRuby 9.4 (the pure-Ruby engine) against Puma 8 on the same JRuby (its -java gem:
# the Java HTTP parser), and against Margay on MRI (the C engine), each a single process with
# the same threads, on the same apps, in the same run:
#
#   margay-jruby  .ci/jruby exe/margay        (bench/jruby.gemfile)
#   puma-jruby    .ci/jruby -S puma           (bench/jruby.gemfile)
#   margay-mri    bundle exec exe/margay      (MRI, the root Gemfile)
#   margay-base   .ci/jruby DIR/exe/margay    (with --baseline DIR: another checkout's lib on JRuby)
#
# Apps: bench/apps/hello.ru and bench/apps/io.ru (10 ms of waiting plus a 2 KB JSON body).
# Load: wrk over keep-alive connections. Every measurement gets a freshly started server, a
# discarded warm-up run (the JVM compiles the hot paths meanwhile: --warmup seconds), then
# the measured run. Both JRuby servers reach their plateau of hello-world req/s only after 45 to
# 60 s of this load on 2 cores (`--curve 18 --seconds 5`, bench/results/jruby6-curve/), hence
# the 60 s default; each measurement then takes about 85 s. The servers' order rotates round
# by round, so none always runs first.
# Reports per row req/s, p50, p99 and, per app, the medians' ratios margay-jruby / puma-jruby
# and margay-jruby / margay-mri.
#
#   bundle exec ruby bench/jruby.rb [--rounds 3] [--seconds 10] [--warmup 60] [--connections 64]
#                                   [--threads 16] [--apps hello,io] [--servers LIST] [--baseline DIR]
#                                   [--results-dir DIR]
#
# --curve N: the warm-up curve instead. Each server gets N back-to-back wrk runs of --seconds
# each, from its boot on (no discarded warm-up), and the report gives req/s per window and the
# first window from which every later one reaches 90 % of the last third's median.
#
# .ci/jruby installs JRuby and the bench's JRuby bundle on its first run (under
# ~/.cache/margay-jruby); needs wrk and java. Writes DIR/jruby-<time>.json and .md
# (DIR: bench/results/jruby-<UTC date>).
require "json"
require "optparse"
require "open3"
require "time"
require "tmpdir"
require_relative "lib/procs"
require_relative "lib/servers"
require_relative "lib/stats"
require_relative "lib/result_files"
require_relative "lib/wrk"

module MargayBench
  class JrubyBench
    SERVERS = %w[margay-jruby puma-jruby margay-mri].freeze
    APPS = { "hello" => "bench/apps/hello.ru", "io" => "bench/apps/io.ru" }.freeze
    JRUBY = File.join(ROOT, ".ci", "jruby")
    GEMFILE = "bench/jruby.gemfile"
    BOOT = 180 # a JVM boots slower than MRI; the first run also installs (see #install)

    def initialize(argv)
      @o = { rounds: 3, seconds: 10, warmup: 60, connections: 64, threads: 16, apps: APPS.keys, servers: SERVERS,
             curve: nil, results_dir: File.join(ROOT, "bench/results", "jruby-#{Time.now.utc.strftime('%Y%m%d')}") }
      OptionParser.new do |p|
        %i[rounds seconds warmup connections threads curve].each { |k| p.on("--#{k} N", Integer) { |v| @o[k] = v } }
        p.on("--apps LIST", Array) { |v| @o[:apps] = v & APPS.keys }
        p.on("--servers LIST", Array) { |v| @o[:servers] = v & (SERVERS + ["margay-base"]) }
        p.on("--baseline DIR") { |v| @o[:baseline] = File.expand_path(v) }
        p.on("--results-dir DIR") { |v| @o[:results_dir] = File.expand_path(v) }
      end.parse!(argv)
      @o[:servers] += ["margay-base"] if @o[:baseline] && !@o[:servers].include?("margay-base")
      @o[:servers] -= ["margay-base"] unless @o[:baseline]
    end

    def run
      missing = %w[wrk java].reject { |cmd| Env.which(cmd) }
      abort "bench/jruby.rb: missing #{missing.join(', ')}" unless missing.empty?
      install
      @rows = []
      Dir.mktmpdir("margay-jruby-bench-") do |tmp|
        @o[:rounds].times do |round|
          @o[:apps].each do |app|
            @o[:servers].rotate(round).each do |name|
              measure(name, app, tmp).each_with_index do |result, window|
                row = result.merge("round" => round + 1, "app" => app, "server" => name)
                row["window"] = window + 1 if @o[:curve]
                @rows << row
                kinds = row["errors"].select { |_, n| n.positive? }.map { |kind, n| "#{kind} #{n}" }
                warn format("[jruby] round %d %-5s %-12s %s%8.1f req/s p50 %7.2f p99 %7.2f ms failed %d%s",
                            round + 1, app, name, @o[:curve] ? "window #{window + 1} " : "", row["rps"],
                            row["p50_ms"], row["p99_ms"], row["failed"], kinds.empty? ? "" : " (#{kinds.join(', ')})")
              end
            end
          end
        end
      end
      ResultFiles.write(@o[:curve] ? "jruby-curve" : "jruby", @o, @rows, @o[:curve] ? curve_markdown : markdown,
                        head: { "versions" => versions })
      0
    end

    private

    def jruby_env = Env.clean.merge("MARGAY_JRUBY_GEMFILE" => GEMFILE)

    # JRuby, its gems and the bench bundle, outside any measurement (minutes on a fresh machine).
    def install
      out, status = Open3.capture2e(jruby_env, JRUBY, "-e", "puts JRUBY_VERSION", chdir: ROOT)
      abort "bench/jruby.rb: .ci/jruby could not install:\n#{out}" unless status.success?
      @jruby_version = out.lines.last.strip
    end

    def versions
      { "jruby" => @jruby_version, "mri" => RUBY_VERSION, "java" => `java -version 2>&1`.lines.first.to_s.strip }
    end

    def command(name, port, app)
      threads = "#{@o[:threads]}:#{@o[:threads]}"
      case name
      when "margay-jruby" then [[JRUBY, *Servers.margay(port, app, threads: threads).drop(2)], jruby_env]
      when "margay-base"
        [[JRUBY, *Servers.margay(port, app, exe: File.join(@o[:baseline], "exe/margay"), threads: threads).drop(2)],
         jruby_env]
      when "puma-jruby" then [[JRUBY, "-S", *Servers.puma(port, app, threads: threads).drop(2)], jruby_env]
      else [Servers.margay(port, app, threads: threads), Env.clean]
      end
    end

    # A freshly started server's measured runs: one after the warm-up, or --curve of them.
    def measure(name, app, tmp)
      port = Env.free_port
      argv, env = command(name, port, File.join(ROOT, APPS.fetch(app)))
      log = File.join(tmp, "#{name}-#{app}-#{port}.log")
      pid = Procs.spawn_server(env, argv, log, chdir: ROOT)
      begin
        Procs.await_server("bench/jruby.rb: #{name} on #{port}", log, timeout: BOOT) { Env.ok?("127.0.0.1", port) }
        return Array.new(@o[:curve]) { wrk(port, tmp, @o[:seconds]) } if @o[:curve]

        wrk(port, tmp, @o[:warmup]) if @o[:warmup].positive?
        [wrk(port, tmp, @o[:seconds])]
      ensure
        Procs.stop_group(pid)
      end
    end

    def wrk(port, tmp, seconds)
      argv = Wrk.argv(threads: 2, connections: @o[:connections], seconds: seconds, timeout: 10,
                      url: "http://127.0.0.1:#{port}/")
      data, = Wrk.run(argv, out_path: File.join(tmp, "wrk-#{port}.out"), bound: seconds + 30)
      lat = data["latency_us"]
      errors = data["errors"].slice("connect", "read", "write", "timeout", "status")
      { "rps" => data["requests"] / (data["duration_us"] / 1e6), "p50_ms" => lat["p50"] / 1000.0,
        "p99_ms" => lat["p99"] / 1000.0, "failed" => errors.values.sum, "errors" => errors }
    end

    def markdown
      lines = ["wrk -t2 -c#{@o[:connections]} -d#{@o[:seconds]}s after #{@o[:warmup]} s of warm-up, " \
               "#{@o[:threads]}:#{@o[:threads]} threads, one process each, #{@o[:rounds]} rounds", "",
               "| round | app | server | req/s | p50 ms | p99 ms | failed |", "|---:|---|---|---:|---:|---:|---:|"]
      @rows.each do |r|
        lines << format("| %d | %s | %s | %.1f | %.2f | %.2f | %d |", r["round"], r["app"], r["server"], r["rps"],
                        r["p50_ms"], r["p99_ms"], r["failed"])
      end
      lines << ""
      @o[:apps].each do |app|
        next unless @o[:servers].include?("margay-jruby")

        (%w[puma-jruby margay-mri margay-base] & @o[:servers]).each { |other| lines << ratio_line(app, other) }
      end
      "#{lines.join("\n")}\n"
    end

    def curve_markdown
      lines = ["wrk -t2 -c#{@o[:connections]}: #{@o[:curve]} back-to-back runs of #{@o[:seconds]} s " \
               "from the boot on, " \
               "#{@o[:threads]}:#{@o[:threads]} threads, one process each, #{@o[:rounds]} rounds", "",
               "| round | app | server | window | ends at s | req/s | p50 ms | p99 ms | failed |",
               "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
      @rows.each do |r|
        lines << format("| %d | %s | %s | %d | %d | %.1f | %.2f | %.2f | %d |", r["round"], r["app"], r["server"],
                        r["window"], r["window"] * @o[:seconds], r["rps"], r["p50_ms"], r["p99_ms"], r["failed"])
      end
      lines << ""
      @rows.group_by { |r| r.values_at("round", "app", "server") }.each do |(round, app, server), rows|
        lines << steady_line(round, app, server, rows.map { |r| r["rps"] })
      end
      "#{lines.join("\n")}\n"
    end

    # The first window from which every later one reaches 90 % of the last third's median.
    def steady_line(round, app, server, rps)
      steady = Stats.median(rps.last([rps.size / 3, 1].max))
      from = (rps.rindex { |v| v < 0.9 * steady } || -1) + 1
      format("round %d %s %s: steady %.1f req/s (median of the last third); at 90 %% of it or more from window %d " \
             "(after %d s of load)", round, app, server, steady, from + 1, from * @o[:seconds])
    end

    # The medians over the rounds of margay-jruby and +other+ on +app+, as ratios.
    def ratio_line(app, other)
      m = medians(app, "margay-jruby")
      o = medians(app, other)
      format("%s: margay-jruby / %s: req/s %.2fx, p50 %.2fx, p99 %.2fx", app, other, m["rps"] / o["rps"],
             m["p50_ms"] / o["p50_ms"], m["p99_ms"] / o["p99_ms"])
    end

    def medians(app, server)
      rows = @rows.select { |r| r["app"] == app && r["server"] == server }
      %w[rps p50_ms p99_ms].to_h { |k| [k, Stats.median(rows.map { |r| r[k] })] }
    end
  end
end

exit MargayBench::JrubyBench.new(ARGV).run if $PROGRAM_NAME == __FILE__
