# frozen_string_literal: true

require "test_helper"
require_relative "../support/processes"
require "etc"
require "fileutils"
require "rbconfig"
require "tmpdir"

# Slow and abusive clients against a real server (docs/SECURITY.md, "Slow and abusive clients"):
# slowloris, slow request bodies, clients that never read, thousands of idle
# keep-alive connections, a connection flood up to the descriptor limit, and
# clients that vanish mid-head, mid-body and mid-response.
#
# Every attack runs while a normal client keeps sending requests; each of its
# requests must be answered 200 within PROBE_LIMIT (behaviour, not a tight
# timing). After every attack the server must be back where it started: no
# descriptor, tempfile or thread left over, every response body closed and
# every rack.response_finished callback run (with the error when the client
# went away mid-stream).
class AbuseTest < Minitest::Test
  include Margay::TestHelper

  PROBE_LIMIT = 2.0 # seconds a normal request may take while under attack
  BIG = ("x" * (8 << 20)).freeze # an 8 MiB response: far beyond the socket buffers
  CHUNK = ("y" * 65_536).freeze
  STREAM_CHUNKS = 1024 # /stream yields 64 MiB in 64 KiB chunks: more than any socket buffers
  ROOT = File.expand_path("../..", __dir__)

  # Records what the server did with each response the app produced: whether
  # the body was closed and how rack.response_finished was called.
  class Recorder
    Entry = Struct.new(:path, :closed, :finished, :error)

    def initialize
      @mutex = Mutex.new
      @entries = []
    end

    def track(env)
      entry = Entry.new(env["PATH_INFO"], false, false, nil)
      @mutex.synchronize { @entries << entry }
      env["rack.response_finished"] << lambda do |_env, _status, _headers, error|
        entry.finished = true
        entry.error = error
      end
      entry
    end

    def entries
      @mutex.synchronize { @entries.dup }
    end

    def paths
      entries.map(&:path)
    end

    def unfinished
      entries.reject { |e| e.closed && e.finished }
    end
  end

  # An each-body that notes its close in the recorder entry. It streams: the
  # thread writes it chunk by chunk and blocks (until write_timeout) while more
  # than response_buffer_limit is queued, so a client leaving mid-response
  # surfaces as ClientGone in rack.response_finished.
  class TrackedBody
    def initialize(entry, parts)
      @entry = entry
      @parts = parts
    end

    def each(&block)
      @parts.each(&block)
    end

    def close
      @entry.closed = true
    end
  end

  # A body the server can take whole (to_ary): it is queued in the event loop
  # and the thread returns at once, however slowly the client reads.
  class ArrayBody < TrackedBody
    def to_ary
      @parts
    ensure
      close # the SPEC: a body with to_ary and close closes itself in to_ary
    end
  end

  # A streamed body of unknown length (chunked), 64 MiB.
  class StreamedBody < TrackedBody
    def each
      STREAM_CHUNKS.times { yield CHUNK }
    end
  end

  def app_for(recorder)
    lambda do |env|
      entry = recorder.track(env)
      case env["PATH_INFO"]
      when "/big" then [200, { "content-type" => "text/plain", "content-length" => BIG.bytesize.to_s }, ArrayBody.new(entry, [BIG])]
      when "/stream" then [200, { "content-type" => "text/plain" }, StreamedBody.new(entry, nil)]
      when "/echo"
        size = env["rack.input"].read.bytesize
        [200, { "content-type" => "text/plain" }, ArrayBody.new(entry, [size.to_s])]
      else [200, { "content-type" => "text/plain" }, ArrayBody.new(entry, ["hello"])]
      end
    end
  end

  def setup
    @recorder = Recorder.new
    @sockets = []
  end

  def teardown
    @sockets.each { |s| s.close unless s.closed? }
  end

  # ---- slowloris ----------------------------------------------------------

  def test_slowloris_does_not_delay_normal_clients
    serve do |port, server|
      loris = open_sockets(port, 300) { |s| s.write("GET /loris HTTP/1.1\r\nHost: x\r\nX-A: ") }
      trickler = trickle(loris, seconds: 3) { "a" }
      probe(port, requests: 30)
      trickler.join
      assert_equal 300, server.stats[:connections], "every slowloris connection is still held by the loop"
      refute_includes @recorder.paths, "/loris", "an incomplete head never reached the app"
      close_all(loris)
    end
  end

  def test_slowloris_trickling_forever_gets_408_at_header_timeout
    serve(header_timeout: 1) do |port, _server|
      loris = open_sockets(port, 50) { |s| s.write("GET /loris HTTP/1.1\r\n") }
      started = now
      trickler = trickle(loris, seconds: 2.5, interval: 0.1) { "X-A: b\r\n" }
      probe(port, requests: 10)
      trickler.join
      loris.each do |sock|
        raw = read_all(sock, timeout: 3)
        assert_match(%r{\AHTTP/1.1 408 }, raw, "a head still trickling after header_timeout is answered 408")
      end
      assert_operator now - started, :<, 10
      close_all(loris)
    end
  end

  # ---- slow request bodies ------------------------------------------------

  def test_slow_post_bodies_do_not_delay_normal_clients
    serve do |port, server|
      # 200 KiB arrive at once (beyond body_buffer_size: into a tempfile), the rest trickles.
      posters = open_sockets(port, 100) do |s|
        s.write("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: #{1 << 20}\r\n\r\n")
        s.write("z" * 200_000)
      end
      trickler = trickle(posters, seconds: 3) { "z" * 100 }
      probe(port, requests: 30)
      trickler.join
      assert_equal 100, body_tempfiles.size, "each big body in flight has its own tempfile"
      assert_equal 100, server.stats[:connections]
      refute_includes @recorder.paths, "/echo", "an incomplete body never reached the app"
      close_all(posters) # they all leave mid-body: the tempfiles must go with them
    end
  end

  def test_stalled_body_gets_408_at_body_timeout
    serve(body_timeout: 1) do |port, _server|
      posters = open_sockets(port, 20) do |s|
        s.write("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 300000\r\n\r\n#{'z' * 150_000}")
      end
      chunked = open_sockets(port, 20) do |s|
        s.write("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
      end
      probe(port, requests: 10)
      (posters + chunked).each do |sock|
        assert_match(%r{\AHTTP/1.1 408 }, read_all(sock, timeout: 5), "a stalled body is answered 408")
      end
      close_all(posters + chunked)
    end
  end

  # ---- slow readers -------------------------------------------------------

  def test_clients_that_never_read_hold_no_thread
    serve(max_threads: 2) do |port, server|
      readers = open_sockets(port, 20) { |s| s.write("GET /big HTTP/1.1\r\nHost: x\r\n\r\n") }
      wait_until("the app answered every /big request") { @recorder.paths.count("/big") == 20 }
      probe(port, requests: 30)
      wait_until("the unread responses stay queued in the loop") { server.stats[:connections] == 20 }
      status, _, body = read_response(readers.first, timeout: 10)
      assert_equal [200, BIG.bytesize], [status, body.bytesize], "a late reader still gets the whole response"
      close_all(readers)
    end
  end

  def test_stalled_reader_is_closed_at_write_timeout
    serve(write_timeout: 1) do |port, server|
      readers = open_sockets(port, 10) { |s| s.write("GET /big HTTP/1.1\r\nHost: x\r\n\r\n") }
      # A streamed body beyond response_buffer_limit spills to a tempfile: no thread waits.
      streamers = open_sockets(port, 10) { |s| s.write("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n") } # twice max_threads
      probe(port, requests: 10)
      wait_until("the server dropped the stalled readers", timeout: 10) { server.stats[:connections].zero? }
      close_all(readers + streamers)
      streamed = @recorder.entries.select { |e| e.path == "/stream" }
      assert_equal 10, streamed.size
      streamed.each { |e| assert_nil e.error, "the app's side of a streamed body completes at once" }
    end
  end

  # ---- idle keep-alive connections ---------------------------------------

  def test_thousands_of_idle_keep_alive_connections
    raise_nofile_limit(2000 * 2 + 256)
    serve do |port, server|
      idle = open_sockets(port, 2000) do |s|
        s.write("GET /idle HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal 200, read_response(s)[0]
      end
      assert_equal 2000, server.stats[:connections]
      probe(port, requests: 30)
      idle.first(10).each do |s| # still served on the same connection
        s.write("GET /again HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal 200, read_response(s)[0]
      end
      close_all(idle)
    end
  end

  # ---- disconnects --------------------------------------------------------

  def test_clients_that_disconnect_mid_head_mid_body_and_before_the_response
    serve do |port, _server|
      prober = Thread.new { probe(port, requests: 40, pause: 0.05) }
      100.times do |i|
        hang_up(port, "GET /mid-head HTTP/1.1\r\nHost: x\r\nX-Partial: ab", reset: i.odd?)
        hang_up(port, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc", reset: i.odd?)
        hang_up(port, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 400000\r\n\r\n#{'z' * 200_000}", reset: i.odd?)
        hang_up(port, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n30000\r\n#{'z' * 150_000}",
                reset: i.odd?)
        hang_up(port, "GET /gone HTTP/1.1\r\nHost: x\r\n\r\n", reset: i.odd?)
      end
      prober.value
      refute_includes @recorder.paths, "/mid-head"
      refute_includes @recorder.paths, "/echo", "a body cut short never reached the app"
    end
  end

  def test_clients_that_disconnect_mid_response
    serve do |port, _server|
      prober = Thread.new { probe(port, requests: 40, pause: 0.05) }
      40.times do |i|
        %w[/big /stream].each do |path|
          sock = TCPSocket.new("127.0.0.1", port)
          sock.write("GET #{path} HTTP/1.1\r\nHost: x\r\n\r\n")
          sock.wait_readable(5)
          sock.read_nonblock(65_536, exception: false) # part of the response, then gone
          close_socket(sock, reset: i.odd?)
        end
      end
      prober.value
      wait_until("every /stream response finished") do
        @recorder.entries.count { |e| e.path == "/stream" && e.finished } == 40
      end
      # rack.response_finished runs once the app's side is done: with ClientGone when
      # the client was gone before the body was handed over, else without error (the
      # rest was spilled to a tempfile and the engine dropped it with the connection).
      @recorder.entries.select { |e| e.path == "/stream" }.each do |entry|
        assert(entry.error.nil? || entry.error.is_a?(Margay::ClientGone), "unexpected error #{entry.error.inspect}")
      end
    end
  end

  # ---- a connection flood up to the descriptor limit ---------------------

  FLOOD_APP = <<~'RUBY'
    HOGGED = []
    run lambda { |env|
      case env["PATH_INFO"]
      when "/hog" # take every free descriptor: the next accept(2) fails with EMFILE
        begin
          loop { HOGGED << File.open(File::NULL) }
        rescue Errno::EMFILE, Errno::ENFILE
          nil
        end
        [200, { "content-type" => "text/plain" }, [HOGGED.size.to_s]]
      when "/release"
        HOGGED.pop.close until HOGGED.empty?
        [200, { "content-type" => "text/plain" }, ["released"]]
      when "/echo"
        [200, { "content-type" => "text/plain" }, [env["rack.input"].read.bytesize.to_s]]
      else
        [200, { "content-type" => "text/plain" }, ["hello"]]
      end
    }
  RUBY

  NOFILE = 256 # the child's RLIMIT_NOFILE: the engine then allows 128 connections

  def test_connection_flood_at_max_connections
    with_child_server do |port, pid|
      keep = TCPSocket.new("127.0.0.1", port)
      @sockets << keep
      assert_equal 200, request(keep, "/")[0]
      baseline = child_fds(pid)
      flood = open_flood(port, 400)
      sleep 0.5 # let the server accept what it will
      cpu = child_cpu(pid)
      saturated = now
      # An active connection keeps being served (an idle one may be reclaimed to make room).
      20.times do
        assert_equal 200, timed_request(keep, "/")[0], "a connection already open keeps being served"
        sleep 0.1
      end
      used = child_cpu(pid) - cpu
      assert_operator used, :<, 0.5 * (now - saturated), "the saturated server spins (#{used.round(2)} s CPU)"
      assert_operator child_fds(pid).size, :<=, NOFILE
      close_all(flood)
      fresh_requests_succeed(port)
      keep.close
      assert_child_back_to(pid, baseline[0...-1])
    end
  end

  def test_connection_flood_when_accept_fails_with_emfile
    with_child_server do |port, pid|
      keep, spare = Array.new(2) { TCPSocket.new("127.0.0.1", port).tap { |s| @sockets << s } }
      [keep, spare].each { |s| assert_equal 200, request(s, "/")[0] }
      baseline = child_fds(pid)
      status, _, hogged = request(keep, "/hog")
      assert_equal 200, status
      assert_operator hogged.to_i, :>, 100
      flood = open_flood(port, 100)
      sleep 0.5
      cpu = child_cpu(pid)
      saturated = now
      # No descriptor for a tempfile either: that request fails, the server does not.
      status, = timed_request(spare, "/echo", body: "z" * 300_000)
      refute_equal 200, status, "a big body cannot be buffered without a descriptor"
      20.times do
        assert_equal 200, timed_request(keep, "/")[0], "a connection already open keeps being served"
        sleep 0.1
      end
      used = child_cpu(pid) - cpu
      assert_operator used, :<, 0.5 * (now - saturated), "the server spins on EMFILE (#{used.round(2)} s CPU)"
      assert_equal 200, request(keep, "/release")[0]
      close_all(flood)
      fresh_requests_succeed(port)
      spare.close
      keep.close
      assert_child_back_to(pid, baseline[0...-2])
    end
  end

  private

  # ---- the in-process server and its invariants ---------------------------

  # Run a server (default settings unless overridden) for the attack in the
  # block, then check that nothing leaked.
  def serve(**settings, &block)
    settings = { min_threads: 1, thread_idle_timeout: 1 }.merge(settings)
    with_server(app_for(@recorder), **settings) do |_, port, server|
      assert_equal 200, raw_request(port, "/warm-up")[0]
      wait_until("only the minimum thread left") { server.stats[:threads] == 1 }
      fds = own_fds
      threads = Thread.list
      begin
        block.call(port, server)
        assert_server_clean(server, fds, threads)
      ensure
        close_all(@sockets) # before with_server stops it: a graceful stop waits for unread responses
      end
    end
  end

  def assert_server_clean(server, fds, threads)
    @sockets.each { |s| s.close unless s.closed? }
    wait_until(-> { "every connection closed (#{server.stats[:connections]} left)" }) { server.stats[:connections].zero? }
    wait_until(-> { "no descriptor leaked: new since the attack began #{(own_fds.to_a - fds.to_a).inspect}" }) { (own_fds.to_a - fds.to_a).empty? }
    assert_empty body_tempfiles, "tempfiles left open"
    wait_until(-> { "pool back to its minimum (#{server.stats[:threads]} threads)" }) { server.stats[:threads] == 1 }
    # Pool threads by their number (the one kept need not be the one kept before); others by
    # identity (one alive at the start, like a retired pool thread still ending, may be gone)
    pool = ->(t) { t.name.to_s.start_with?("margay-") }
    wait_until(-> { "no Ruby thread leaked: #{Thread.list.inspect}" }) do
      Thread.list.count(&pool) == 1 && (Thread.list - threads).none? { |t| !pool.(t) }
    end
    wait_until(-> { "every body closed and every rack.response_finished run: #{@recorder.unfinished.first(3).inspect}" }) do
      @recorder.unfinished.empty?
    end
    assert_equal 0, server.stats[:errors], "server log:\n#{@server_log.string}"
  end

  # This process's descriptors: fd => link target.
  def own_fds
    Dir.children("/proc/self/fd").to_h { |fd| [fd.to_i, fd_target("/proc/self/fd/#{fd}")] }
       .reject { |_, target| target.nil? || target.start_with?("/proc/") } # the directory being listed
  end

  def fd_target(path)
    File.readlink(path)
  rescue Errno::ENOENT
    nil
  end

  # Request bodies buffered in unlinked files (O_TMPFILE shows as "/tmp/#123 (deleted)").
  def body_tempfiles(pid = "self")
    Dir.children("/proc/#{pid}/fd").map { |fd| fd_target("/proc/#{pid}/fd/#{fd}") }.compact
       .select { |t| t.include?("(deleted)") || t.start_with?("#{Dir.tmpdir}/#") }
  end

  # ---- clients -------------------------------------------------------------

  # A normal client during the attack: +requests+ sequential GETs, a fresh
  # connection every fifth one; each must be a 200 within PROBE_LIMIT.
  def probe(port, requests:, pause: 0.02)
    sock = nil
    requests.times do |i|
      if (i % 5).zero?
        sock&.close
        sock = TCPSocket.new("127.0.0.1", port)
      end
      status, elapsed = timed(sock, "/probe")
      assert_equal 200, status, "normal request #{i} failed"
      assert_operator elapsed, :<, PROBE_LIMIT, "normal request #{i} took #{elapsed.round(3)} s under attack"
      sleep pause
    end
  ensure
    sock&.close
  end

  def timed(sock, path)
    started = now
    status, = request(sock, path)
    [status, now - started]
  end

  def request(sock, path, body: nil, timeout: 5)
    head = body ? "POST #{path} HTTP/1.1\r\nHost: x\r\nContent-Length: #{body.bytesize}\r\n\r\n" : "GET #{path} HTTP/1.1\r\nHost: x\r\n\r\n"
    sock.write(head)
    sock.write(body) if body
    read_response(sock, timeout: timeout)
  end

  # A request that must be answered within PROBE_LIMIT; [status, headers, body],
  # status nil when the server closed the connection.
  def timed_request(sock, path, body: nil)
    started = now
    response = request(sock, path, body: body, timeout: PROBE_LIMIT + 3)
    assert_operator now - started, :<, PROBE_LIMIT, "#{path} took #{(now - started).round(3)} s"
    response
  rescue EOFError, Errno::ECONNRESET, Errno::EPIPE
    [nil, {}, ""]
  end

  def raw_request(port, path)
    sock = TCPSocket.new("127.0.0.1", port)
    request(sock, path)
  ensure
    sock&.close
  end

  def open_sockets(port, count)
    Array.new(count) do
      sock = TCPSocket.new("127.0.0.1", port)
      @sockets << sock
      yield sock if block_given?
      sock
    end
  end

  # Write a little to every socket every +interval+ for +seconds+, in a thread.
  def trickle(socks, seconds:, interval: 0.25)
    Thread.new do
      deadline = now + seconds
      while now < deadline
        socks.each do |s|
          s.write_nonblock(yield, exception: false)
        rescue IOError, SystemCallError
          nil # the server may already have answered 408 and closed
        end
        sleep interval
      end
    end
  end

  # Connect, send +bytes+, leave: FIN, or RST with reset: true.
  def hang_up(port, bytes, reset:)
    sock = TCPSocket.new("127.0.0.1", port)
    sock.write(bytes)
    close_socket(sock, reset: reset)
  end

  def close_socket(sock, reset:)
    sock.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii")) if reset
    sock.close
  end

  def close_all(socks)
    socks.each { |s| s.close unless s.closed? }
  end

  def raise_nofile_limit(wanted)
    soft, hard = Process.getrlimit(:NOFILE)
    return if soft >= wanted

    skip "RLIMIT_NOFILE hard limit #{hard} < #{wanted}" if hard != Process::RLIM_INFINITY && hard < wanted
    Process.setrlimit(:NOFILE, wanted, hard)
  end

  # ---- the child server of the flood tests ---------------------------------

  def with_child_server
    dir = Dir.mktmpdir("margay-flood-")
    File.write(File.join(dir, "app.ru"), FLOOD_APP)
    env = { "BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile"), "RACK_ENV" => "production" }
    server = Margay::TestProcess.new(env, "bundle", "exec", File.join(ROOT, "exe", "margay"), "-b", "tcp://127.0.0.1:0",
                                     "app.ru", chdir: dir, rlimit_nofile: NOFILE).start
    port = child_port(server)
    yield port, server.pid
    assert_nil server.exited?, "the server died"
  rescue Minitest::Assertion
    warn "--- child server output ---\n#{server&.output}"
    raise
  ensure
    @sockets.each { |s| s.close unless s.closed? }
    stop_child(server) if server
    FileUtils.remove_entry(dir) if dir
  end

  def child_port(server)
    banner = %r{Listening on tcp://127\.0\.0\.1:(\d+)}
    found = server.wait_for(banner, timeout: 30)
    flunk "the server exited:\n#{server.output}" if !found && server.exited?
    flunk "no banner within 30 s:\n#{server.output}" unless found
    server.output[banner, 1].to_i
  end

  # TERM, then KILL when it has not exited within 15 s.
  def stop_child(server)
    server.kill(:TERM, timeout: 15) || server.kill
  end

  def child_fds(pid)
    Dir.children("/proc/#{pid}/fd").map(&:to_i).sort
  end

  # User + system CPU seconds of +pid+ so far.
  def child_cpu(pid)
    fields = File.read("/proc/#{pid}/stat").split(") ", 2).last.split
    (fields[11].to_i + fields[12].to_i) / Etc.sysconf(Etc::SC_CLK_TCK).to_f
  end

  # +count+ connections to +port+, opened without waiting for accept(2): the
  # server takes what it allows, the rest wait in the listen backlog.
  def open_flood(port, count)
    addr = Socket.sockaddr_in(port, "127.0.0.1")
    Array.new(count) do
      sock = Socket.new(:INET, :STREAM)
      @sockets << sock
      sock.connect_nonblock(addr, exception: false)
      sock
    end
  end

  def fresh_requests_succeed(port)
    wait_until("new connections are served again", timeout: 10) do
      raw_request(port, "/after")[0] == 200
    rescue EOFError, SystemCallError
      false
    end
    10.times do
      sock = TCPSocket.new("127.0.0.1", port)
      status, elapsed = timed(sock, "/after")
      sock.close
      assert_equal 200, status
      assert_operator elapsed, :<, PROBE_LIMIT
    end
  end

  def assert_child_back_to(pid, baseline)
    wait_until(-> { "the child's descriptors back to #{baseline.size} (now #{child_fds(pid).size})" }, timeout: 10) do
      child_fds(pid).size <= baseline.size # fewer is fine (a descriptor open at the baseline may have closed)
    end
    assert_empty body_tempfiles(pid), "tempfiles left open in the child"
  end

  # ---- time ----------------------------------------------------------------

  def now
    Margay::Clock.now
  end

  def wait_until(what, timeout: 5)
    deadline = now + timeout
    until yield
      flunk "timed out after #{timeout} s waiting for: #{what.respond_to?(:call) ? what.call : what}" if now > deadline
      sleep 0.02
    end
  end
end
