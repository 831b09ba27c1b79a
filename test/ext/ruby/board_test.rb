# frozen_string_literal: true

require "test_helper"
require "margay/server"

# The cluster's board of waiting threads per worker (Native::IdleBoard,
# ext/margay/ruby/board.c; its arithmetic is core/board.c): a server counts
# its waiting threads into its slot, every process forked after the board was
# made sees the same counters, and a worker asks whether any other worker has
# threads free (and how many) before it hands clients over.
class IdleBoardTest < Minitest::Test
  include Margay::TestHelper

  def test_slots_are_shared_with_forked_processes
    board = Margay::Native::IdleBoard.new(4)
    assert_equal [0, 0, 0, 0], Array.new(4) { |i| board[i] }
    start_server(board, 2, min_threads: 2, max_threads: 2)
    eventually { board[2] == 2 }
    child_sees = IO.popen("-") { |io| io ? io.read : (print(board[2]); $stdout.flush; exit!(0)) }
    assert_equal "2", child_sees, "a forked process reads the live count"
    IO.popen("-") { |io| io ? io.read : (board.clear(2); exit!(0)) }
    assert_equal 0, board[2], "and the parent sees a child's write (the master clears a dead worker's slot)"
  end

  def test_others_waiting_counts_the_other_slots_only
    board = Margay::Native::IdleBoard.new(3)
    server = start_server(board, 0, min_threads: 1, max_threads: 1)
    eventually { board[0] == 1 }
    assert_equal 0, server.engine.others_waiting, "its own waiting thread does not count"
    start_server(board, 1, min_threads: 2, max_threads: 2)
    start_server(board, 2, min_threads: 1, max_threads: 1)
    eventually { board[1] == 2 && board[2] == 1 }
    eventually { server.engine.others_waiting == 3 } # once their threads have waited 2 ms (core/board.c)
    board.clear(1)
    assert_equal 0, board[1]
    assert_equal 1, server.engine.others_waiting
  end

  def test_a_stopped_server_counts_itself_out
    board = Margay::Native::IdleBoard.new(1)
    server = start_server(board, 0, min_threads: 3, max_threads: 3)
    eventually { board[0] == 3 }
    stop_server(server)
    assert_equal 0, board[0]
  end

  def test_handoff_quota_is_half_the_gap_to_the_least_loaded_serving_worker
    board = Margay::Native::IdleBoard.new(3)
    busy = start_server(board, 0, min_threads: 1, max_threads: 1)
    calm = start_server(board, 1, min_threads: 1, max_threads: 1)
    eventually { board[0] == 1 && board[1] == 1 }
    clients = connect(busy, 10) + connect(calm, 2)
    eventually { board.connections(0) == 10 && board.connections(1) == 2 }
    assert_equal 4, busy.engine.handoff_quota, "(10 - 2) / 2; slot 2 serves nothing and does not count"
    assert_equal 0, calm.engine.handoff_quota
    clients.concat(connect(calm, 5))
    eventually { board.connections(1) == 7 }
    assert_equal 1, busy.engine.handoff_quota, "a gap of 3: one moved leaves 9 and 8"
    clients.concat(connect(calm, 2))
    eventually { board.connections(1) == 9 }
    assert_equal 0, busy.engine.handoff_quota, "a gap of 1: nothing to even out"
    clients.concat(connect(busy, 30))
    eventually { board.connections(0) == 40 }
    assert_equal 0, calm.engine.handoff_quota
    clients.concat(connect(calm, 29))
    eventually { board.connections(1) == 38 }
    assert_equal 0, busy.engine.handoff_quota, "a gap of 2 in 40 (5 %) is not worth moving clients for"
    clients.each(&:close)
    eventually { board.connections(0).zero? && board.connections(1).zero? }
  end

  def test_a_gone_worker_is_not_a_target
    board = Margay::Native::IdleBoard.new(2)
    server = start_server(board, 0, min_threads: 1, max_threads: 1)
    connect(server, 8)
    eventually { board.connections(0) == 8 }
    assert_equal 0, server.engine.handoff_quota, "slot 1 has no waiting thread and no connection"
    board.clear(0)
    assert_equal [0, 0], [board[0], board.connections(0)], "clear resets both counters"
  end

  def test_silent_clients_are_taken_one_per_free_thread_and_read_at_once
    board = Margay::Native::IdleBoard.new(1)
    server = start_server(board, 0, min_threads: 1, max_threads: 1)
    eventually { board[0] == 1 }
    connect(server, 3)
    eventually { board.connections(0) == 3 }
    assert_equal [0, 0], [board.unread(0), board.busy(0)], "each was read at once by the thread that took it"
    board.clear(0)
    assert_equal [0, 0, 0], [board[0], board.connections(0), board.unread(0)]
  end

  # The only thread is busy while A then B connect and send. Back from its request, the thread
  # takes A from the backlog (its free share), queued behind the listener's event that A's
  # arrival made; at that event it takes B. A came first and is served first.
  def test_a_client_taken_early_is_served_before_the_one_the_listener_event_brings
    board = Margay::Native::IdleBoard.new(1)
    gate = Queue.new
    served = Queue.new
    app = lambda do |env|
      served << env["PATH_INFO"]
      gate.pop if env["PATH_INFO"] == "/hold"
      [200, {}, ["ok"]]
    end
    server = start_server(board, 0, app: app, min_threads: 1, max_threads: 1)
    eventually { board[0] == 1 }
    hold, = connect(server, 1)
    hold.write("GET /hold HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert_equal "/hold", served.pop
    clients = %w[/a /b].map do |path|
      c, = connect(server, 1)
      c.write("GET #{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      sleep 0.05
      c
    end
    assert_equal 1, board.connections(0), "A and B wait in the backlog while the thread is busy"
    gate << true
    assert_equal %w[/a /b], [served.pop, served.pop], "first come, first served"
    [hold, *clients].each { |c| assert_match(/\AHTTP\/1\.1 200/, c.read) }
    board.clear(0)
  end

  def test_a_look_counts_the_requests_waiting_for_a_thread_and_the_longest_wait
    board = Margay::Native::IdleBoard.new(1)
    gate = Queue.new
    server = start_server(board, 0, app: ->(_env) { gate.pop && [200, {}, ["ok"]] }, min_threads: 1, max_threads: 1)
    eventually { board[0] == 1 }
    assert_equal [0, 0], server.queue_look, "nothing waits"
    first, second = connect(server, 2)
    eventually { board.connections(0) == 2 } # both taken in while the thread was free
    first.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    eventually { board[0].zero? }
    second.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    sleep 0.3
    waiting, oldest = server.queue_look
    assert_equal 1, waiting, "the second request waits for the one thread"
    assert_operator oldest, :>=, 250, "since it arrived, by the kernel's stamp"
    assert_operator oldest, :<, 5000
    assert_equal [1, oldest], [board.backlog(0), board.oldest_wait_ms(0)], "the look is on the board"
    assert_equal 1, server.stats[:backlog]
    assert_operator server.stats[:oldest_wait_ms], :>=, oldest
    2.times { gate << true }
    [first, second].each { |c| assert_match(/\AHTTP\/1\.1 200/, c.readpartial(4096)) }
    eventually { server.queue_look == [0, 0] }
    board.clear(0)
    assert_equal [0, 0], [board.backlog(0), board.oldest_wait_ms(0)]
  end

  def test_out_of_range_slots_raise
    board = Margay::Native::IdleBoard.new(2)
    assert_raises(IndexError) { board[2] }
    assert_raises(IndexError) { board.clear(-1) }
    assert_raises(IndexError) { board.connections(2) }
    assert_raises(IndexError) { board.unread(2) }
    assert_raises(IndexError) { board.busy(-1) }
    assert_raises(IndexError) { board.backlog(2) }
    assert_raises(IndexError) { board.oldest_wait_ms(-1) }
    assert_raises(ArgumentError) { Margay::Native::IdleBoard.new(0) }
  end

  # Servers a test started and did not stop, and its client sockets.
  def teardown
    (@clients || []).each { |c| c.close unless c.closed? }
    (@threads || {}).keys.reverse_each { |server| stop_server(server) }
  end

  private

  def start_server(board, index, app: HELLO, **settings)
    config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], silent: true, event_backend: BACKEND, **settings)
    log = Margay::Log.new(out: StringIO.new, err: StringIO.new)
    server = Margay::Server.new(Rack::Lint.new(app), config, log: log, idle_board: [board, index])
    server.bind
    @threads ||= {}
    @threads[server] = Thread.new { server.run }
    server
  end

  def eventually(&condition)
    Timeout.timeout(5) { sleep 0.01 until condition.call }
  end

  # +count+ connections to +server+ (closed at teardown if the test did not).
  def connect(server, count)
    port = server.addresses.first[/\d+\z/].to_i
    (@clients ||= []).concat(Array.new(count) { TCPSocket.new("127.0.0.1", port) }).last(count)
  end

  def stop_server(server)
    server.stop
    assert @threads.delete(server).join(10), "server did not stop"
  end
end
