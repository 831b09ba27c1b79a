# frozen_string_literal: true

require "test_helper"
require "digest/sha2" # loaded here: two server threads autoloading Digest::SHA256 at once race (Digest::Base cannot be directly instantiated)
require "json"

# Wire behaviour of the single-process server over real sockets: framing,
# keep-alive, pipelining, bodies, and the Rack 3 server contract.
class ServerTest < Minitest::Test
  include Margay::TestHelper

  ECHO = lambda do |env|
    body = env["rack.input"].read
    info = { "method" => env["REQUEST_METHOD"], "path" => env["PATH_INFO"], "query" => env["QUERY_STRING"],
             "body" => body, "length" => env["CONTENT_LENGTH"], "host" => env["SERVER_NAME"],
             "port" => env["SERVER_PORT"], "protocol" => env["SERVER_PROTOCOL"],
             "remote" => env["REMOTE_ADDR"], "cookie" => env["HTTP_COOKIE"], "xff" => env["HTTP_X_FORWARDED_FOR"] }
    [200, { "content-type" => "application/json" }, [JSON.generate(info)]]
  end

  def test_get_with_date_and_content_length
    with_server(HELLO) do |_, port|
      raw = raw_exchange(port, "GET /hi?x=1 HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
      assert_match(%r{\AHTTP/1.1 200 OK\r\n}, raw)
      assert_match(/^content-length: 5\r$/, raw)
      assert_match(/^date: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT\r$/, raw)
      assert_match(/^connection: close\r$/, raw)
      assert_match(%r{^x-path: /hi\r$}, raw)
      assert raw.end_with?("\r\n\r\nhello")
    end
  end

  def test_env_values
    with_server(ECHO) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("POST /p/a%20th?q=2 HTTP/1.1\r\nHost: example.com:8080\r\nContent-Length: 3\r\n" \
                 "Cookie: a=1\r\nCookie: b=2\r\nX-Forwarded-For: 1.1.1.1\r\nX_Forwarded_For: 6.6.6.6\r\n\r\nabc")
      status, _, body = read_response(sock)
      info = JSON.parse(body)
      assert_equal 200, status
      assert_equal ["POST", "/p/a%20th", "q=2", "abc", "3"], info.values_at("method", "path", "query", "body", "length")
      assert_equal ["example.com", "8080", "HTTP/1.1", "127.0.0.1"], info.values_at("host", "port", "protocol", "remote")
      assert_equal "a=1; b=2", info["cookie"]
      assert_equal "1.1.1.1", info["xff"], "an underscore header must never alias the dashed one"
    ensure
      sock&.close
    end
  end

  def test_keep_alive_and_pipelining_in_order
    with_server(HELLO) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write((1..3).map { |i| "GET /#{i} HTTP/1.1\r\nHost: x\r\n\r\n" }.join)
      3.times do |i|
        status, headers, body = read_response(sock)
        assert_equal [200, "/#{i + 1}", "hello"], [status, headers["x-path"], body]
      end
      sock.write("GET /again HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal "/again", read_response(sock)[1]["x-path"]
    ensure
      sock&.close
    end
  end

  def test_http10_closes_unless_keep_alive
    with_server(HELLO) do |_, port|
      raw = raw_exchange(port, "GET / HTTP/1.0\r\n\r\n")
      assert_match(%r{\AHTTP/1.1 200 OK}, raw)
      assert_match(/^connection: close\r$/, raw)
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
      status, headers, = read_response(sock)
      assert_equal [200, "keep-alive"], [status, headers["connection"]]
      sock.write("GET /2 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
      assert_equal 200, read_response(sock)[0]
    ensure
      sock&.close
    end
  end

  def test_chunked_request_body_and_pipelined_follow_up
    with_server(ECHO) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" \
                 "3;ext=1\r\nabc\r\n4\r\ndefg\r\n0\r\nX-Trailer: t\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n")
      _, _, body = read_response(sock)
      info = JSON.parse(body)
      assert_equal ["abcdefg", "7"], info.values_at("body", "length")
      assert_equal "/next", JSON.parse(read_response(sock)[2])["path"]
    ensure
      sock&.close
    end
  end

  def test_large_body_goes_to_a_tempfile_and_is_rewindable
    seen = nil
    app = lambda do |env|
      input = env["rack.input"]
      first = input.read
      input.rewind
      seen = [first.bytesize, input.read.bytesize]
      [200, {}, [first[0, 3]]]
    end
    # lint: false: Rack::Lint's input wrapper hides #rewind, which real apps still call
    with_server(app, lint: false, body_buffer_size: 1024) do |_, port|
      data = "z" * 300_000
      raw = raw_exchange(port, "PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: #{data.bytesize}\r\nConnection: close\r\n\r\n#{data}")
      assert_match(/zzz\z/, raw)
      assert_equal [300_000, 300_000], seen
    end
  end

  # Bodies larger than one turn's read budget (1 MiB): each connection is
  # read in turns, re-armed in between, and every byte arrives in order.
  def test_concurrent_uploads_larger_than_a_read_turn_arrive_whole
    app = lambda do |env|
      body = env["rack.input"].read
      [200, {}, ["#{body.bytesize}:#{Digest::SHA256.hexdigest(body)}"]]
    end
    with_server(app, max_threads: 2) do |_, port|
      bodies = Array.new(3) { |i| Random.new(i).bytes(3 * 1024 * 1024 + i) }
      replies = bodies.map do |data|
        Thread.new do
          raw_exchange(port, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: #{data.bytesize}\r\n" \
                             "Connection: close\r\n\r\n#{data}", timeout: 20)
        end
      end.map(&:value)
      bodies.zip(replies).each do |data, raw|
        assert raw.end_with?("#{data.bytesize}:#{Digest::SHA256.hexdigest(data)}"), raw[0, 200]
      end
    end
  end

  def test_expect_100_continue
    with_server(ECHO) do |_, port|
      sock = continued(port, "Content-Length: 2")
      sock.write("hi")
      _, _, body = read_response(sock)
      assert_equal "hi", JSON.parse(body)["body"]
    ensure
      sock&.close
    end
  end

  def test_bad_body_after_100_continue_is_a_complete_400
    with_server(ECHO) do |_, port|
      sock = continued(port, "Transfer-Encoding: chunked")
      sock.write("zz\r\nhi\r\n0\r\n\r\n")
      status, headers, = read_response(sock)
      assert_equal 400, status
      assert_equal "close", headers["connection"]
    ensure
      sock&.close
    end
  end

  # A POST head with Expect: 100-continue, its interim response read.
  def continued(port, framing)
    sock = TCPSocket.new("127.0.0.1", port)
    sock.write("POST / HTTP/1.1\r\nHost: x\r\n#{framing}\r\nExpect: 100-continue\r\n\r\n")
    interim = Margay::Wire::Client.new(sock, buffered: false).read_response
    assert_equal ["HTTP/1.1", 100, "Continue", []], [interim.version, interim.status, interim.reason, interim.fields]
    sock
  end

  def test_body_too_large_is_413_and_closes
    with_server(ECHO, max_body_size: 10) do |_, port|
      raw = raw_exchange(port, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n01234567890GET / HTTP/1.1\r\n\r\n")
      assert_match(%r{\AHTTP/1.1 413 }, raw)
      assert_equal 1, raw.scan("HTTP/1.1").size, "no pipelined request may be answered after an error"
    end
  end

  def test_head_and_bodyless_statuses
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/204" then [204, {}, []]
      when "/304" then [304, { "etag" => "x" }, []]
      else [200, { "content-type" => "text/plain" }, ["body!"]]
      end
    end
    with_server(app) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("HEAD / HTTP/1.1\r\nHost: x\r\n\r\n")
      status, headers, body = read_response(sock, head: true)
      assert_equal [200, "5", ""], [status, headers["content-length"], body]
      sock.write("GET /204 HTTP/1.1\r\nHost: x\r\n\r\n")
      status, headers, = read_response(sock)
      assert_equal 204, status
      refute headers.key?("content-length")
      sock.write("GET /304 HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal 304, read_response(sock)[0]
      sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal "body!", read_response(sock)[2], "connection stays in sync after bodyless responses"
    ensure
      sock&.close
    end
  end

  def test_slow_client_holds_no_thread
    with_server(HELLO, min_threads: 1, max_threads: 1) do |_, port|
      slow = Array.new(20) { TCPSocket.new("127.0.0.1", port).tap { |s| s.write("GET / HTTP/1.1\r\nHo") } }
      started = Margay::Clock.now
      raw = raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      elapsed = Margay::Clock.now - started
      assert_match(/hello\z/, raw)
      assert_operator elapsed, :<, 2, "a normal request waited behind slow clients"
      slow.each(&:close)
    end
  end

  def test_unread_large_response_holds_no_thread
    skip_on_jruby "no spilling of a slow client's response to a tempfile: a pool thread writes it, bounded by write_timeout"
    big = "b" * (8 * 1024 * 1024)
    app = ->(env) { env["PATH_INFO"] == "/big" ? [200, {}, [big]] : HELLO.call(env) }
    with_server(app, min_threads: 1, max_threads: 1) do |_, port|
      readers = Array.new(3) { TCPSocket.new("127.0.0.1", port).tap { |s| s.write("GET /big HTTP/1.1\r\nHost: x\r\n\r\n") } }
      sleep 0.2 # let the server queue the big responses
      raw = raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout: 3)
      assert_match(/hello\z/, raw, "the only thread was stuck writing to a client that does not read")
      status, _, body = read_response(readers.first, timeout: 10)
      assert_equal [200, big.bytesize], [status, body.bytesize]
      readers.each(&:close)
    end
  end

  def test_large_body_strings_are_sent_by_reference_safely
    shared = ("s" * (1024 * 1024)).freeze
    app = lambda do |env|
      if env["PATH_INFO"] == "/mutated"
        big = "m" * (1024 * 1024) # the app changes its string after answering
        env["rack.response_finished"] << ->(*) { big.replace("X" * 10); GC.start; GC.compact if GC.respond_to?(:compact) }
        [200, {}, ["<", big, ">"]]
      else
        [200, {}, [shared]]
      end
    end
    with_server(app) do |_, port|
      readers = Array.new(10) { TCPSocket.new("127.0.0.1", port).tap { |s| s.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n") } }
      mutated = TCPSocket.new("127.0.0.1", port)
      mutated.write("GET /mutated HTTP/1.1\r\nHost: x\r\n\r\n")
      sleep 0.3 # the responses are queued; the callback has replaced the app's string meanwhile
      GC.start
      GC.compact if GC.respond_to?(:compact)
      status, _, body = read_response(mutated, timeout: 10)
      assert_equal [200, 1024 * 1024 + 2], [status, body.bytesize]
      assert_equal "<#{'m' * (1024 * 1024)}>", body, "the bytes sent are the ones the app returned"
      readers.each { |r| assert_equal shared, read_response(r, timeout: 10)[2] }
      (readers + [mutated]).each(&:close)
    end
  end

  def test_streamed_body_beyond_the_buffer_spills_and_frees_the_thread
    skip_on_jruby "no spilling of a slow client's response to a tempfile: a pool thread writes it, bounded by write_timeout"
    chunk = "0123456789abcdef" * 4096 # 64 KiB
    body = Object.new
    body.define_singleton_method(:each) { |&b| 192.times { |i| b.call("#{i}:#{chunk}") } } # ~12 MiB, lazily
    app = ->(env) { env["PATH_INFO"] == "/stream" ? [200, {}, body] : HELLO.call(env) }
    with_server(app, min_threads: 1, max_threads: 1, response_buffer_limit: 1024 * 1024) do |_, port|
      slow = TCPSocket.new("127.0.0.1", port)
      slow.write("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
      sleep 0.3 # the only thread streams into the buffer, then the tempfile
      raw = raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout: 3)
      assert_match(/hello\z/, raw, "the thread was not held by the client that does not read")
      status, headers, data = read_response(slow, timeout: 20)
      assert_equal [200, "chunked"], [status, headers["transfer-encoding"]]
      assert_equal Array.new(192) { |i| "#{i}:#{chunk}" }.join, data
      slow.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal "hello", read_response(slow)[2], "the connection stays in sync after a spilled body"
    ensure
      slow&.close
    end
  end

  def test_header_timeout_answers_408
    with_server(HELLO, header_timeout: 0.5) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("GET / HTTP/1.1\r\n")
      assert_match(%r{\AHTTP/1.1 408 }, read_all(sock, timeout: 5))
    ensure
      sock&.close
    end
  end

  def test_pool_grows_under_load_and_serves_concurrently
    gate = Queue.new
    arrived = Queue.new
    app = ->(env) { env["PATH_INFO"] == "/wait" ? (arrived << true; gate.pop; HELLO.call(env)) : HELLO.call(env) }
    with_server(app, min_threads: 1, max_threads: 4) do |_, port|
      waiting = Array.new(3) { TCPSocket.new("127.0.0.1", port).tap { |s| s.write("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n") } }
      3.times { pop_within(arrived) } # three threads blocked in the app
      raw = raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout: 5)
      # answered while three threads are blocked in the app: the pool started a fourth (which may
      # already have left again: a thread started on demand leaves after its request once the
      # supervisor saw the process computing, as a JIT compiling on JRuby can make it look)
      assert_match(/hello\z/, raw)
      3.times { gate << true }
      waiting.each { |s| assert_equal 200, read_response(s)[0] }
      waiting.each(&:close)
    end
  end

  def test_stop_closes_idle_keep_alive_connections_promptly
    with_server(HELLO) do |_, port, server|
      socks = Array.new(30) do
        TCPSocket.new("127.0.0.1", port).tap do |s|
          s.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
          read_response(s)
        end
      end
      started = Margay::Clock.now
      server.stop
      socks.each { |s| assert_equal "", read_all(s, timeout: 5) }
      assert_operator Margay::Clock.now - started, :<, 2
      socks.each(&:close)
    end
  end

  # A kept-alive connection whose client sent its next request just before the stop, while the
  # only thread was busy (the request waits in the kernel, unread), is not an idle one: the
  # request is in flight and gets its answer, with connection: close, not a reset.
  def test_graceful_stop_serves_a_request_waiting_on_a_kept_alive_connection
    started = Queue.new
    app = lambda do |env|
      if env["PATH_INFO"] == "/slow"
        started << true
        sleep 0.5
      end
      [200, {}, [env["PATH_INFO"]]]
    end
    with_server(app, min_threads: 1, max_threads: 1) do |_, port, server|
      kept = TCPSocket.new("127.0.0.1", port)
      kept.write("GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal "/first", read_response(kept)[2]
      slow = Thread.new { raw_exchange(port, "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") }
      pop_within(started)
      kept.write("GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
      server.stop
      status, headers, body = read_response(kept, timeout: 5)
      assert_equal [200, "close", "/next"], [status, headers["connection"], body]
      assert_match(%r{/slow\z}, slow.value)
    ensure
      kept&.close
    end
  end

  # Clients that keep connecting must not keep a stopping server alive: once
  # stopped it accepts nothing more, also when a thread was in the middle of
  # accepting (and about to re-arm the listener) when the stop came.
  def test_stop_is_prompt_while_new_connections_keep_coming
    5.times do
      with_server(HELLO, min_threads: 2, max_threads: 2) do |_, port, server, thread|
        running = true
        clients = Array.new(4) do
          Thread.new do
            while running
              begin
                raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout: 2)
              rescue SystemCallError
                sleep 0.01 # refused once the listener is closed
              end
            end
          end
        end
        Timeout.timeout(5) { sleep 0.01 until server.stats[:requests] > 50 }
        server.stop
        stopped = thread.join(3)
        running = false
        clients.each(&:join)
        assert stopped, "the server kept serving new connections after stop"
      end
    end
  end

  def test_graceful_stop_finishes_in_flight_requests
    started = Queue.new
    app = ->(_env) { started << true; sleep 0.5; [200, {}, ["done"]] }
    with_server(app) do |_, port, server|
      client = Thread.new { raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") }
      pop_within(started)
      server.stop
      assert_match(/done\z/, client.value)
    end
  end

  # During the grace period a new client is refused at once (a proxy can
  # retry elsewhere), not left in the listen backlog until the server exits.
  def test_graceful_stop_refuses_new_connections_while_requests_finish
    started = Queue.new
    release = Queue.new
    app = ->(_env) { started << true; release.pop; [200, {}, ["done"]] }
    with_server(app) do |_, port, server|
      client = Thread.new { raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") }
      pop_within(started)
      server.stop
      refused = Timeout.timeout(5) do
        loop do
          # bounded: a connect the backlog has no room for waits for SYN retries (1 s, then 3 s)
          Socket.tcp("127.0.0.1", port, connect_timeout: 0.5).close
          sleep 0.01
        rescue Errno::ETIMEDOUT
          next
        rescue Errno::ECONNREFUSED, Errno::ECONNRESET # reset: its SYN was queued as the listener closed
          break true
        end
      end
      assert refused
      release << true
      assert_match(/done\z/, client.value, "the request in flight still completes")
    end
  end
end

# The backend the suite runs on is the one asked for (CI runs it with poll too).
class BackendTest < Minitest::Test
  include Margay::TestHelper

  def test_event_backend_in_use
    skip_on_jruby "the pure engine waits with IO.select, not epoll or poll(2)"
    with_server(HELLO) do |_, port, server|
      raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      expected = BACKEND == :auto ? (RUBY_PLATFORM.include?("linux") ? "epoll" : "poll") : BACKEND.to_s
      assert_equal expected, server.stats[:event_backend]
    end
  end

  def test_extra_threads_leave_after_idling
    gate = Queue.new
    app = ->(env) { env["PATH_INFO"] == "/wait" ? (gate.pop; HELLO.call(env)) : HELLO.call(env) }
    with_server(app, min_threads: 1, max_threads: 3, thread_idle_timeout: 0.3) do |_, port, server|
      socks = Array.new(2) { TCPSocket.new("127.0.0.1", port).tap { |s| s.write("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n") } }
      Timeout.timeout(5) { sleep 0.02 until server.stats[:threads] == 3 }
      2.times { gate << true }
      socks.each { |s| assert_equal 200, read_response(s)[0] }
      socks.each(&:close)
      Timeout.timeout(5) { sleep 0.05 until server.stats[:threads] == 1 }
      assert_equal 1, server.stats[:threads]
    end
  end
end

# The hello-world fast path (issue 14): what a thread does between two requests, and the
# per-request objects the server no longer builds.
class FastPathTest < Minitest::Test
  include Margay::TestHelper

  def get(sock, path = "/")
    sock.write("GET #{path} HTTP/1.1\r\nHost: x\r\n\r\n")
    read_response(sock)
  end

  # A pool of several threads at rest: one waits in the event set, the others stand by (they
  # are woken only when the threads out with requests stay away, busy in the app). Before, every
  # idle thread waited in the event set, and the kernel handed them the requests in turn: a
  # GVL hand-off and a context switch for much of a fast app's traffic.
  def test_at_rest_one_thread_polls_and_the_others_stand_by
    skip_on_jruby "the C engine's polling and standby threads; the pure engine's threads wait on a condition variable"
    with_server(HELLO, min_threads: 3, max_threads: 3) do |_, port, server|
      sock = TCPSocket.new("127.0.0.1", port)
      10.times { assert_equal 200, get(sock)[0] }
      engine = server.instance_variable_get(:@engine) # set once the server runs
      # One snapshot with all three: a standby steps out of its wait now and then (the watcher
      # looks again every millisecond for a while after a request; any standby at its timeout),
      # so a single look may catch one in between.
      rest = { waiting_threads: 3, polling: 1, standing_by: 2 }
      seen = nil
      deadline = Margay::Clock.now + 5
      until (seen = engine.stats.slice(*rest.keys)) == rest || Margay::Clock.now > deadline
        sleep 0.01
      end
      assert_equal rest, seen, "at rest: one thread polls, the other two stand by"
      sock.close
    end
  end

  # A thread blocked in the app does not hold the others' requests: a standing-by thread
  # takes the poller's place once no thread came back to the loop for a millisecond.
  def test_a_standby_serves_while_the_other_thread_is_blocked_in_the_app
    gate = Queue.new
    arrived = Queue.new
    app = ->(env) { env["PATH_INFO"] == "/wait" ? (arrived << true; gate.pop; HELLO.call(env)) : HELLO.call(env) }
    with_server(app, min_threads: 2, max_threads: 2) do |_, port|
      blocked = TCPSocket.new("127.0.0.1", port)
      blocked.write("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
      pop_within(arrived)
      3.times { assert_match(/hello\z/, raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) }
      gate << true
      assert_equal 200, read_response(blocked)[0]
      blocked.close
    end
  end

  # Threads standing by (not in the event set) still stop with the server, at once.
  def test_standing_by_threads_stop_promptly
    with_server(HELLO, min_threads: 4, max_threads: 4) do |_, port, server, thread|
      sock = TCPSocket.new("127.0.0.1", port)
      5.times { assert_equal 200, get(sock)[0] }
      sock.close
      started = Margay::Clock.now
      server.stop
      assert thread.join(5), "the server did not stop"
      assert_operator Margay::Clock.now - started, :<, 2
    end
  end

  # One wait takes several ready events; those beyond the first wait in the engine's stash for
  # the next thread in the loop. Many connections ready at once, with one thread and with two:
  # every request is answered, in as many rounds as the clients send.
  def test_events_taken_together_are_all_served
    [1, 2].each do |threads|
      gate = Queue.new
      arrived = Queue.new
      app = ->(env) { env["PATH_INFO"] == "/wait" ? (arrived << true; gate.pop; HELLO.call(env)) : HELLO.call(env) }
      with_server(app, min_threads: threads, max_threads: threads) do |_, port|
        blocker = TCPSocket.new("127.0.0.1", port)
        blocker.write("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
        pop_within(arrived) # every thread of the pool is in the app (or one stands by) ...
        socks = Array.new(40) { TCPSocket.new("127.0.0.1", port) }
        socks.each { |s| s.write("GET /#{s.local_address.ip_port} HTTP/1.1\r\nHost: x\r\n\r\n") }
        sleep 0.05 # ... while 40 requests become ready together
        gate << true
        3.times do |round|
          socks.each { |s| assert_equal 200, read_response(s)[0], "round #{round}, #{threads} thread(s)" }
          socks.each { |s| s.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n") } if round < 2
        end
        assert_equal 200, read_response(blocker)[0]
        (socks << blocker).each(&:close)
      end
    end
  end

  # A request without a body gets the one shared, frozen empty input; it reads like an empty
  # binary IO (Rack::Lint's checks run in the next test).
  def test_bodiless_requests_share_one_empty_input
    inputs = []
    app = lambda do |env|
      input = env["rack.input"]
      inputs << input
      reads = [input.read, input.read(4), input.read(0), input.gets, input.rewind, input.read(2, +"ab"), input.size]
      lines = []
      input.each { |line| lines << line }
      reads << lines
      input.close
      [200, { "content-type" => "text/plain" }, [reads.inspect]]
    end
    with_server(app, lint: false) do |_, port|
      sock = TCPSocket.new("127.0.0.1", port)
      2.times { assert_equal '["", nil, "", nil, 0, nil, 0, []]', get(sock)[2] }
      sock.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
      assert_equal 200, read_response(sock)[0]
      sock.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
      assert_equal '["abc", nil, "", nil, 0, "ab", 3, ["c"]]', read_response(sock)[2]
      sock.close
    end
    assert_same inputs[0], inputs[1]
    assert_same inputs[0], inputs[2]
    assert inputs[0].frozen?
    assert_equal Encoding::BINARY, inputs[0].read.encoding
    refute_same inputs[0], inputs[3]
  end

  def test_the_empty_input_passes_rack_lint
    app = lambda do |env|
      input = env["rack.input"]
      body = [input.read, input.read(10), input.gets].inspect
      input.each { |_| nil }
      [200, { "content-type" => "text/plain" }, [body]]
    end
    with_server(app) do |_, port|
      raw = raw_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      assert_match(/\["", nil, nil\]\z/, raw)
    end
  end

  # REMOTE_ADDR is formatted once per connection (kept as text on the connection) and is the
  # same for every request on it, and on the next connection from the same address.
  def test_remote_addr_on_every_request_of_a_connection
    addrs = []
    app = ->(env) { addrs << env["REMOTE_ADDR"]; HELLO.call(env) }
    with_server(app) do |_, port|
      2.times do
        sock = TCPSocket.new("127.0.0.1", port)
        2.times { assert_equal 200, get(sock)[0] }
        sock.close
      end
    end
    assert_equal ["127.0.0.1"] * 4, addrs
  end
end
