# frozen_string_literal: true

require "fileutils"
require_relative "procs"

module MargayBench
  # The catalogue of servers the bench runners start: each server's command line is spelled
  # here once, as the argv of `bundle exec` (the runner picks the Gemfile, the working
  # directory and the environment). +port+ and +app+ may be placeholders ("PORT", "APP")
  # when a runner records the command it would run. Files a server needs (Itsi's, Unicorn's,
  # Pitchfork's config, nginx's prefix) are written under +tmp+.
  module Servers
    # Itsi's default request backlog (30 x threads) answers 503 to what does not fit
    # (measured: 119 of 1500 requests from 300 concurrent clients), which wrk would count
    # as served: raised so that every peer queues.
    ITSI_CONFIG = "ruby_thread_request_backlog_size 4096\n"

    module_function

    # Margay from +exe+ (this checkout's exe/margay, or a baseline's). +quiet+: "-q", "-s"
    # or nil; +extra+: further flags (--fibers, --preload, --no-config, -C FILE); +bind+: another
    # URL on +port+ (ssl://...).
    def margay(port, app, exe: "exe/margay", quiet: "-q", workers: nil, threads: nil, extra: [],
               bind: "tcp://127.0.0.1:#{port}")
      %W[bundle exec #{exe} -b #{bind} -e production] + [*quiet] + flag("-w", workers) +
        flag("-t", threads) + extra + [app]
    end

    # Puma; +config+ "-" reads no config/puma.rb (nil: Puma's own lookup); +extra+: --preload,
    # --fork-worker=0; +bind+ as Margay's.
    def puma(port, app, config: "-", quiet: "-q", workers: nil, threads: nil, extra: [],
             bind: "tcp://127.0.0.1:#{port}")
      %W[bundle exec puma -b #{bind} -e production] + flag("-C", config) + [*quiet] +
        flag("-w", workers) + flag("-t", threads) + extra + [app]
    end

    # Falcon's forked model: +processes+ processes, a fiber per request. On http:// it serves
    # HTTP/1.1 and h2c with prior knowledge (async-http reads the preface).
    def falcon(port, app, processes:)
      %W[bundle exec falcon serve -b http://127.0.0.1:#{port} --forked -n #{processes} -c #{app}]
    end

    # Falcon over TLS with the certificate +cert+ and its key +key+ (RSA or EC), ALPN h2 and
    # http/1.1, +processes+ processes: `falcon serve` takes no certificate (it makes its own
    # with the localhost gem), so this is `falcon host` with a service file written to +conf+
    # that includes Falcon's Rack and TLS environments (its TLS environment pins TLS 1.2).
    def falcon_tls(port, app, processes:, cert:, key:, conf:)
      File.write(conf, <<~RUBY)
        # frozen_string_literal: true

        require "falcon/environment/rack"
        require "falcon/environment/tls"

        service "bench" do
          include Falcon::Environment::Rack
          include Falcon::Environment::TLS

          rackup_path #{File.expand_path(app, ROOT).inspect}
          ssl_certificate_path #{cert.inspect}
          ssl_private_key_path #{key.inspect}
          ssl_private_key { OpenSSL::PKey.read(File.read(ssl_private_key_path)) }
          url "https://127.0.0.1:#{port}"
          endpoint { Async::HTTP::Endpoint.parse(url).with(ssl_context: ssl_context, **endpoint_options) }
          count #{processes}
        end
      RUBY
      %W[bundle exec falcon host #{conf}]
    end

    # Itsi, +workers+ workers, backlog raised (ITSI_CONFIG written to +conf+); +fibers+: its
    # fiber-scheduler mode (-f), else its default (blocking, one thread). +bind+: another URL
    # on +port+ (https://...?cert=&key=); on http:// and https:// alike hyper serves HTTP/1.1
    # and HTTP/2 (ALPN h2 over TLS, the preface on plain TCP).
    def itsi(port, app, workers:, conf:, fibers: true, bind: "http://127.0.0.1:#{port}")
      File.write(conf, ITSI_CONFIG)
      %W[bundle exec itsi -C #{conf} -b #{bind} -w #{workers}] + (fibers ? ["-f"] : []) +
        %W[-r #{File.expand_path(app, ROOT)}]
    end

    def iodine(port, app, workers:, threads:)
      %W[bundle exec iodine -b 127.0.0.1 -p #{port} -w #{workers} -t #{threads} #{app}]
    end

    def unicorn(port, app, workers:, tmp:)
      conf = File.join(tmp, "unicorn-#{port}.rb")
      File.write(conf, "worker_processes #{workers}\npreload_app true\nlisten \"127.0.0.1:#{port}\", backlog: 1024\n" \
                       "timeout 60\n")
      %W[bundle exec unicorn -E production -c #{conf} #{app}]
    end

    def pitchfork(port, app, workers:, tmp:)
      conf = File.join(tmp, "pitchfork-#{port}.rb")
      File.write(conf, "worker_processes #{workers}\nlisten \"127.0.0.1:#{port}\", backlog: 1024\ntimeout 60\n")
      %W[bundle exec pitchfork -E production -c #{conf} #{app}]
    end

    def agoo(port, app, workers:, threads:)
      %W[bundle exec agoo -p #{port} -b http://127.0.0.1:#{port} -w #{workers} -t #{threads} -s #{app}]
    end

    # Thin: one EventMachine process, --threaded with a pool of +threads+.
    def thin(port, app, threads:)
      %W[bundle exec thin start -a 127.0.0.1 -p #{port} -e production -R #{app} --threaded --threadpool-size #{threads} -q]
    end

    # nginx serving bench/nginx/hello.conf on +port+ with +workers+ workers, its prefix a new
    # folder under +tmp+: [argv, prefix]. +tls+: [certificate, key] (TLS 1.2-1.3); +http2+:
    # HTTP/2 on the listener (ALPN h2 with +tls+, else h2c with prior knowledge only);
    # +keepalive_requests+: requests (HTTP/2: streams) per connection instead of hello.conf's.
    def nginx(port, workers:, tmp:, nginx:, tls: nil, http2: false, keepalive_requests: nil)
      prefix = File.join(tmp, "nginx-#{port}")
      FileUtils.mkdir_p(prefix)
      listen = ["listen 127.0.0.1:#{port}", *("ssl" if tls), *("http2" if http2)].join(" ")
      listen += ";\n        ssl_certificate #{tls[0]};\n        ssl_certificate_key #{tls[1]};\n" \
                "        ssl_protocols TLSv1.2 TLSv1.3" if tls
      conf = File.read(File.join(BENCH, "nginx", "hello.conf")).gsub("__PORT__", port.to_s)
                 .sub(/^worker_processes \d+;/, "worker_processes #{workers};")
                 .sub("listen 127.0.0.1:#{port}", listen)
      conf = conf.sub(/^(\s*keepalive_requests) \d+;/, "\\1 #{keepalive_requests};") if keepalive_requests
      File.write(File.join(prefix, "nginx.conf"), conf)
      [[nginx, "-p", "#{prefix}/", "-c", File.join(prefix, "nginx.conf"), "-e", "stderr"], prefix]
    end

    def flag(name, value)
      value ? [name, value.to_s] : []
    end
  end
end
