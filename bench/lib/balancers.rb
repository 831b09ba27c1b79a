# frozen_string_literal: true

require "fileutils"
require "socket"
require_relative "procs"

module MargayBench
  # The load balancers in front of a fleet (bench/rolling.rb and the slow tests): HAProxy and
  # nginx, each started in the root namespace from a config written into +dir+, listening on
  # 127.0.0.1:+port+, with retries off, so that every failure of a backend reaches the client.
  # A backend is { name:, address:, port:, check: } where check is the readiness URL path on
  # +check_port+ (HAProxy's httpchk; nginx open source has no active checks: its backends
  # change by #backends= and a reload, as an orchestrator would do it).
  module Balancers
    # HAProxy: checks every +inter+ ms, a server is down after one failed check and up after
    # two good ones; it reuses idle server connections (http-reuse safe, its default).
    class HAProxy
      attr_reader :port

      def initialize(dir:, port:, backends:, inter: 500)
        @dir = dir
        @port = port
        @backends = backends
        @inter = inter
        @socket = "/tmp/margay-haproxy-#{port}.sock" # short: a unix socket path has room for 107 bytes
        @config = File.join(dir, "haproxy.cfg")
      end

      def config
        servers = @backends.map do |b|
          check = b[:check] ? " check port #{b[:check_port] || b[:port]}" : " check"
          "  server #{b[:name]} #{b[:address]}:#{b[:port]}#{check}"
        end
        path = @backends.first[:check] || "/"
        <<~CFG
          global
            stats socket #{@socket} mode 600 level admin
            maxconn 4096
            log stdout format raw local0
          defaults
            mode http
            log global
            option httplog
            option dontlog-normal
            timeout connect 2s
            timeout client 30s
            timeout server 30s
            timeout http-keep-alive 30s
            retries 0
            retry-on none
          frontend web
            bind 127.0.0.1:#{@port}
            default_backend fleet
          backend fleet
            balance roundrobin
            option httpchk GET #{path}
            http-check expect status 200
            default-server inter #{@inter}ms fall 1 rise 2
          #{servers.join("\n")}
        CFG
      end

      def start(log)
        File.write(@config, config)
        @pid = Process.spawn("haproxy", "-db", "-f", @config, in: File::NULL, %i[out err] => [log, "w"], pgroup: true)
        wait_until(10) { status.size == @backends.size }
        raise "haproxy did not start: #{File.read(log).lines.last(10).join}" unless status.size == @backends.size

        self
      end

      # { server name => HAProxy's status ("UP", "DOWN", "DRAIN", "MAINT", "UP 1/2"...) }.
      def status
        lines = UNIXSocket.open(@socket) { |s| s.write("show stat\n") && s.read }.lines
        head = lines.first.delete_prefix("# ").split(",")
        col = head.index("status")
        lines.drop(1).map { |l| l.split(",") }.select { |f| f[0] == "fleet" && !%w[FRONTEND BACKEND].include?(f[1]) }
             .to_h { |f| [f[1], f[col]] }
      rescue SystemCallError, IOError
        {}
      end

      def stop
        Procs.stop_group(@pid, grace: 5) if @pid
        FileUtils.rm_f(@socket)
      end

      private

      def wait_until(seconds)
        deadline = Procs.now + seconds
        sleep 0.05 until yield || Procs.now > deadline
      end
    end

    # nginx as a reverse proxy with keep-alive to its upstreams and proxy_next_upstream off.
    class Nginx
      attr_reader :port

      def initialize(dir:, port:, backends:)
        @dir = dir
        @port = port
        @backends = backends
        @config = File.join(dir, "nginx.conf")
      end

      def config
        servers = @backends.map { |b| "    server #{b[:address]}:#{b[:port]};" }
        <<~CONF
          worker_processes 1;
          pid #{@dir}/nginx.pid;
          error_log #{@dir}/logs/error.log warn;
          events { worker_connections 4096; }
          http {
            access_log off;
            upstream fleet {
          #{servers.join("\n")}
              keepalive 32;
            }
            server {
              listen 127.0.0.1:#{@port};
              location / {
                proxy_pass http://fleet;
                proxy_http_version 1.1;
                proxy_set_header Connection "";
                proxy_next_upstream off;
              }
            }
          }
        CONF
      end

      def start(log)
        FileUtils.mkdir_p(File.join(@dir, "logs"))
        File.write(@config, config)
        @pid = Process.spawn("nginx", "-p", @dir, "-c", @config, "-g", "daemon off;", in: File::NULL,
                                                                                        %i[out err] => [log, "w"], pgroup: true)
        self
      end

      # The orchestrator's part: the fleet's members change, nginx reloads (its old workers
      # finish their requests).
      def backends=(backends)
        @backends = backends
        File.write(@config, config)
        Process.kill(:HUP, @pid)
      end

      def stop
        Procs.stop_group(@pid, grace: 5) if @pid
      end
    end
  end
end
