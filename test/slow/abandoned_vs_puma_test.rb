# frozen_string_literal: true

require_relative "support/side_by_side"

# Requests whose client closed its sending side (FIN) while they waited for a thread, under
# Puma 8 (bench/Gemfile) and Margay side by side, each started as a user would
# (`bundle exec puma|margay -t 1:1 -b tcp://127.0.0.1:0` from an app directory). Puma drops
# such a request before the app when the socket is in CLOSE_WAIT (closed_socket? in
# Response#handle_request); Margay drops a bodiless one whose event brought the FIN
# (abandoned() in core/loop.c). One thread, held by the app on GET /hold until the test
# releases it, makes the order deterministic: every request below waits for that thread, and
# the client's FIN has reached the server's kernel (wait_acked) before the thread is freed.
#
# Seen for each case: which of the closed client's paths the app was called with, the statuses
# the closed client got and how its connection ended, and a live client's answer afterwards.
# Puma's side is observed live, so a Puma upgrade that changes behaviour shows. Observed with
# Puma 8.0.2: a lone GET is dropped by both; pipelined GETs and a POST sent before the FIN are
# dropped by Puma (the socket is in CLOSE_WAIT) and answered by Margay (DIFFERENCES says why).
# Not timing-dependent: the FIN is acknowledged by the server's kernel before the thread frees.
class AbandonedVsPumaTest < Minitest::Test
  include SideBySide
  include SideBySide::Case
  include Margay::TestHelper
  parallelize_me!

  # Logs every PATH_INFO (one line each, in APP_DIR/calls.log) before answering it with the
  # path; GET /hold waits (at most 30 s) until APP_DIR/release exists.
  APP = <<~'RUBY'
    dir = ENV.fetch("APP_DIR")
    calls = File.join(dir, "calls.log")
    release = File.join(dir, "release")
    lock = Mutex.new
    run lambda { |env|
      path = env["PATH_INFO"]
      lock.synchronize { File.open(calls, "a") { |f| f.puts(path) } }
      if path == "/hold"
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
        sleep 0.01 until File.exist?(release) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      end
      [200, { "content-type" => "text/plain" }, [path]]
    }
  RUBY

  GET = "GET %s HTTP/1.1\r\nHost: x\r\n\r\n"

  # What the closed client sends before its FIN, and the paths that carries.
  CASES = {
    "a GET, then FIN" => { send: format(GET, "/gone"), paths: %w[/gone] },
    "two pipelined GETs, then FIN" => { send: format(GET, "/one") + format(GET, "/two"), paths: %w[/one /two] },
    "a POST with a 2-byte body, then FIN" => {
      send: "POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi", paths: %w[/post]
    }
  }.freeze

  # What both servers do with a request they drop: the app never sees it, the client gets no
  # byte, its connection is closed.
  DROPPED = { "hold answered" => 200, "app called for" => [], "closed client got" => "closed",
              "live client got" => [200, "/live"] }.freeze
  # Where both must drop the request (and, being compared, do the same).
  SAME_AND_DROPPED = ["a GET, then FIN"].freeze

  # Where Margay differs from Puma on purpose (observed with Puma 8.0.2): both sides must still
  # be what is recorded here, so a change on either side shows. Puma checks the socket's TCP
  # state (CLOSE_WAIT once the client's FIN arrived) before every request, whatever it is;
  # Margay drops only a bodiless request that is the last thing its client sent.
  DIFFERENCES = {
    "two pipelined GETs, then FIN" => {
      puma: DROPPED,
      margay: DROPPED.merge("app called for" => %w[/one /two], "closed client got" => "200, 200, closed"),
      why: "a half-close says the client sends nothing more, not that it reads nothing more: " \
           "requests pipelined before it are answered (only a lone bodiless request is dropped)"
    },
    "a POST with a 2-byte body, then FIN" => {
      puma: DROPPED,
      margay: DROPPED.merge("app called for" => %w[/post], "closed client got" => "200, closed"),
      why: "a request with a body may change something the client expects changed: it is run " \
           "even though its client closed"
    }
  }.freeze

  def calls(dir)
    path = File.join(dir, "calls.log")
    File.exist?(path) ? File.readlines(path, chomp: true) : []
  end

  # Wait (bounded) until the app has been called with +path+.
  def wait_call(dir, path, timeout: 15)
    deadline = Margay::Clock.now + timeout
    sleep 0.01 until calls(dir).include?(path) || Margay::Clock.now > deadline
    assert_includes calls(dir), path, "the app was never called with #{path}"
  end

  # A kept-alive connection whose first request was answered (its next one waits in the
  # server's event loop or reactor, not in accept).
  def kept_alive(listener, name)
    sock = TCPSocket.new(listener.connect_host, listener.port)
    sock.write(format(GET, "/#{name}"))
    assert_equal [200, "/#{name}"], read_response(sock, timeout: 10).values_at(0, 2)
    sock
  end

  # The statuses of what arrived on +sock+ until it closed, and how it ended
  # ("closed", "reset", or "still open" after +timeout+ seconds without a close).
  def until_closed(sock, timeout: 5)
    data = +""
    ending = "still open after #{timeout} s"
    deadline = Margay::Clock.now + timeout
    while (left = deadline - Margay::Clock.now).positive? && sock.wait_readable(left)
      chunk = sock.read_nonblock(65_536, exception: false)
      if chunk.nil?
        ending = "closed"
        break
      end
      data << chunk if chunk.is_a?(String)
    end
    [*statuses(data), ending].join(", ")
  rescue Errno::ECONNRESET
    [*statuses(data), "reset"].join(", ")
  end

  # The status of each response in +data+ (the bodies are paths: no status line in them).
  def statuses(data)
    data.scan(%r{HTTP/1\.[01] (\d{3}) }).flatten
  end

  # One server: while the only thread is held, a kept-alive client sends +bytes+ and closes its
  # side, and a live kept-alive client sends GET /live; then the thread is released.
  def observe(server, dir, bytes, paths)
    run = Run.new(server, %w[-t 1:1 -b tcp://127.0.0.1:0], dir: dir, env: { "APP_DIR" => dir }).start
    @runs << run
    listener = run.wait_serving(timeout: 30)&.first
    return { seen: "did not serve: #{run.status.inspect}", output: run.output } unless listener

    closing = kept_alive(listener, "warm-closing")
    live = kept_alive(listener, "warm-live")
    holder = TCPSocket.new(listener.connect_host, listener.port)
    holder.write(format(GET, "/hold"))
    wait_call(dir, "/hold")
    closing.write(bytes)
    closing.close_write
    wait_acked(closing)
    live.write(format(GET, "/live"))
    wait_acked(live)
    File.write(File.join(dir, "release"), "")
    held = read_response(holder, timeout: 10).first
    live_answer = read_response(live, timeout: 10).values_at(0, 2)
    closed_client_got = until_closed(closing)
    run.stop
    { seen: { "hold answered" => held, "app called for" => calls(dir) & paths,
              "closed client got" => closed_client_got, "live client got" => live_answer },
      output: run.output }
  ensure
    [closing, live, holder].each { |s| s&.close }
  end

  CASES.each_with_index do |(name, spec), i|
    define_method(:"test_#{i}_#{name.gsub(/\W+/, '_')}") do
      observed = side_by_side(prefix: "margay-abandoned-", app: APP) { |server, dir| observe(server, dir, spec[:send], spec[:paths]) }
      assert_same observed, name
      assert_equal DROPPED, observed[:puma][:seen], "#{name}: Puma no longer drops it" if SAME_AND_DROPPED.include?(name)
    end
  end
end
