# frozen_string_literal: true

require "test_helper"
require "fileutils"
require_relative "../support/processes"

# The real HAProxy (Debian's haproxy) in front of two Margay instances, checking each one's
# /readyz on its health listener (`option httpchk`, the configuration docs/OPERATIONS.md
# shows): TERM with drain_delay to one instance takes it DOWN in HAProxy's view while it still
# serves, and no request through HAProxy fails (retries off: `retries 0`, `retry-on none`).
class HAProxyTest < Minitest::Test
  include Margay::TestHelper

  ROOT = File.expand_path("../..", __dir__)
  APP = File.expand_path("support/cluster_app.ru", __dir__)
  HAPROXY = ["/usr/sbin/haproxy", "/usr/local/sbin/haproxy"].find { |path| File.executable?(path) }
  DRAIN = 3

  # What docs/OPERATIONS.md shows, with the ports filled in.
  CONFIG = <<~CFG
    global
      stats socket %<socket>s mode 600 level admin
    defaults
      mode http
      timeout connect 1s
      timeout client 10s
      timeout server 10s
      retries 0
    frontend web
      bind 127.0.0.1:%<port>d
      default_backend margay
    backend margay
      retry-on none
      option httpchk GET /readyz
      http-check expect status 200
      default-server check inter 500ms fall 1 rise 1
      server a 127.0.0.1:%<a_port>d check port %<a_health>d
      server b 127.0.0.1:%<b_port>d check port %<b_health>d
  CFG

  def setup
    skip "haproxy is not installed (apt-get install haproxy)" unless HAPROXY
    @dir = Dir.mktmpdir("margay-haproxy-")
    @processes = []
  end

  def teardown
    @processes&.each { |p| p.kill(:KILL) if p.alive? }
    FileUtils.rm_rf(@dir) if @dir
    super
  end

  def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # A single-process Margay with a health listener and drain_delay: [process, port, health port].
  def start_margay
    process = Margay::TestProcess.new({}, RbConfig.ruby, File.join(ROOT, "exe/margay"), "-t", "4:4",
                                      "-b", "tcp://127.0.0.1:0", "--health-bind", "tcp://127.0.0.1:0",
                                      "--drain-delay", DRAIN.to_s, APP, chdir: @dir, in: File::NULL).start
    @processes << process
    assert process.wait_for(/Health on/), process.output
    out = process.output
    [process, out[%r{Listening on tcp://127\.0\.0\.1:(\d+)}, 1].to_i, out[%r{Health on tcp://127\.0\.0\.1:(\d+)}, 1].to_i]
  end

  def start_haproxy(a_port, a_health, b_port, b_health)
    @port = free_port
    @socket = File.join(@dir, "haproxy.sock")
    config = File.join(@dir, "haproxy.cfg")
    File.write(config, format(CONFIG, socket: @socket, port: @port, a_port: a_port, a_health: a_health, b_port: b_port,
                                      b_health: b_health))
    @processes << Margay::TestProcess.new({}, HAPROXY, "-db", "-f", config, chdir: @dir, in: File::NULL).start
    deadline = now + 10
    sleep 0.05 until all_up? || now > deadline
    assert_equal({ "a" => "UP", "b" => "UP" }, states, @processes.last.output)
  end

  # Whether HAProxy's stats socket answers and shows both servers UP.
  def all_up?
    states.values == %w[UP UP]
  rescue SystemCallError
    false
  end

  # Each server's status in HAProxy's view ({"a" => "UP", ...}), from its stats socket.
  def states
    csv = UNIXSocket.open(@socket) do |s|
      s.write("show stat\n")
      s.read
    end
    csv.lines.map { |l| l.split(",") }.select { |f| f[0] == "margay" && %w[a b].include?(f[1]) }.to_h { |f| [f[1], f[17]] }
  end

  # Keep-alive clients through HAProxy until +stop+ is set: every answer's status, or the error.
  def clients(count, stop)
    Array.new(count) do
      Thread.new do
        results = []
        sock = nil
        sock = exchange(sock, results) until stop[:now]
        sock&.close
        results
      end
    end
  end

  # One request on +sock+ (a new connection when nil): the connection to use next, or nil.
  def exchange(sock, results)
    sock ||= TCPSocket.new("127.0.0.1", @port)
    sock.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    status, headers, = read_response(sock, timeout: 5)
    results << status
    return sock unless headers["connection"] == "close"

    sock.close
    nil
  rescue EOFError, SystemCallError => e
    results << e.class.name
    sock&.close
    nil
  end

  def test_term_with_drain_delay_takes_the_server_down_in_haproxy_and_no_request_fails
    a, a_port, a_health = start_margay
    _, b_port, b_health = start_margay
    start_haproxy(a_port, a_health, b_port, b_health)
    stop = {}
    threads = clients(4, stop)
    sleep 1
    term_at = now
    Process.kill(:TERM, a.pid)
    down_after = nil
    until a.exited? || now - term_at > DRAIN + 10
      down_after ||= (now - term_at if states["a"] != "UP")
      sleep 0.05
    end
    exited_after = now - term_at
    sleep 0.5
    stop[:now] = true
    results = threads.flat_map(&:value)
    assert down_after, "HAProxy never took a DOWN\n#{a.output}"
    assert_operator down_after, :<=, 0.5 + 0.5, "DOWN within one check interval (+0.5 s) of TERM"
    assert_operator exited_after, :>=, DRAIN, "a kept serving for drain_delay"
    assert_equal({ 200 => results.size }, results.tally, "no request failed")
    assert_operator results.size, :>, 100
    assert_equal "UP", states["b"]
  end
end
