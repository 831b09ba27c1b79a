#!/usr/bin/env ruby
# frozen_string_literal: true

# HTTPS hello world, HTTP/1.1 keep-alive: Margay with an ssl:// bind against Puma 8 with the
# same bind, nginx (1 worker, the same certificate, TLS 1.2-1.3) and Margay's own plain HTTP,
# single process each, alternated round by round, for an RSA-2048 and an ECDSA P-256
# certificate (made here with the openssl CLI). wrk keeps its connections alive, so this
# measures records, not handshakes. Reports per round req/s, p50, p99 and the server's RSS,
# and the medians' ratios.
#
#   bundle exec ruby bench/tls.rb [--rounds 3] [--seconds 10] [--connections 64]
#                                 [--keys rsa,ecdsa] [--servers margay,puma,nginx,margay-plain]
#                                 [--baseline DIR] [--results-dir DIR]
#
# --baseline DIR: another Margay checkout (its extension compiled) also runs, started with its
# own exe/ and lib/, as margay-base (TLS) and margay-base-plain, in the same rotation.
#
# Writes DIR/tls-<time>.json and .md (DIR: bench/results/tls-<UTC date>).
require "json"
require "optparse"
require "time"
require "tmpdir"
require_relative "lib/certificates"
require_relative "lib/procs"
require_relative "lib/servers"
require_relative "lib/stats"
require_relative "lib/result_files"
require_relative "lib/wrk"

module MargayBench
  class TlsBench
    APP = "bench/apps/hello.ru"
    SERVERS = %w[margay puma nginx margay-plain].freeze

    def initialize(argv)
      @o = { rounds: 3, seconds: 10, connections: 64, keys: Certificates::KEYS.keys, servers: SERVERS,
             results_dir: File.join(ROOT, "bench/results", "tls-#{Time.now.utc.strftime('%Y%m%d')}") }
      OptionParser.new do |p|
        %i[rounds seconds connections].each { |k| p.on("--#{k} N", Integer) { |v| @o[k] = v } }
        %i[keys servers].each { |k| p.on("--#{k} LIST", Array) { |v| @o[k] = v } }
        p.on("--results-dir DIR") { |v| @o[:results_dir] = File.expand_path(v) }
        p.on("--baseline DIR") { |v| @o[:baseline] = File.expand_path(v) }
      end.parse!(argv)
      return unless @o[:baseline]

      @o[:servers] = @o[:servers].flat_map { |s| s.start_with?("margay") ? [s, s.sub("margay", "margay-base")] : [s] }
    end

    def run
      abort "bench/tls.rb: needs wrk, openssl and nginx" unless %w[wrk openssl nginx].all? { |c| Env.which(c) }
      rows = []
      Dir.mktmpdir("margay-tls-") do |tmp|
        @o[:keys].each do |key|
          cert, pem = Certificates.make(tmp, key, who: "bench/tls.rb")
          @o[:rounds].times do |round|
            @o[:servers].each do |server|
              row = measure(server, key, cert, pem, round + 1, tmp)
              rows << row
              warn format("[tls] %-5s round %d %-12s %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms  RSS %5.1f MiB",
                          key, round + 1, server, row["rps"], row["p50_ms"], row["p99_ms"], row["rss_mib"])
            end
          end
        end
      end
      ResultFiles.write("tls", @o, rows, markdown(rows))
      0
    end

    private

    def measure(server, key, cert, pem, round, tmp)
      port = Env.free_port
      log = File.join(tmp, "#{server}-#{key}-#{round}.log")
      argv, chdir, env = command(server, port, cert, pem, tmp)
      pid = Procs.spawn_server(env, argv, log, chdir: chdir)
      begin
        # listening is enough: a plain GET to a TLS port is not answered 200
        Procs.await_server("bench/tls.rb: #{server} on #{port}", log) { Env.listening?(port) }
        url = "#{server.end_with?('-plain') ? 'http' : 'https'}://127.0.0.1:#{port}/"
        Wrk.run(Wrk.argv(threads: 2, connections: @o[:connections], seconds: 2, timeout: 2, url: url),
                out_path: File.join(tmp, "warm.out"), bound: 30) # handshakes and the pool's growth out of the way
        json, = Wrk.run(Wrk.argv(threads: 2, connections: @o[:connections], seconds: @o[:seconds], timeout: 2, url: url),
                        out_path: File.join(tmp, "wrk.out"), bound: @o[:seconds] + 30)
        lat = json["latency_us"]
        { "key" => key, "round" => round, "server" => server, "rps" => json["requests"] * 1e6 / json["duration_us"],
          "p50_ms" => lat["p50"] / 1000.0, "p99_ms" => lat["p99"] / 1000.0, "errors" => json["errors"].values.sum,
          "rss_mib" => Procs.rss_kib(pid).first / 1024.0 }
      ensure
        Procs.stop_group(pid)
      end
    end

    def command(server, port, cert, pem, tmp)
      app = File.expand_path(APP, ROOT)
      ssl = "ssl://127.0.0.1:#{port}?cert=#{cert}&key=#{pem}"
      case server
      when "margay" then [Servers.margay(port, app, bind: ssl), ROOT, Env.clean]
      when "margay-plain" then [Servers.margay(port, app), ROOT, Env.clean]
      when "margay-base" then [Servers.margay(port, app, exe: base_exe, bind: ssl), ROOT, Env.clean]
      when "margay-base-plain" then [Servers.margay(port, app, exe: base_exe), ROOT, Env.clean]
      when "puma"
        [Servers.puma(port, app, bind: ssl), ROOT,
         Env.clean.merge("BUNDLE_GEMFILE" => File.join(BENCH, "Gemfile"))]
      when "nginx"
        argv, = Servers.nginx(port, workers: 1, tmp: tmp, nginx: Env.which("nginx"), tls: [cert, pem])
        [argv, ROOT, Env.clean]
      else abort "bench/tls.rb: unknown server #{server}"
      end
    end

    def base_exe = File.join(@o[:baseline] || abort("bench/tls.rb: margay-base needs --baseline DIR"), "exe", "margay")

    def markdown(rows)
      lines = ["## HTTPS hello world, keep-alive, `wrk -t2 -c#{@o[:connections]} -d#{@o[:seconds]}s`, " \
               "#{@o[:rounds]} rounds, servers alternated", "",
               "| key | round | server | req/s | p50 ms | p99 ms | RSS MiB | errors |", "|---|---:|---|---:|---:|---:|---:|---:|"]
      rows.each do |r|
        lines << format("| %s | %d | %s | %.0f | %.2f | %.2f | %.1f | %d |", r["key"], r["round"], r["server"], r["rps"],
                        r["p50_ms"], r["p99_ms"], r["rss_mib"], r["errors"])
      end
      lines += ["", "Medians, Margay (TLS) over each: req/s, p99, RSS", ""]
      @o[:keys].each do |key|
        med = ->(server, k) { Stats.median(rows.select { |r| r["key"] == key && r["server"] == server }.map { |r| r[k] }) }
        (@o[:servers] - ["margay"]).each do |other|
          next unless med.(other, "rps")

          lines << format("- %s, vs %s: %.2fx req/s, p99 %.2fx, RSS %.2fx", key, other, med.("margay", "rps") / med.(other, "rps"),
                          med.("margay", "p99_ms") / med.(other, "p99_ms"), med.("margay", "rss_mib") / med.(other, "rss_mib"))
        end
        next unless med.("margay-plain", "rps") && med.("margay-base-plain", "rps")

        lines << format("- %s, plain HTTP, margay-plain vs margay-base-plain: %.2fx req/s", key,
                        med.("margay-plain", "rps") / med.("margay-base-plain", "rps"))
      end
      lines.join("\n") << "\n"
    end
  end
end

exit MargayBench::TlsBench.new(ARGV).run if $PROGRAM_NAME == __FILE__
