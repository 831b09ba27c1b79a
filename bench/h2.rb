#!/usr/bin/env ruby
# frozen_string_literal: true

# HTTP/2 hello world measured with h2load (nghttp2-client): Margay over TLS (ALPN h2) and h2c
# (prior knowledge), Margay's own TLS HTTP/1.1, nginx (1 worker, the same certificate), Itsi
# (default mode, 1 worker) and Falcon (1 process), over TLS and h2c each, single process,
# fresh for each measurement, alternated round by round, for an RSA-2048 and an ECDSA P-256
# certificate (made with the openssl CLI). Each measurement: h2load -c C -m M, a warm-up
# (--warm-up-time, min(2 s, --seconds)) then --seconds measured (-D). Reports per round
# req/s, the mean and max time for a request (h2load prints min/max/mean/sd, no
# percentiles), the server's RSS after the run, and the medians' ratios against each peer
# with the bars (>= 1.2x Itsi, >= 3x Falcon, >= 0.5x nginx, >= 1.0x Margay's TLS HTTP/1.1).
#
# margay-h1 is h2load --h1 with -m 1 over TLS (one request in flight per connection, no
# pipelining: what HTTP/1.1 clients do), the same client and the same figures as the h2 rows;
# it is measured once per key and round and each -m's HTTP/2 rows are compared with it.
# h2load keeps its connections for the whole run and does not reconnect when a server closes
# one, so the servers' per-connection request caps are lifted (Margay's
# max_keepalive_requests, nginx's keepalive_requests; Itsi and Falcon have none).
#
#   bundle exec ruby bench/h2.rb [--rounds 3] [--seconds 10] [--connections 64] [--streams 10,100]
#                                [--keys rsa,ecdsa] [--servers margay-h2,margay-h2c,margay-h1,...]
#                                [--baseline DIR] [--results-dir DIR]
#
# --baseline DIR: another Margay checkout (its extension compiled) also runs, started with its
# own exe/ and lib/, as margay-base-h2, margay-base-h2c and margay-base-h1 beside each Margay
# server asked for, in the same rotation; the medians' lines compare each Margay row with it.
#
# Writes DIR/h2-<time>.json and .md (DIR: bench/results/h2-<UTC date>).
require "open3"
require "optparse"
require "tmpdir"
require_relative "lib/certificates"
require_relative "lib/h2load"
require_relative "lib/machine"
require_relative "lib/procs"
require_relative "lib/result_files"
require_relative "lib/servers"
require_relative "lib/stats"

module MargayBench
  class H2Bench
    APP = "bench/apps/hello.ru"
    # server => the protocol h2load must end up speaking with it (TLS: h2 and http/1.1).
    SERVERS = {
      "margay-h2" => "h2", "margay-h2c" => "h2c", "margay-h1" => "http/1.1", "nginx-h2" => "h2",
      "nginx-h2c" => "h2c", "itsi-h2" => "h2", "itsi-h2c" => "h2c", "falcon-h2" => "h2", "falcon-h2c" => "h2c"
    }.freeze
    WHAT = {
      "margay" => "Margay, single process, default threads, `max_keepalive_requests` lifted; `ssl://...&http2=true` " \
                  "(h2), `tcp://...?http2=true` (h2c), `ssl://` without http2 (h1)",
      "nginx" => "nginx, 1 worker, `return 200`, `listen ... ssl http2` / `listen ... http2` (h2c with prior " \
                 "knowledge only), TLS 1.2-1.3, `keepalive_requests` lifted",
      "itsi" => "Itsi (hyper, rustls), 1 worker in its default mode (blocking, 1 thread), `https://...?cert=&key=` " \
                "(ALPN h2) / `http://` (hyper reads the preface), request backlog 4096",
      "falcon" => "Falcon (async-http), `--forked -n 1`; TLS through `falcon host` with its Rack and TLS " \
                  "environments (Falcon's TLS environment pins TLS 1.2), h2c on `falcon serve -b http://`"
    }.freeze
    # The bars: Margay's HTTP/2 req/s over each peer's, at least.
    BARS = { "itsi" => 1.2, "falcon" => 3.0, "nginx" => 0.5, "margay-h1" => 1.0 }.freeze
    # Far above what one connection carries in a run: h2load does not reconnect.
    MAX_REQUESTS = 100_000_000

    def initialize(argv)
      @o = { rounds: 3, seconds: 10, connections: 64, streams: [10, 100], keys: Certificates::KEYS.keys,
             servers: SERVERS.keys, results_dir: File.join(ROOT, "bench/results", "h2-#{Time.now.utc.strftime('%Y%m%d')}") }
      OptionParser.new do |p|
        %i[rounds seconds connections].each { |k| p.on("--#{k} N", Integer) { |v| @o[k] = v } }
        p.on("--streams LIST", Array) { |v| @o[:streams] = v.map { |s| Integer(s) } }
        %i[keys servers].each { |k| p.on("--#{k} LIST", Array) { |v| @o[k] = v } }
        p.on("--results-dir DIR") { |v| @o[:results_dir] = File.expand_path(v) }
        p.on("--baseline DIR") { |v| @o[:baseline] = File.expand_path(v) }
      end.parse!(argv)
      unknown = @o[:servers] - SERVERS.keys
      abort "bench/h2.rb: unknown servers #{unknown.join(', ')} (known: #{SERVERS.keys.join(', ')})" if unknown.any?
      unknown = @o[:keys] - Certificates::KEYS.keys
      abort "bench/h2.rb: unknown keys #{unknown.join(', ')}" if unknown.any?
      return unless @o[:baseline]

      @o[:servers] = @o[:servers].flat_map { |s| s.start_with?("margay-") ? [s, s.sub("margay-", "margay-base-")] : [s] }
    end

    def run
      abort "bench/h2.rb: needs h2load (apt-get install nghttp2-client)" unless Env.which("h2load")
      abort "bench/h2.rb: needs openssl" unless Env.which("openssl")
      @skipped = unavailable
      @skipped.each { |server, why| warn "[h2] skipping #{server}: #{why}" }
      servers = @o[:servers] - @skipped.keys
      rows = []
      Dir.mktmpdir("margay-h2-") do |tmp|
        @tmp = tmp
        certs = @o[:keys].to_h { |key| [key, Certificates.make(tmp, key, who: "bench/h2.rb")] }
        @o[:rounds].times do |round|
          # TLS servers once per key; h2c servers once per round (no certificate)
          [*@o[:keys].map { |k| [k, servers.reject { |s| proto(s) == "h2c" }] }, ["none", servers.select { |s| proto(s) == "h2c" }]]
            .each do |key, group|
              group.rotate(round).each do |server|
                (h1?(server) ? [1] : @o[:streams]).each do |m|
                  rows << measure(server, key, certs[key], m, round + 1)
                end
              end
            end
        end
      end
      ResultFiles.write("h2", @o, rows, markdown(rows),
                        head: { "skipped" => @skipped, "what" => WHAT, "versions" => versions })
      rows.any? { |r| r["error"] } ? 1 : 0
    end

    private

    # The protocol h2load must end up speaking with +server+ (a margay-base- one as its margay- twin).
    def proto(server) = SERVERS.fetch(server.sub("margay-base-", "margay-"))

    def h1?(server) = server.end_with?("-h1") && server.start_with?("margay-")

    # server => why it cannot run here, for the servers asked for.
    def unavailable
      lock = File.read(File.join(BENCH, "Gemfile.lock")) if File.exist?(File.join(BENCH, "Gemfile.lock"))
      nginx_v = Env.which("nginx") && Open3.capture2e(Env.which("nginx"), "-V").first
      gems = { "itsi" => "itsi-server", "falcon" => "falcon" }
      @o[:servers].filter_map do |server|
        family = server.split("-").first
        why = case family
              when "nginx"
                if nginx_v.nil? then "nginx is not installed"
                elsif !nginx_v.include?("--with-http_v2_module") then "this nginx was built without http_v2_module"
                end
              when "itsi", "falcon"
                if lock.nil? || Machine.locked(lock, gems[family]).nil? then "#{gems[family]} is not in bench/Gemfile.lock"
                elsif !runs?(family)
                  "`#{family} --version` fails under bench/Gemfile on Ruby #{RUBY_VERSION}" +
                    (family == "falcon" ? " (run it on Ruby 3.3: the chroot .ci/ruby33)" : "")
                end
              end
        [server, why] if why
      end.to_h
    end

    def runs?(family)
      @runs ||= {}
      @runs.fetch(family) do
        @runs[family] = system(bench_env, "bundle", "exec", family, "--version", chdir: ROOT, unsetenv_others: true,
                                                                                 %i[out err] => File::NULL)
      end
    end

    def bench_env
      Env.clean.merge("BUNDLE_GEMFILE" => File.join(BENCH, "Gemfile"))
    end

    def measure(server, key, cert, streams, round)
      port = Env.free_port
      label = "#{server}-#{key}-m#{streams}-#{round}"
      log = File.join(@tmp, "#{label}.log")
      argv, chdir, env = command(server, port, cert, label)
      row = { "key" => key, "round" => round, "server" => server, "streams" => streams }
      pid = Procs.spawn_server(env, argv, log, chdir: chdir)
      begin
        started(pid, port, log)
        row.merge!(run_h2load(server, port, streams, label))
        row["rss_mib"] = Procs.rss_kib(pid).first / 1024.0
        if row["protocol"] != proto(server)
          row["error"] = "h2load spoke #{row['protocol'].inspect}, not #{proto(server)}"
        elsif row["requests"].zero? || (row["failed"] + row["errored"] + row["timeout"] + row["non_2xx"]).positive?
          row["error"] = "#{row['requests']} requests done, #{row['failed']} failed, #{row['errored']} errored, " \
                         "#{row['timeout']} timed out, #{row['non_2xx']} not 2xx"
        end
      rescue RuntimeError => e
        row["error"] = e.message
      ensure
        Procs.stop_group(pid)
      end
      report(row, log)
      row
    end

    # Waits up to 60 s for the server to accept connections (a TLS or h2c-only listener
    # answers no plain GET; h2load's warm-up absorbs the rest of a start); raises with the
    # last lines of its +log+ if it never does or exits.
    def started(pid, port, log)
      deadline = Procs.now + 60
      until Env.listening?(port)
        raise "never listened; its log:\n#{File.read(log).lines.last(15).join}" if Procs.now > deadline || !Procs.alive?(pid)

        sleep 0.1
      end
    end

    def run_h2load(server, port, streams, label)
      scheme = proto(server) == "h2c" ? "http" : "https"
      warm_up = [2, @o[:seconds]].min
      H2load.run(H2load.argv(url: "#{scheme}://127.0.0.1:#{port}/", connections: @o[:connections], streams: streams,
                             seconds: @o[:seconds], warm_up: warm_up, h1: h1?(server)),
                 out_path: File.join(@tmp, "#{label}.h2load"), bound: @o[:seconds] + warm_up + 30)
    end

    def report(row, log)
      if row["error"]
        warn format("[h2] %-5s round %d %-15s -m%-3d FAILED: %s (log %s)", row["key"], row["round"], row["server"],
                    row["streams"], row["error"], log)
      else
        warn format("[h2] %-5s round %d %-15s -m%-3d %8.0f req/s  mean %7.2f ms  max %7.2f ms  RSS %5.1f MiB  %s %s",
                    row["key"], row["round"], row["server"], row["streams"], row["rps"], row["mean_ms"], row["max_ms"],
                    row["rss_mib"], row["protocol"], row["tls"])
      end
    end

    # [argv, working directory, environment] to start +server+ on +port+.
    def command(server, port, cert, label)
      app = File.expand_path(APP, ROOT)
      family = server.split("-").first
      mode = server.split("-").last
      tls = mode != "h2c"
      case family
      when "margay"
        conf = File.join(@tmp, "#{label}-margay.rb")
        File.write(conf, "max_keepalive_requests #{MAX_REQUESTS}\n")
        query = { "h2" => "&http2=true", "h1" => "" }
        bind = tls ? "ssl://127.0.0.1:#{port}?cert=#{cert[0]}&key=#{cert[1]}#{query.fetch(mode)}" : "tcp://127.0.0.1:#{port}?http2=true"
        exe = server.start_with?("margay-base-") ? File.join(@o[:baseline], "exe", "margay") : "exe/margay"
        [Servers.margay(port, app, exe: exe, bind: bind, extra: ["-C", conf]), ROOT, Env.clean]
      when "nginx"
        argv, = Servers.nginx(port, workers: 1, tmp: @tmp, nginx: Env.which("nginx"), tls: (cert if tls), http2: true,
                                    keepalive_requests: MAX_REQUESTS)
        [argv, ROOT, Env.clean]
      when "itsi"
        bind = tls ? "https://127.0.0.1:#{port}?cert=#{cert[0]}&key=#{cert[1]}" : "http://127.0.0.1:#{port}"
        # Itsi writes .itsi.pid into its working directory: the tmp dir, not the checkout
        [Servers.itsi(port, app, workers: 1, conf: File.join(@tmp, "#{label}-itsi.rb"), fibers: false, bind: bind),
         @tmp, bench_env]
      when "falcon"
        argv = if tls
                 Servers.falcon_tls(port, app, processes: 1, cert: cert[0], key: cert[1],
                                               conf: File.join(@tmp, "#{label}-falcon.rb"))
               else
                 Servers.falcon(port, app, processes: 1)
               end
        [argv, ROOT, bench_env]
      end
    end

    def versions
      lock = File.exist?(File.join(BENCH, "Gemfile.lock")) ? File.read(File.join(BENCH, "Gemfile.lock")) : ""
      { "h2load" => Open3.capture2e("h2load", "--version").first.strip, "openssl" => Open3.capture2e("openssl", "version").first.strip,
        "nginx" => Env.which("nginx") && Open3.capture2e(Env.which("nginx"), "-v").first.strip,
        "itsi-server" => Machine.locked(lock, "itsi-server"), "falcon" => Machine.locked(lock, "falcon"),
        "ruby" => RUBY_DESCRIPTION }
    end

    def markdown(rows)
      lines = ["## HTTP/2 hello world, `h2load -t2 -c#{@o[:connections]} -m{#{@o[:streams].join(',')}} " \
               "-D#{@o[:seconds]}`, #{@o[:rounds]} rounds, servers alternated, single process each", ""]
      lines += WHAT.map { |name, what| "- #{name}: #{what}" }
      lines << "- margay-base: the same, from #{@o[:baseline]} (its own exe/ and lib/)" if @o[:baseline]
      lines += ["- margay-h1: `h2load --h1 -m1` over TLS (no pipelining); its row is compared with every -m",
                "- latency: h2load's time for a request, mean and max (it prints no percentiles)",
                "- RSS: the server's process tree after the run"]
      lines += @skipped.map { |server, why| "- skipped #{server}: #{why}" }
      lines += ["", "| key | round | server | -m | req/s | mean ms | max ms | RSS MiB | protocol | TLS |",
                "|---|---:|---|---:|---:|---:|---:|---:|---|---|"]
      rows.each do |r|
        lines << if r["error"]
                   format("| %s | %d | %s | %d | failed: %s | | | | | |", r["key"], r["round"], r["server"], r["streams"],
                          r["error"].lines.first.strip)
                 else
                   format("| %s | %d | %s | %d | %.0f | %.2f | %.2f | %.1f | %s | %s |", r["key"], r["round"], r["server"],
                          r["streams"], r["rps"], r["mean_ms"], r["max_ms"], r["rss_mib"], r["protocol"], r["tls"] || "-")
                 end
      end
      (lines + ["", "Medians, Margay's HTTP/2 over each peer: req/s (bar), mean latency, RSS", ""] + ratios(rows))
        .join("\n") << "\n"
    end

    # One line per Margay HTTP/2 mode, key, -m and peer.
    def ratios(rows)
      good = rows.reject { |r| r["error"] }
      med = lambda do |server, key, m, field|
        Stats.median(good.select { |r| r["server"] == server && r["key"] == key && r["streams"] == m }.map { |r| r[field] })
      end
      @o[:streams].product(%w[h2 h2c]).flat_map do |m, mode|
        keys = mode == "h2" ? @o[:keys] : ["none"]
        keys.flat_map do |key|
          mine = ->(field) { med.("margay-#{mode}", key, m, field) }
          next [] unless mine.("rps")

          peers = %w[itsi falcon nginx].map { |p| ["#{p}-#{mode}", key, m, BARS[p]] }
          # h2c against the TLS HTTP/1.1 of each key: the bar does not say which
          h1_keys = mode == "h2" ? [key] : @o[:keys]
          peers += h1_keys.map { |k| ["margay-h1", k, 1, BARS["margay-h1"]] }
          peers << ["margay-base-#{mode}", key, m, nil] if @o[:baseline]
          peers.filter_map do |peer, pkey, pm, bar|
            next unless med.(peer, pkey, pm, "rps")

            ratio = mine.("rps") / med.(peer, pkey, pm, "rps")
            format("- margay-%s %s -m%d vs %s%s: %.2fx req/s%s, mean %.2fx, RSS %.2fx", mode, key, m, peer,
                   pkey == key ? "" : " (#{pkey})", ratio, bar ? format(" (bar >= %.1fx: %s)", bar, ratio >= bar ? "met" : "not met") : "",
                   mine.("mean_ms") / med.(peer, pkey, pm, "mean_ms"), mine.("rss_mib") / med.(peer, pkey, pm, "rss_mib"))
          end
        end
      end
    end
  end
end

exit MargayBench::H2Bench.new(ARGV).run if $PROGRAM_NAME == __FILE__
