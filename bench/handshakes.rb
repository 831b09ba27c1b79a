#!/usr/bin/env ruby
# frozen_string_literal: true

# New TLS connections: Margay with an ssl:// bind against nginx (1 worker, the same
# certificate, TLS 1.2-1.3) and Puma 8 with the same bind, single process each, alternated
# round by round, for an RSA-2048 and an ECDSA P-256 certificate. Per server and round:
#
#   full      new connections per second, each a full handshake and one GET / answered with
#             `connection: close` (`wrk -H "Connection: close"`: wrk resumes no session)
#   resumed   the same with the session resumed: 4 `openssl s_time -reuse` clients at once
#             (each reconnects with the session of its first connection), connections per
#             second of wall time, summed
#   ticker    Margay and Puma only: a Ruby thread of pure computation in the app
#             (bench/apps/ticker.ru); its rate while wrk makes full handshakes to a path no
#             Ruby code answers (Margay: `--health-check-path /up`, answered by the engine;
#             Puma has no such path, so its storm goes to its app), over its rate alone: how
#             much of the Ruby VM the handshakes take. Load generator and server share the
#             machine's cores, so a ratio below 1 is also the CPU the storm takes.
#   idle      with --idle N: N TLS connections opened and left idle after one request each
#             (keep-alive), the server's RSS growth per connection still open (Margay and nginx,
#             its worker_connections raised above N; Puma with --idle-servers)
#
#   bundle exec ruby bench/handshakes.rb [--rounds 3] [--seconds 5] [--connections 32]
#                                        [--keys rsa,ecdsa] [--servers margay,nginx,puma]
#                                        [--idle 10000] [--idle-servers margay,nginx]
#                                        [--results-dir DIR]
#
# Writes DIR/handshakes-<time>.json and .md (DIR: bench/results/handshakes-<UTC date>).
require "json"
require "openssl"
require "optparse"
require "socket"
require "time"
require "tmpdir"
require_relative "lib/certificates"
require_relative "lib/procs"
require_relative "lib/servers"
require_relative "lib/stats"
require_relative "lib/result_files"
require_relative "lib/wrk"

module MargayBench
  class HandshakesBench
    APP = "bench/apps/ticker.ru"
    SERVERS = %w[margay nginx puma].freeze
    RESUMERS = 4
    TICK_SECONDS = 3

    def initialize(argv)
      @o = { rounds: 3, seconds: 5, connections: 32, keys: Certificates::KEYS.keys, servers: SERVERS, idle: 0,
             idle_servers: %w[margay nginx],
             results_dir: File.join(ROOT, "bench/results", "handshakes-#{Time.now.utc.strftime('%Y%m%d')}") }
      OptionParser.new do |p|
        %i[rounds seconds connections idle].each { |k| p.on("--#{k} N", Integer) { |v| @o[k] = v } }
        %i[keys servers idle_servers].each { |k| p.on("--#{k.to_s.tr('_', '-')} LIST", Array) { |v| @o[k] = v } }
        p.on("--results-dir DIR") { |v| @o[:results_dir] = File.expand_path(v) }
      end.parse!(argv)
    end

    def run
      abort "bench/handshakes.rb: needs wrk, openssl and nginx" unless %w[wrk openssl nginx].all? { |c| Env.which(c) }
      rows = []
      idle = []
      Dir.mktmpdir("margay-handshakes-") do |tmp|
        @o[:keys].each do |key|
          cert, pem = Certificates.make(tmp, key, who: "bench/handshakes.rb")
          @o[:rounds].times do |round|
            @o[:servers].each do |server|
              rows << serve(server, key, cert, pem, tmp) { |port, pid| storm(server, port, pid, tmp) }
                      .merge("key" => key, "round" => round + 1, "server" => server)
              say(rows.last)
            end
          end
          next unless @o[:idle].positive?

          @o[:idle_servers].each do |server|
            idle << serve(server, key, cert, pem, tmp) { |port, pid| hold_idle(port, pid) }
                    .merge("key" => key, "server" => server)
            warn format("[handshakes] %-5s %-7s %d idle TLS connections (%d still open): %.1f KiB each", key, server,
                        idle.last["connections"], idle.last["still_open"], idle.last["kib_per_connection"].to_f)
          end
        end
      end
      ResultFiles.write("handshakes", @o, rows, markdown(rows, idle), head: { "idle" => idle })
      0
    end

    private

    def say(row)
      warn format("[handshakes] %-5s round %d %-7s full %6.0f/s  resumed %6.0f/s  ticker %s", row["key"], row["round"],
                  row["server"], row["full_per_s"], row["resumed_per_s"],
                  row["ticker_ratio"] ? format("%.2f", row["ticker_ratio"]) : "-")
    end

    # Starts +server+, yields [port, pid] once it listens, stops it; the block's Hash.
    def serve(server, key, cert, pem, tmp)
      port = Env.free_port
      log = File.join(tmp, "#{server}-#{key}-#{port}.log")
      argv, env = command(server, port, cert, pem, tmp)
      pid = Procs.spawn_server(env, argv, log, chdir: ROOT)
      begin
        Procs.await_server("bench/handshakes.rb: #{server} on #{port}", log) { Env.listening?(port) }
        yield port, pid
      ensure
        Procs.stop_group(pid)
      end
    end

    def command(server, port, cert, pem, tmp)
      app = File.expand_path(APP, ROOT)
      ssl = "ssl://127.0.0.1:#{port}?cert=#{cert}&key=#{pem}"
      case server
      when "margay" then [Servers.margay(port, app, bind: ssl, extra: %w[--health-check-path /up]), Env.clean]
      when "puma" then [Servers.puma(port, app, bind: ssl), Env.clean.merge("BUNDLE_GEMFILE" => File.join(BENCH, "Gemfile"))]
      when "nginx"
        argv, prefix = Servers.nginx(port, workers: 1, tmp: tmp, nginx: Env.which("nginx"), tls: [cert, pem])
        room_for_idle(File.join(prefix, "nginx.conf"))
        [argv, Env.clean]
      else abort "bench/handshakes.rb: unknown server #{server}"
      end
    end

    # nginx's worker_connections (4096 in bench/nginx/hello.conf) raised above --idle, with the
    # descriptors for them: it would otherwise close what is beyond.
    def room_for_idle(conf)
      want = [@o[:idle] + 1024, 4096].max
      text = File.read(conf).sub(/worker_connections \d+;/, "worker_connections #{want};")
      File.write(conf, text.sub(/^(worker_processes \d+;)/, "\\1\nworker_rlimit_nofile #{[want + 512, 19_500].min};"))
    end

    def storm(server, port, pid, tmp)
      wrk_close(port, "/", 2, tmp) # the pool's growth and the first handshakes out of the way
      full = wrk_close(port, "/", @o[:seconds], tmp)
      row = { "full_per_s" => full["requests"] * 1e6 / full["duration_us"], "full_errors" => full["errors"].values.sum,
              "resumed_per_s" => resumed(port), "rss_mib" => Procs.rss_kib(pid).first / 1024.0 }
      row.merge!(ticker(server, port, tmp)) unless server == "nginx"
      row
    end

    # A wrk run of +seconds+ where every request asks for the connection to close.
    def wrk_close(port, path, seconds, tmp)
      argv = Wrk.argv(threads: 2, connections: @o[:connections], seconds: seconds, timeout: 5,
                      url: "https://127.0.0.1:#{port}#{path}")
      argv.insert(-2, "-H", "Connection: close")
      Wrk.run(argv, out_path: File.join(tmp, "wrk.out"), bound: seconds + 30).first
    end

    # Resumed handshakes per second: RESUMERS s_time clients at once, their connections summed
    # over the wall time they ran.
    def resumed(port)
      started = Procs.now
      outs = Array.new(RESUMERS) do
        Thread.new do
          IO.popen(["timeout", (@o[:seconds] + 20).to_s, "openssl", "s_time", "-connect", "127.0.0.1:#{port}", "-reuse",
                    "-time", @o[:seconds].to_s, "-www", "/"], err: File::NULL, &:read)
        end
      end.map(&:value)
      elapsed = Procs.now - started
      outs.sum { |out| out[/^(\d+) connections in [\d.]+ real seconds/, 1].to_i } / elapsed
    end

    # The ticker thread's rate alone, then under a storm of full handshakes on a path the app
    # does not answer where the server has one (Margay's health_check_path).
    def ticker(server, port, tmp)
      tick(port) # starts it
      sleep 0.5
      alone = tick_rate(port) { sleep TICK_SECONDS }
      path = server == "margay" ? "/up" : "/"
      storm = tick_rate(port) { wrk_close(port, path, TICK_SECONDS, tmp) }
      { "ticker_alone_per_s" => alone, "ticker_storm_per_s" => storm, "ticker_ratio" => storm / alone,
        "ticker_storm_path" => path }
    end

    def tick_rate(port)
      t0 = Procs.now
      n0 = tick(port)
      yield
      (tick(port) - n0) / (Procs.now - t0)
    end

    def tick(port)
      Integer(IO.popen(["curl", "-sk", "--max-time", "10", "https://127.0.0.1:#{port}/tick"], &:read))
    end

    # Opens @o[:idle] TLS connections, one request each (kept alive), and measures the server's
    # RSS before and after: KiB per connection.
    def hold_idle(port, pid)
      ctx = OpenSSL::SSL::SSLContext.new
      ctx.verify_mode = OpenSSL::SSL::VERIFY_NONE
      before = Procs.rss_kib(pid).first
      conns = []
      @o[:idle].times do
        tcp = TCPSocket.new("127.0.0.1", port)
        ssl = OpenSSL::SSL::SSLSocket.new(tcp, ctx)
        ssl.sync_close = true
        ssl.connect
        ssl.write("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        ssl.readpartial(4096)
        conns << ssl
      end
      sleep 1
      after = Procs.rss_kib(pid).first
      open = conns.count { |c| c.to_io.wait_readable(0).nil? } # closed by the server: readable (EOF)
      { "connections" => conns.size, "still_open" => open, "rss_before_kib" => before, "rss_after_kib" => after,
        "kib_per_connection" => open.positive? ? (after - before).fdiv(open) : nil }
    ensure
      conns&.each { |c| c.close rescue nil } # rubocop:disable Style/RescueModifier
    end

    def markdown(rows, idle)
      lines = ["## New TLS connections, `wrk -t2 -c#{@o[:connections]} -H 'Connection: close'` (full) and " \
               "#{RESUMERS} x `openssl s_time -reuse` (resumed), #{@o[:seconds]} s each, #{@o[:rounds]} rounds, " \
               "servers alternated", "",
               "| key | round | server | full/s | resumed/s | ticker alone/s | ticker in storm/s | ratio | storm path | errors |",
               "|---|---:|---|---:|---:|---:|---:|---:|---|---:|"]
      rows.each do |r|
        lines << format("| %s | %d | %s | %.0f | %.0f | %s | %s | %s | %s | %d |", r["key"], r["round"], r["server"],
                        r["full_per_s"], r["resumed_per_s"], fig(r["ticker_alone_per_s"]), fig(r["ticker_storm_per_s"]),
                        r["ticker_ratio"] ? format("%.2f", r["ticker_ratio"]) : "-", r["ticker_storm_path"] || "-",
                        r["full_errors"])
      end
      lines += ["", "Medians, Margay over each: full handshakes/s, resumed/s", ""]
      @o[:keys].each do |key|
        med = ->(server, k) { Stats.median(rows.select { |r| r["key"] == key && r["server"] == server }.map { |r| r[k] }) }
        (@o[:servers] - ["margay"]).each do |other|
          next unless med.(other, "full_per_s") && med.("margay", "full_per_s")

          lines << format("- %s, vs %s: full %.2fx, resumed %.2fx", key, other,
                          med.("margay", "full_per_s") / med.(other, "full_per_s"),
                          med.("margay", "resumed_per_s") / med.(other, "resumed_per_s"))
        end
      end
      unless idle.empty?
        lines += ["", "## #{@o[:idle]} idle TLS connections (one request each, kept alive)", "",
                  "| key | server | connections | still open | RSS before MiB | RSS after MiB | KiB per connection |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        idle.each do |r|
          lines << format("| %s | %s | %d | %d | %.1f | %.1f | %.1f |", r["key"], r["server"], r["connections"],
                          r["still_open"], r["rss_before_kib"] / 1024.0, r["rss_after_kib"] / 1024.0, r["kib_per_connection"].to_f)
        end
      end
      lines.join("\n") << "\n"
    end

    def fig(value) = value ? format("%.0f", value) : "-"
  end
end

exit MargayBench::HandshakesBench.new(ARGV).run if $PROGRAM_NAME == __FILE__
