# frozen_string_literal: true

require "test_helper"
require "net/http"
require_relative "fiber_test_helper"

# Fiber mode (issue 13) over real sockets: one pool thread (-t 1:1) serving many waiting
# requests at once, each in its own Fiber under Margay's scheduler. Concurrency is asserted by
# counting the requests in flight inside the app, never by wall time.
class FiberModeTest < Minitest::Test
  skip_on_jruby "no fiber mode: it needs the C engine's epoll"
  include Margay::TestHelper
  include FiberTestHelper

  # The app's view of concurrency: how many requests are inside it, and the most at once.
  class Overlap
    attr_reader :max

    def initialize
      @now = 0
      @max = 0
      @lock = Mutex.new
    end

    def around
      @lock.synchronize do
        @now += 1
        @max = @now if @now > @max
      end
      yield
    ensure
      @lock.synchronize { @now -= 1 }
    end
  end

  # Send GET +paths+ on one connection each, all before reading any answer; returns the
  # responses ([status, headers, body]) in order.
  def concurrent_gets(port, paths, timeout: 10)
    socks = send_gets(port, paths)
    socks.map { |sock| read_response(sock, timeout: timeout) }
  ensure
    socks&.each(&:close)
  end

  # One connection per path, each with its GET sent (keep-alive); the caller reads and closes.
  def send_gets(port, paths)
    paths.map do |path|
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("GET #{path} HTTP/1.1\r\nHost: x\r\n\r\n")
      sock
    end
  end

  # The server closed (or reset) +sock+ without answering.
  def assert_dropped(sock)
    assert sock.wait_readable(5), "the connection is still open"
    assert_nil sock.read_nonblock(1, exception: false), "EOF, no answer"
  rescue Errno::ECONNRESET
    pass
  end

  def get(port, path = "/", timeout: 10)
    sock = TCPSocket.new("127.0.0.1", port)
    sock.write("GET #{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    read_response(sock, timeout: timeout)
  ensure
    sock&.close
  end

  def test_many_sleeping_requests_overlap_on_one_thread
    overlap = Overlap.new
    threads = Queue.new
    app = lambda do |_env|
      overlap.around { sleep 0.05 }
      threads << Thread.current
      text(Fiber.current.blocking? ? "blocking" : "fiber")
    end
    fiber_server(app) do |_host, port|
      responses = concurrent_gets(port, Array.new(200, "/"))
      assert_equal [[200, "fiber"]], responses.map { |s, _, b| [s, b] }.uniq
    end
    # thread mode on one thread: 1 at a time
    assert_operator overlap.max, :>=, 20, "200 sleeping requests on one thread: at most #{overlap.max} at once"
    assert_equal 1, Array.new(threads.size) { threads.pop }.uniq.size, "one thread served them all"
  end

  def test_keep_alive_requests_are_served_in_turn
    fiber_server(->(env) { text(env["PATH_INFO"]) }) do |_host, port|
      sock = TCPSocket.new("127.0.0.1", port)
      %w[/a /b /c].each do |path|
        sock.write("GET #{path} HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal [200, path], read_response(sock).values_at(0, 2)
      end
      sock.write("GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n") # pipelined
      assert_equal [[200, "/1"], [200, "/2"]], Array.new(2) { read_response(sock).values_at(0, 2) }
    ensure
      sock&.close
    end
  end

  def test_net_http_to_a_slow_service_yields_the_thread
    upstream = TCPServer.new("127.0.0.1", 0)
    overlap = Overlap.new
    served = Thread.new do
      conns = Array.new(5) { upstream.accept }
      sleep 0.2 # all five connected before any answer: the app's fibers overlapped
      conns.each do |c|
        c.write("HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\nslow")
        c.close
      end
      :ok
    end
    app = lambda do |_env|
      body = overlap.around { Net::HTTP.get(URI("http://127.0.0.1:#{upstream.addr[1]}/")) }
      text(body)
    end
    fiber_server(app) do |_host, port|
      assert_equal [[200, "slow"]], concurrent_gets(port, Array.new(5, "/")).map { |s, _, b| [s, b] }.uniq
    end
    assert_equal :ok, served.value
    assert_equal 5, overlap.max
  ensure
    upstream&.close
  end

  def test_a_queue_hands_over_between_fibers_and_from_another_thread
    queue = Queue.new
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/pop" then text(queue.pop)
      when "/push" then queue << "from a fiber"
                        text("pushed")
      end
    end
    fiber_server(app) do |_host, port|
      waiting = Thread.new { get(port, "/pop") }
      sleep 0.1 until queue.num_waiting.positive? # the popping fiber waits; the thread serves on
      assert_equal [200, "pushed"], get(port, "/push").values_at(0, 2)
      assert_equal [200, "from a fiber"], waiting.value.values_at(0, 2)

      waiting = Thread.new { get(port, "/pop") }
      sleep 0.01 until queue.num_waiting.positive?
      queue << "from another thread" # unblock from outside the pool thread: its mailbox
      assert_equal [200, "from another thread"], waiting.value.values_at(0, 2)
    end
  end

  def test_mutex_and_condition_variable_between_fibers
    lock = Mutex.new
    cond = ConditionVariable.new
    signalled = []
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/hold" then lock.synchronize { sleep 0.2 } && text("held")
      when "/lock" then lock.synchronize { text("locked") }
      when "/wait"
        lock.synchronize { cond.wait(lock) while signalled.empty? }
        text("woken")
      when "/signal"
        lock.synchronize do
          signalled << true
          cond.signal
        end
        text("signalled")
      end
    end
    fiber_server(app) do |_host, port|
      assert_equal [[200, "held"], [200, "locked"]],
                   concurrent_gets(port, %w[/hold /lock]).map { |s, _, b| [s, b] }
      assert_equal [[200, "woken"], [200, "signalled"]],
                   concurrent_gets(port, %w[/wait /signal]).map { |s, _, b| [s, b] }
    end
  end

  def test_timeout_timeout_interrupts_a_waiting_fiber
    app = lambda do |env|
      if env["PATH_INFO"] == "/slow"
        begin
          Timeout.timeout(0.1) { sleep 5 }
          text("not interrupted")
        rescue Timeout::Error
          text("timed out")
        end
      else
        Timeout.timeout(5) { sleep 0.01 }
        text("in time")
      end
    end
    fiber_server(app) do |_host, port|
      assert_equal [[200, "timed out"], [200, "in time"]],
                   concurrent_gets(port, %w[/slow /fast]).map { |s, _, b| [s, b] }
    end
  end

  def test_a_fiber_that_raises_gets_a_500_and_the_thread_goes_on
    app = lambda do |env|
      sleep 0.01
      raise "boom" if env["PATH_INFO"] == "/raise"

      text("fine")
    end
    fiber_server(app, environment: "production") do |_host, port|
      assert_equal [[500], [200]], concurrent_gets(port, %w[/raise /ok]).map { |s, _, _| [s] }
      assert_equal [200, "fine"], get(port).values_at(0, 2)
    end
    assert_match(/RuntimeError.*boom|boom.*RuntimeError/, @last_server_log)
  end

  def test_request_timeout_in_a_fiber
    app = lambda do |env|
      sleep(env["PATH_INFO"] == "/slow" ? 10 : 0.01)
      text("done")
    end
    fiber_server(app, request_timeout: 0.2) do |_host, port|
      assert_equal [[503], [200]], concurrent_gets(port, %w[/slow /fast]).map { |s, _, _| [s] }
      assert_equal 200, get(port).first
    end
    assert_match(%r{request_timeout: GET /slow ran 0\.\ds \(limit 0\.2s\)}, @last_server_log)
  end

  def test_a_graceful_stop_lets_waiting_fibers_finish
    started = Queue.new
    app = lambda do |_env|
      started << true
      sleep 0.3
      text("finished")
    end
    fiber_server(app) do |_host, port, server|
      socks = send_gets(port, ["/"] * 5)
      5.times { pop_within(started) }
      server.stop
      assert_equal [[200, "finished"]], socks.map { |s| read_response(s).values_at(0, 2) }.uniq
    ensure
      socks&.each(&:close)
    end
  end

  # A forced stop (the grace period over) used to abandon the request fibers waiting on the
  # thread: their ensure blocks (the app's, body#close, the tempfile's) never ran. ForceShutdown
  # now unwinds each of them.
  def test_a_forced_stop_unwinds_the_waiting_fibers
    started = Queue.new
    unwound = Queue.new
    app = lambda do |_env|
      started << true
      begin
        sleep 30
      ensure
        unwound << true
      end
      text("never")
    end
    fiber_server(app, force_shutdown_after: 0.3) do |_host, port, server|
      socks = send_gets(port, ["/"] * 3)
      3.times { pop_within(started) }
      server.stop
      3.times { pop_within(unwound, 10) }
      socks.each { |s| assert_dropped(s) }
    ensure
      socks&.each(&:close)
    end
  end

  # The forced stop lands in a fiber that is computing, and that fiber's unwinding waits
  # (through the scheduler) in its ensure: the stop is still the thread's, and the fiber
  # waiting beside it is unwound too. It used to carry on as if no stop had come: the thread
  # served on until killed, the waiting fiber abandoned.
  def test_a_forced_stop_taken_by_a_computing_fiber_still_unwinds_the_others
    events = Queue.new
    app = lambda do |env|
      if env["PATH_INFO"] == "/compute"
        events << :computing
        begin
          loop { Math.sqrt(2) }
        ensure
          events << :compute_unwinding
          sleep 5 # waits through the scheduler while the ForceShutdown unwinds it (past the 2 s join)
        end
      else
        events << :waiting
        begin
          sleep 30
        ensure
          events << :wait_unwound
        end
      end
      text("never")
    end
    fiber_server(app, force_shutdown_after: 0.3) do |_host, port, server|
      socks = send_gets(port, ["/wait"])
      assert_equal :waiting, pop_within(events)
      socks += send_gets(port, ["/compute"])
      assert_equal :computing, pop_within(events)
      server.stop
      assert_equal %i[compute_unwinding wait_unwound], [pop_within(events, 10), pop_within(events, 10)]
    ensure
      socks&.each(&:close)
    end
  end

  # A fiber's response is queued and sent by its thread's next wait, without the GVL; a request
  # pipelined behind it goes back to the loop then. Every request of every connection is
  # answered, in order on each connection, with two threads sharing the connections; a HEAD
  # gets no body, and a request with connection: close is answered, then the connection closes.
  def test_responses_sent_by_the_wait_answer_every_pipelined_request_in_order
    app = lambda do |env|
      sleep 0.002 if env["PATH_INFO"].end_with?("1")
      text(env["PATH_INFO"])
    end
    fiber_server(app, min_threads: 2, max_threads: 2) do |_host, port|
      socks = Array.new(40) { TCPSocket.new("127.0.0.1", port) }
      socks.each_with_index do |sock, i|
        sock.write(Array.new(4) { |k| "GET /#{i}/#{k} HTTP/1.1\r\nHost: x\r\n\r\n" }.join +
                   "HEAD /#{i}/h HTTP/1.1\r\nHost: x\r\n\r\nGET /#{i}/last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      end
      socks.each_with_index do |sock, i|
        got = Array.new(4) { read_response(sock, timeout: 10).values_at(0, 2) }
        assert_equal Array.new(4) { |k| [200, "/#{i}/#{k}"] }, got
        head = read_response(sock, head: true, timeout: 10)
        assert_equal [200, ""], head.values_at(0, 2)
        assert_equal [200, "/#{i}/last"], read_response(sock, timeout: 10).values_at(0, 2)
        assert sock.wait_readable(5), "connection #{i} still open 5 s after connection: close"
        assert_nil sock.read_nonblock(1, exception: false), "closed after connection: close"
      end
    ensure
      socks&.each(&:close)
    end
  end

  def test_response_finished_callbacks_run_in_fiber_mode
    finished = Queue.new
    app = lambda do |env|
      env["rack.response_finished"] << ->(_env, status, _headers, error) { finished << [status, error] }
      sleep 0.01
      text("ok")
    end
    fiber_server(app) do |_host, port|
      assert_equal 200, get(port).first
      assert_equal [200, nil], pop_within(finished)
    end
  end

  def test_max_in_flight_caps_the_requests_in_flight
    overlap = Overlap.new
    app = ->(_env) { overlap.around { sleep 0.05 } && text("ok") }
    fiber_server(app, max_in_flight: 3) do |_host, port|
      assert_equal [200], concurrent_gets(port, Array.new(12, "/")).map(&:first).uniq
    end
    assert_equal 3, overlap.max
  end

  def test_mark_as_io_bound_is_callable
    app = ->(env) { text(env["puma.mark_as_io_bound"].call.inspect) }
    fiber_server(app) do |_host, port|
      assert_equal [200, "true"], get(port).values_at(0, 2)
    end
  end

  def test_dns_and_child_processes_wait_in_the_fiber
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/dns" then text(Addrinfo.getaddrinfo("localhost", 80, nil, :STREAM).map(&:ip_address).sort.uniq.join(","))
      when "/child"
        pid = Process.spawn(RbConfig.ruby, "-e", "sleep 0.05; exit 3")
        _, status = Process.wait2(pid)
        text(status.exitstatus)
      end
    end
    fiber_server(app) do |_host, port|
      status, _, body = get(port, "/dns")
      assert_equal 200, status
      assert_includes body.split(","), "127.0.0.1"
      assert_equal [200, "3"], get(port, "/child").values_at(0, 2)
    end
  end

  def test_a_computing_fiber_leaves_new_requests_to_the_other_threads
    spinning = Queue.new
    done = false
    app = lambda do |env|
      if env["PATH_INFO"] == "/spin" # computes for 1.5 s without a single wait
        spinning << true
        t = Margay::Clock.now
        nil while Margay::Clock.now - t < 1.5
        done = true
      end
      text(done ? "after" : "during")
    end
    fiber_server(app, min_threads: 2, max_threads: 2) do |_host, port|
      spin = TCPSocket.new("127.0.0.1", port)
      spin.write("GET /spin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      pop_within(spinning)
      assert_equal [200, "during"], get(port, "/quick").values_at(0, 2), "the other thread took it"
      assert_equal [200, "after"], read_response(spin).values_at(0, 2)
    ensure
      spin&.close
    end
  end

  def test_out_of_band_runs_once_the_threads_fibers_are_done
    ran = Queue.new
    app = lambda do |_env|
      sleep 0.05
      text("ok")
    end
    fiber_server(app, hooks: { out_of_band: [-> { ran << Fiber.current.blocking? }] }) do |_host, port|
      assert_equal [200], concurrent_gets(port, Array.new(4, "/")).map(&:first).uniq
      assert_equal true, pop_within(ran), "run from the thread's loop, not inside a request's fiber"
    end
  end
end
