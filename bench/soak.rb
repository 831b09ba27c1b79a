#!/usr/bin/env ruby
# frozen_string_literal: true

# Soak test (docs/SECURITY.md, "Soak"): a constant-rate mix of normal and
# hostile traffic against the real executable with default settings, while
# the server's RSS, descriptor count and thread count are sampled.
#
#   ruby bench/soak.rb [--duration 600] [--warmup S] [--rate 150] [--interval 5] [--json PATH]
#
# Phases: warm-up (load) -> quiet point -> measured load -> quiet point.
# At a quiet point the load generator has stopped and closed every socket and
# the server has had time to close its side and retire extra threads; the
# descriptor and thread counts there are compared (bar: zero growth), and so
# is RSS (bar: under 5% growth after warm-up). Samples taken under load are
# summarised too. Exit status 0 when the bars hold, 1 otherwise.
#
# The mix, per operation (--rate operations per second in total, 4 client threads):
#   45% GET on a keep-alive connection         10% POST with a 2 KiB body
#    5% POST with a 300 KiB body (tempfile)      15% a malformed request from test/corpus/cases.rb
#   10% a client leaving mid-head, mid-body or mid-response (half of them with RST)
#   10% a fresh connection: GET, then close     5% an HTTP/1.0 request
# plus, all the time, 20 slow clients trickling a head over ~3 s, and 5 slow
# readers taking a 16 MiB body at about 1 MiB/s for 2 s and then leaving.

require "fileutils"
require "json"
require "optparse"
require "socket"
require "tmpdir"
require_relative "lib/attacks"
require_relative "lib/target_server"

# The malformed inputs: every corpus case that needs no special settings or app route.
require_relative "../test/corpus/cases"

module MargayBench
  # The soak run: phases, sampling, verdict.
  class Soak
    Options = Struct.new(:duration, :warmup, :rate, :interval, :json, keyword_init: true)

    QUIET_WAIT = 30 # seconds a quiet point may take
    QUIET_MIN = 12  # the first one waits at least this: extra threads leave after thread_idle_timeout (10 s)
    RSS_BAR = 5.0   # percent

    def self.parse(argv)
      opts = Options.new(duration: 600.0, warmup: nil, rate: 150.0, interval: 5.0, json: nil)
      OptionParser.new do |o|
        o.banner = "usage: #{$PROGRAM_NAME} [options]"
        o.on("--duration S", Float, "seconds of measured load after warm-up (600)") { |v| opts.duration = v }
        o.on("--warmup S", Float, "seconds of warm-up load (default: a sixth of --duration, 10..60)") { |v| opts.warmup = v }
        o.on("--rate N", Float, "operations per second, all kinds together (150)") { |v| opts.rate = v }
        o.on("--interval S", Float, "seconds between samples (5)") { |v| opts.interval = v }
        o.on("--json PATH", "also write the result as JSON") { |v| opts.json = v }
      end.parse!(argv)
      opts.warmup ||= (opts.duration / 6).clamp(10.0, 60.0)
      opts
    end

    def initialize(opts)
      @o = opts
      @samples = []
    end

    def run
      dir = Dir.mktmpdir("margay-soak-")
      @server = TargetServer.new("margay", dir).start
      started = Procs.now
      load_for(@o.warmup, "warm-up")
      before = quiet_point(nil)
      load_for(@o.duration, "load")
      after = quiet_point(before)
      result = verdict(before, after, Procs.now - started)
      report(result)
      result[:pass]
    ensure
      @server&.stop
      FileUtils.remove_entry(dir) if dir
    end

    private

    # Run the load generator in a child for +seconds+, sampling meanwhile.
    def load_for(seconds, phase)
      stats_r, stats_w = IO.pipe
      pid = fork do
        stats_r.close
        stats = Load.new(@server.port, @o.rate).run(seconds)
        stats_w.write(JSON.generate(stats))
      ensure
        exit!(0)
      end
      stats_w.close
      deadline = Procs.now + seconds
      while Procs.now < deadline
        sample(phase)
        sleep [@o.interval, deadline - Procs.now].min.clamp(0, @o.interval)
      end
      Process.wait(pid)
      stats = JSON.parse(stats_r.read.then { |s| s.empty? ? "{}" : s })
      (@load_stats ||= Hash.new(0)).merge!(stats) { |_k, a, b| a + b }
      raise "the server died during #{phase}: #{File.read(@server.log_path)}" unless @server.alive?
    ensure
      stats_r&.close
    end

    def sample(phase)
      @samples << { t: (Procs.now - (@t0 ||= Procs.now)).round(1), phase: phase, rss_kb: @server.rss_kb,
                    fds: @server.fds, threads: @server.threads, tempfiles: @server.tempfiles,
                    cpu_s: @server.cpu.round(2) }
    end

    # Wait until descriptors and threads stop changing (connections closed,
    # extra threads retired after thread_idle_timeout), then take the quiet
    # sample. The second quiet point stops waiting once it matches the first.
    def quiet_point(reference)
      started = Procs.now
      last = nil
      stable = 0
      while Procs.now - started < QUIET_WAIT
        now = [@server.fds, @server.threads]
        stable = now == last ? stable + 1 : 0
        last = now
        break if reference && now[0] <= reference[:fds] && now[1] <= reference[:threads]
        break if !reference && stable >= 3 && Procs.now - started > QUIET_MIN

        sleep 1
      end
      sample("quiet")
      @samples.last
    end

    def verdict(before, after, elapsed)
      rss_growth = ((after[:rss_kb] - before[:rss_kb]) * 100.0 / before[:rss_kb]).round(2)
      loaded = @samples.reject { |s| s[:phase] == "quiet" }
      measured = @samples.select { |s| s[:phase] == "load" }
      {
        duration_s: @o.duration, warmup_s: @o.warmup, elapsed_s: elapsed.round(1), rate: @o.rate,
        quiet_after_warmup: before, quiet_at_end: after,
        rss_growth_pct: rss_growth, fd_growth: after[:fds] - before[:fds], thread_growth: after[:threads] - before[:threads],
        tempfiles_at_end: after[:tempfiles],
        under_load: summary(measured.empty? ? loaded : measured),
        load: @load_stats,
        samples: @samples,
        pass: rss_growth < RSS_BAR && after[:fds] <= before[:fds] && after[:threads] <= before[:threads] &&
              after[:tempfiles].zero?
      }
    end

    def summary(samples)
      %i[rss_kb fds threads tempfiles].to_h do |key|
        values = samples.map { |s| s[key] }
        [key, { first: values.first, min: values.min, max: values.max, last: values.last }]
      end
    end

    def report(r)
      b = r[:quiet_after_warmup]
      a = r[:quiet_at_end]
      puts "soak: #{r[:duration_s]} s measured after #{r[:warmup_s]} s warm-up at #{r[:rate]} ops/s"
      puts "operations: #{r[:load].sort.map { |k, v| "#{k}=#{v}" }.join(' ')}"
      puts "| quiet point | RSS MiB | fds | threads | tempfiles |"
      puts "|---|---:|---:|---:|---:|"
      puts "| after warm-up | #{(b[:rss_kb] / 1024.0).round(1)} | #{b[:fds]} | #{b[:threads]} | #{b[:tempfiles]} |"
      puts "| at the end | #{(a[:rss_kb] / 1024.0).round(1)} | #{a[:fds]} | #{a[:threads]} | #{a[:tempfiles]} |"
      puts "growth: RSS #{r[:rss_growth_pct]}% (bar < #{RSS_BAR}%), fds #{r[:fd_growth]}, threads #{r[:thread_growth]} (bar 0)"
      u = r[:under_load]
      puts "under load (#{@samples.count { |s| s[:phase] == 'load' }} samples): " +
           u.map { |k, v| "#{k} first #{v[:first]} min #{v[:min]} max #{v[:max]} last #{v[:last]}" }.join("; ")
      puts r[:pass] ? "PASS" : "FAIL"
      File.write(@o.json, JSON.pretty_generate(r)) if @o.json
    end
  end

  # The load generator (runs in a forked child).
  class Load
    THREADS = 4
    SLOW_CLIENTS = 20
    SLOW_READERS = 5
    HOST = "Host: 127.0.0.1\r\n"
    MIX = [[:keepalive_get, 45], [:small_post, 10], [:big_post, 5], [:malformed, 15], [:disconnect, 10],
           [:fresh_get, 10], [:http10, 5]].flat_map { |op, weight| [op] * weight }.freeze
    SMALL = ("s" * 2048).freeze
    BIG = ("b" * 300_000).freeze
    MALFORMED = Margay::Corpus::CASES.reject do |c|
      c[:settings] || c[:app] || c[:send_after_interim] || c[:followup] || c[:id].start_with?("slow-")
    end.map { |c| c[:request] }.freeze

    def initialize(port, rate)
      @port = port
      @rate = rate
      @mutex = Mutex.new
      @stats = Hash.new(0)
    end

    def run(seconds)
      deadline = Procs.now + seconds
      workers = Array.new(THREADS) { |i| Thread.new { worker(i, deadline) } }
      slow = Thread.new { slow_clients(deadline) }
      readers = Thread.new { slow_readers(deadline) }
      (workers + [slow, readers]).each(&:join)
      @stats
    end

    private

    def count(key, by = 1)
      @mutex.synchronize { @stats[key.to_s] += by }
    end

    def connect
      TCPSocket.new("127.0.0.1", @port)
    end

    # Constant rate: each thread owns 1/THREADS of it and never catches up in bursts.
    def worker(index, deadline)
      interval = THREADS / @rate
      next_at = Procs.now + (interval * index / THREADS)
      rng = Random.new(index)
      keep = nil
      while next_at < deadline
        delay = next_at - Procs.now
        delay.positive? ? sleep(delay) : count(:late)
        next_at += interval
        op = MIX[rng.rand(MIX.size)]
        keep = op == :keepalive_get ? keepalive_get(keep) : (public_send(op, rng) && keep)
      end
    ensure
      keep&.close
    end

    def keepalive_get(sock)
      sock ||= connect
      sock.write("GET / HTTP/1.1\r\n#{HOST}\r\n")
      status, close = response(sock)
      count(status == 200 ? :ok : :failed)
      return sock unless close

      sock.close
      nil
    rescue IOError, SystemCallError
      count(:failed)
      sock&.close
      nil
    end

    public

    def small_post(_rng)
      one_shot("POST /echo HTTP/1.1\r\n#{HOST}Content-Length: #{SMALL.bytesize}\r\nConnection: close\r\n\r\n#{SMALL}")
    end

    def big_post(_rng)
      one_shot("POST /echo HTTP/1.1\r\n#{HOST}Content-Length: #{BIG.bytesize}\r\nConnection: close\r\n\r\n#{BIG}")
    end

    def fresh_get(_rng)
      one_shot("GET /fresh HTTP/1.1\r\n#{HOST}Connection: close\r\n\r\n")
    end

    def http10(_rng)
      one_shot("GET /old HTTP/1.0\r\n\r\n")
    end

    def malformed(rng)
      sock = connect
      sock.write(MALFORMED[rng.rand(MALFORMED.size)])
      count(status_line?(sock) ? :malformed_answered : :malformed_unanswered)
      true
    rescue IOError, SystemCallError
      count(:malformed_reset)
      true
    ensure
      sock&.close
    end

    def disconnect(rng)
      sock = connect
      i = rng.rand(6)
      Attacks.hang_up(sock, i)
      count(:disconnects)
      true
    rescue IOError, SystemCallError
      count(:disconnects)
      true
    ensure
      sock&.close
    end

    private

    def one_shot(bytes)
      sock = connect
      sock.write(bytes)
      status, = response(sock)
      count(status == 200 ? :ok : :failed)
      true
    rescue IOError, SystemCallError
      count(:failed)
      true
    ensure
      sock&.close
    end

    # True when a status line arrives within 2 s (enough for any request,
    # HEAD included, whose response has a content-length but no body).
    def status_line?(sock)
      buf = +""
      deadline = Procs.now + 2
      nil while !buf.include?("\r\n") && fill(sock, buf, deadline)
      buf.start_with?("HTTP/1.")
    end

    # Read one response head and its content-length body: [status, closing?].
    def response(sock, timeout: 5)
      buf = +""
      deadline = Procs.now + timeout
      until (head_end = buf.index("\r\n\r\n"))
        return [nil, true] unless fill(sock, buf, deadline)
      end
      head = buf[0, head_end]
      length = head[/^content-length:\s*(\d+)/i, 1].to_i
      while buf.bytesize < head_end + 4 + length
        return [nil, true] unless fill(sock, buf, deadline)
      end
      [head[/\AHTTP\/1\.[01] (\d{3})/, 1].to_i, head.match?(/^connection:\s*close/i) || head.start_with?("HTTP/1.0")]
    end

    def fill(sock, buf, deadline)
      left = deadline - Procs.now
      return false if left <= 0 || !sock.wait_readable(left)

      chunk = sock.read_nonblock(65_536, exception: false)
      return false if chunk.nil?

      buf << chunk if chunk.is_a?(String)
      true
    end

    # SLOW_CLIENTS heads trickled one byte every 50 ms (about 3 s each), then answered.
    def slow_clients(deadline)
      head = "GET /slow HTTP/1.1\r\n#{HOST}X-Slow: #{'s' * 20}\r\nConnection: close\r\n\r\n"
      clients = [] # [socket, bytes sent]
      while Procs.now < deadline
        clients << [connect, 0] while clients.size < SLOW_CLIENTS
        clients.reject! do |pair|
          sock, sent = pair
          sock.write(head[sent])
          pair[1] += 1
          next false if pair[1] < head.bytesize

          status, = response(sock)
          count(status == 200 ? :slow_ok : :slow_failed)
          sock.close
          true
        rescue IOError, SystemCallError
          count(:slow_failed)
          sock.close
          true
        end
        sleep 0.05
      end
    ensure
      clients&.each { |sock, _| sock.close unless sock.closed? }
    end

    # SLOW_READERS downloads of /big read at about 1 MiB/s, abandoned after 2 s.
    def slow_readers(deadline)
      readers = [] # [socket, started]
      while Procs.now < deadline
        while readers.size < SLOW_READERS
          sock = connect
          sock.write("GET /big HTTP/1.1\r\n#{HOST}\r\n")
          readers << [sock, Procs.now]
        end
        readers.reject! do |sock, started|
          sock.read_nonblock(102_400, exception: false)
          next false if Procs.now - started < 2

          count(:slow_readers)
          sock.close
          true
        rescue IOError, SystemCallError
          sock.close
          true
        end
        sleep 0.1
      end
    ensure
      readers&.each { |sock, _| sock.close unless sock.closed? }
    end
  end
end

exit(MargayBench::Soak.new(MargayBench::Soak.parse(ARGV)).run ? 0 : 1) if $PROGRAM_NAME == __FILE__
