#!/usr/bin/env ruby
# frozen_string_literal: true

# Hostile-client benchmark (docs/SECURITY.md, "Measured under attack").
#
# For each attack, against a fresh server started from the real executable
# with default settings: the attack runs in a forked process (or slowhttptest),
# and after --settle seconds a normal client in this process sends sequential
# keep-alive GETs for --duration seconds, recording each latency. A request
# that gets no answer within --request-timeout is an error (the client then
# reconnects). Reported per attack: requests, p50/p99/max latency, errors, the
# server's CPU seconds during the measurement, and whether it was still alive.
#
#   ruby bench/attacks.rb [--servers margay,puma] [--attacks slowloris,slow-body,...]
#                         [--duration 20] [--settle 3] [--threads MIN:MAX] [--json PATH]
#
# Attacks (all on loopback; every loop is bounded by the run's deadline):
#   baseline        no attack
#   slowloris       1000 connections, a request head that never ends, one header line every 5 s
#   slow-body       500 POSTs of Content-Length 10 MB, 10 bytes per second each
#   slow-read       50 connections asking for a 16 MiB Array body and never reading
#   slow-read-stream 20 connections asking for a 16 MiB streamed (each) body and never reading
#   idle-keepalive  2000 keep-alive connections, one request each, then idle
#   flood           server started with RLIMIT_NOFILE 1024; 2000 connections opened and held
#                   (the normal client's connection is opened before the flood)
#   disconnects     clients leaving mid-head, mid-body (tempfile-sized) and mid-response, ~300/s
#   pipelining-hog  one connection pipelining 4 GET /cpu (50 ms of Ruby each) every 150 ms (more than
#                   a core's worth: its backlog keeps growing); the normal client opens a fresh
#                   connection for each of its own GET /cpu (issue 12 §1, CVE-2019-16770's class).
#                   Also reported: how many responses the hog got (it must still be served).
#   sht-slowloris, sht-slow-body, sht-slow-read  the same three with slowhttptest (Debian package)
#
# Puma (`--servers puma`) runs `puma -t 0:5` from bench/Gemfile (bundle install --gemfile bench/Gemfile).

require "fileutils"
require "json"
require "optparse"
require "rbconfig"
require "socket"
require "tmpdir"
require_relative "lib/attacks"
require_relative "lib/machine"
require_relative "lib/stats"
require_relative "lib/target_server"

module MargayBench
  # A normal client: sequential keep-alive GETs, each timed.
  class Probe
    Result = Struct.new(:latencies, :errors, keyword_init: true) do
      def summary
        sorted = latencies.sort
        { requests: latencies.size, errors: errors,
          p50_ms: ms(Stats.percentile(sorted, 50)), p99_ms: ms(Stats.percentile(sorted, 99)), max_ms: ms(latencies.max) }
      end

      def ms(seconds)
        seconds && (seconds * 1000).round(2)
      end
    end

    # +path+: what it asks for; +fresh+: a new connection for every request.
    def initialize(port, timeout: 5.0, pause: 0.005, path: "/", fresh: false)
      @port = port
      @timeout = timeout
      @pause = pause
      @request = "GET #{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
      @fresh = fresh
      @sock = nil
    end

    # Open the keep-alive connection now (before an attack fills the server).
    def connect
      @sock ||= TCPSocket.new("127.0.0.1", @port)
    end

    def run(duration)
      latencies = []
      errors = 0
      deadline = Procs.now + duration
      while Procs.now < deadline
        started = Procs.now
        if get
          latencies << Procs.now - started
          reset if @fresh
        else
          errors += 1
          reset
        end
        sleep @pause
      end
      Result.new(latencies: latencies, errors: errors)
    ensure
      reset
    end

    private

    def reset
      @sock&.close
      @sock = nil
    end

    # One request; true for a complete 200.
    def get
      connect_within
      @sock.write(@request)
      buf = +""
      deadline = Procs.now + @timeout
      until (head_end = buf.index("\r\n\r\n"))
        return false unless read_more(buf, deadline)
      end
      length = buf[/^content-length:\s*(\d+)/i, 1].to_i
      read_more(buf, deadline) while buf.bytesize < head_end + 4 + length
      reset if buf[0, head_end].match?(/^connection:\s*close/i) # e.g. after max_keepalive_requests
      buf.start_with?("HTTP/1.1 200")
    rescue SystemCallError, IOError, EOFError
      false
    end

    def connect_within
      return if @sock

      sock = Socket.new(:INET, :STREAM)
      addr = Socket.sockaddr_in(@port, "127.0.0.1")
      if sock.connect_nonblock(addr, exception: false) == :wait_writable
        raise Errno::ETIMEDOUT unless sock.wait_writable(@timeout)

        sock.connect_nonblock(addr, exception: false)
      end
      @sock = sock
    end

    def read_more(buf, deadline)
      left = deadline - Procs.now
      raise EOFError if left <= 0 || !@sock.wait_readable(left)

      chunk = @sock.read_nonblock(65_536, exception: false)
      raise EOFError if chunk.nil?

      buf << chunk if chunk.is_a?(String)
      true
    end
  end

  # Runs every (server, attack) pair and reports.
  class AttackBench
    Options = Struct.new(:servers, :attacks, :duration, :settle, :threads, :json, keyword_init: true)

    def self.parse(argv)
      opts = Options.new(servers: %w[margay], attacks: ATTACKS.keys, duration: 20.0, settle: 3.0, threads: nil, json: nil)
      OptionParser.new do |o|
        o.banner = "usage: #{$PROGRAM_NAME} [options]"
        o.on("--servers LIST", Array, "margay,puma (default margay)") { |v| opts.servers = v }
        o.on("--attacks LIST", Array, "subset of #{ATTACKS.keys.join(',')}") { |v| opts.attacks = v }
        o.on("--duration S", Float, "seconds of measured requests per attack (20)") { |v| opts.duration = v }
        o.on("--settle S", Float, "seconds between starting the attack and measuring (3)") { |v| opts.settle = v }
        o.on("--threads MIN:MAX", "both servers' threads (default: Margay's own, Puma 0:5)") { |v| opts.threads = v }
        o.on("--json PATH", "also write the results as JSON") { |v| opts.json = v }
      end.parse!(argv)
      unknown = opts.attacks - ATTACKS.keys
      raise OptionParser::InvalidArgument, "unknown attack(s): #{unknown.join(', ')}" unless unknown.empty?

      opts
    end

    def initialize(opts)
      @o = opts
      @rows = []
    end

    def run
      if @o.attacks.any? { |a| a.start_with?("sht-") } && !system("command -v slowhttptest >/dev/null")
        abort "slowhttptest is not installed (apt-get install slowhttptest)"
      end
      raise_nofile_limit(8192)
      @o.servers.each do |server|
        @o.attacks.each { |attack| @rows << run_one(server, attack) }
      end
      report
    end

    private

    def run_one(server_name, attack)
      spec = ATTACKS.fetch(attack)
      dir = Dir.mktmpdir("margay-attack-")
      server = TargetServer.new(server_name, dir, nofile: spec[:nofile], threads: @o.threads).start
      probe = Probe.new(server.port, **spec.fetch(:probe, {}))
      probe.connect if spec[:connect_first]
      attacker = start_attack(spec, server.port, dir)
      sleep @o.settle
      cpu = server.cpu
      result = probe.run(@o.duration)
      cpu = server.cpu - cpu
      row = { server: server_name, attack: attack, **result.summary, server_cpu_s: cpu.round(2),
              alive: server.alive?, fds_during: server.fds, rss_mb: (server.rss_kb / 1024.0).round(1) }
      row[:slowhttptest] = finish_attack(attacker, dir)
      row[:attacker] = attacker&.dig(:report) && File.exist?(attacker[:report]) ? JSON.parse(File.read(attacker[:report])) : nil
      warn format_row(row)
      row
    ensure
      finish_attack(attacker, dir) if attacker && !row
      server&.stop
      FileUtils.remove_entry(dir) if dir
    end

    def start_attack(spec, port, dir)
      deadline_in = @o.settle + @o.duration + 2
      if spec[:method]
        report = spec[:report] && File.join(dir, "attack.json")
        pid = fork do
          args = [port, Procs.now + deadline_in]
          args << report if report
          Attacks.public_send(spec[:method], *args)
        ensure
          exit!(0) # no at_exit handlers of the parent in the child
        end
        { pid: pid, report: report }
      elsif spec[:command]
        out = File.join(dir, "slowhttptest.out")
        cmd = spec[:command].call(port, deadline_in.ceil)
        { pid: Process.spawn(*cmd, out: out, err: out), out: out }
      end
    end

    # Stop the attacker; returns slowhttptest's verdict line when there was one.
    def finish_attack(attacker, _dir)
      return nil unless attacker
      return attacker[:verdict] if attacker.key?(:verdict)

      pid = attacker[:pid]
      deadline = Procs.now + 5
      sleep 0.1 while Process.waitpid(pid, Process::WNOHANG).nil? && Procs.now < deadline
      begin
        Process.kill("KILL", pid)
        Process.wait(pid)
      rescue Errno::ESRCH, Errno::ECHILD
        nil
      end
      attacker[:verdict] = attacker[:out] && File.exist?(attacker[:out]) ? verdict(File.read(attacker[:out])) : nil
    end

    # slowhttptest's last status: connections pending/connected/closed and "service available".
    def verdict(output)
      output = output.gsub(/\e\[[\d;]*[A-Za-z]/, "") # colours
      last = output.split(/slow HTTP test status on \d+th second:/).last.to_s
      fields = %w[pending connected error closed].to_h { |k| [k, last[/#{k}:\s+(\d+)/, 1].to_i] }
      fields["service_available"] = last[/service available:\s+(\w+)/, 1]
      fields["exit"] = output[/Exit status: (.*)/, 1]
      fields
    end

    def raise_nofile_limit(wanted)
      soft, hard = Process.getrlimit(:NOFILE)
      Process.setrlimit(:NOFILE, [wanted, hard].min, hard) if soft < wanted
    end

    def format_row(row)
      line = format("%-7s %-17s reqs %6d  p50 %8.2f ms  p99 %8.2f ms  max %8.2f ms  errors %3d  cpu %5.2f s  %s",
                    row[:server], row[:attack], row[:requests], row[:p50_ms] || 0, row[:p99_ms] || 0,
                    row[:max_ms] || 0, row[:errors], row[:server_cpu_s], row[:alive] ? "alive" : "DEAD")
      row[:attacker] ? "#{line}  #{attacker_note(row[:attacker])}" : line
    end

    def attacker_note(report)
      "attacker: #{report['served']} of #{report['sent']} answered"
    end

    def report
      puts "| server | attack | requests | p50 ms | p99 ms | max ms | errors | server CPU s | alive | attacker at the end |"
      puts "|---|---|---:|---:|---:|---:|---:|---:|---|---|"
      @rows.each do |r|
        sht = r[:slowhttptest] && "#{r[:slowhttptest]['connected']} connected, #{r[:slowhttptest]['closed']} closed, " \
                                  "available: #{r[:slowhttptest]['service_available']}"
        sht ||= r[:attacker] && attacker_note(r[:attacker])
        puts "| #{r[:server]} | #{r[:attack]} | #{r[:requests]} | #{r[:p50_ms]} | #{r[:p99_ms]} | #{r[:max_ms]} | " \
             "#{r[:errors]} | #{r[:server_cpu_s]} | #{r[:alive] ? 'yes' : 'NO'} | #{sht || ''} |"
      end
      File.write(@o.json, JSON.pretty_generate(machine: machine, duration: @o.duration, threads: @o.threads, rows: @rows)) if @o.json
    end

    def machine
      m = Machine.describe
      { ruby: RUBY_DESCRIPTION, cpus: m["nproc"], kernel: m["kernel"] }
    end
  end
end

MargayBench::AttackBench.new(MargayBench::AttackBench.parse(ARGV)).run if $PROGRAM_NAME == __FILE__
