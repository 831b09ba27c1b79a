# frozen_string_literal: true

require "test_helper"
require "margay/cluster/balancer"
require "margay/cluster/roster"

# Keep-alive balancing (Margay::Cluster::Balancer), both sides, over real
# sockets but with a scripted engine and board, so every decision is
# deterministic: when a worker hands connections over, which worker the
# master gives them to, and what happens when nobody takes them.
class BalancerTest < Minitest::Test
  skip_on_jruby "no cluster: JRuby has no fork"
  Cluster = Margay::Cluster

  # An engine that answers as told and records what it was asked.
  class FakeEngine
    attr_accessor :saturated_ms, :others_waiting, :handoff_quota, :failure, :draining
    attr_reader :detach_calls, :adopted

    def initialize
      @saturated_ms = 0
      @others_waiting = 0
      @handoff_quota = 0
      @idle = []
      @detach_calls = []
      @adopted = []
    end

    # Idle connections it holds: [[fd, kept_alive], ...] (fds it owns).
    def hold(*connections)
      @idle.concat(connections)
    end

    def draining? = !!draining

    def detach_idle(max, pending_only)
      raise IOError, "closed engine" if @failure

      @detach_calls << [max, pending_only]
      @idle.shift(max)
    end

    # The connections it still holds are closed with it.
    def close
      @idle.each { |fd, _| IO.for_fd(fd).close }
    end

    def adopt(fd, kept_alive)
      @adopted << [fd, kept_alive]
      IO.for_fd(fd).close # served, and closed, by the engine
      true
    end
  end

  FakeServer = Struct.new(:engine)
  # A board with fixed connection counts per worker index (and, when given,
  # threads waiting per worker and the cluster's drain flag).
  FakeBoard = Struct.new(:counts, :waiting, :draining) do
    def size
      counts.size
    end

    def connections(index)
      counts.fetch(index)
    end

    def [](index)
      (waiting || []).fetch(index, 0)
    end

    def draining? = !!draining
  end

  def setup
    @log_io = StringIO.new
    @log = Margay::Log.new(out: @log_io, err: @log_io)
    @closables = []
    @engines = []
  end

  def teardown
    @engines.each(&:close)
    @closables.each { |io| io.close unless io.closed? }
  end

  # ---- the worker's side ----

  def test_nothing_moves_while_a_thread_is_free
    engine, balancer, master = worker_side
    engine.hold(connection(true))
    balancer.balance(1.0)
    assert_empty engine.detach_calls
    refute master.connection_waiting?
  end

  def test_waiting_requests_go_where_threads_wait
    engine, balancer, master = worker_side(saturated_ms: 1, others_waiting: 2)
    engine.hold(connection(true), connection(false), connection(true))
    balancer.balance(1.0)
    assert_handed_over [[2, true]], [true, false], engine, master, "as many as the threads waiting elsewhere, pending ones only"
  end

  def test_saturated_workers_even_out_at_most_every_10_ms
    engine, balancer, master = worker_side(saturated_ms: 5, handoff_quota: 1)
    engine.hold(connection(true), connection(true), connection(false))
    balancer.balance(1.0)
    balancer.balance(1.005)
    assert_equal [[1, false]], engine.detach_calls, "once within 10 ms"
    balancer.balance(1.011)
    assert_handed_over [[1, false], [1, false]], [true, true], engine, master
    engine.saturated_ms = 4
    balancer.balance(1.1)
    assert_equal 2, engine.detach_calls.size, "not before 5 ms saturated"
  end

  # Draining: a worker killed now would take the requests it holds unread
  # with it, so they all leave, also when no other worker has a thread free
  # (the master holds them); evening out stops (nothing is kept alive).
  def test_draining_every_waiting_request_leaves_a_saturated_worker
    engine, balancer, master = worker_side(saturated_ms: 5, handoff_quota: 3, draining: true)
    engine.hold(connection(true), connection(false))
    balancer.balance(1.0, keepalive: false)
    assert_handed_over [[Cluster::Balancer::DRAIN_HANDOFF, true]], [true, false], engine, master,
                       "pending ones, whatever balance_keepalive says"
    engine.saturated_ms = 0
    balancer.balance(1.1)
    assert_equal 1, engine.detach_calls.size, "nothing while a thread is free"
  end

  def test_without_balance_keepalive_nothing_moves_outside_a_drain
    engine, balancer, master = worker_side(saturated_ms: 5, others_waiting: 2, handoff_quota: 3)
    engine.hold(connection(true))
    balancer.balance(1.0, keepalive: false)
    assert_empty engine.detach_calls
    refute master.connection_waiting?
  end

  def test_a_connection_the_master_cannot_take_is_served_here
    engine, balancer, master = worker_side(saturated_ms: 1, others_waiting: 1)
    fd, = engine.hold(connection(true)).first
    master.close
    balancer.balance(1.0)
    assert_equal [[fd, true]], engine.adopted
  end

  def test_connections_handed_to_the_worker_are_adopted
    engine, balancer, master = worker_side
    client, server = tcp_pair
    @closables << client << server
    assert master.send_connection_nonblock(server, false)
    balancer.balance(1.0)
    assert_equal [false], engine.adopted.map(&:last)
  end

  def test_a_failure_is_logged_not_raised
    _engine, balancer, = worker_side(saturated_ms: 1, others_waiting: 1, failure: true)
    balancer.balance(1.0)
    assert_match(/WARN: worker 3: keep-alive hand-over failed: closed engine/, @log_io.string)
  end

  def test_no_engine_no_balancing
    master, worker = Cluster::Channel.pair
    @closables.concat(master.ios + worker.ios)
    balancer = Cluster::Balancer.new(server: FakeServer.new(nil), channel: worker, log: @log, index: 0)
    balancer.balance(1.0)
    assert_empty @log_io.string
  end

  def test_a_stopped_worker_returns_what_it_was_handed
    _engine, balancer, master = worker_side
    client, server = tcp_pair
    @closables << client << server
    master.send_connection_nonblock(server, true)
    balancer.return_handed_over
    assert_equal [true], received_kinds(master)
  end

  # ---- the master's side ----

  def test_the_master_forwards_to_the_worker_with_fewest_connections
    roster, ends = workers(3)
    forwarder = Cluster::Balancer::Forwarder.new(roster: roster, board: FakeBoard.new([9, 5, 2]), log: @log)
    hand_over(ends[0], kept_alive: true)
    forwarder.forward(roster.to_a[0])
    assert_equal [[], [], [true]], ends.map { |e| received_kinds(e) }
  end

  def test_round_robin_among_equals
    roster, ends = workers(3)
    forwarder = Cluster::Balancer::Forwarder.new(roster: roster, board: FakeBoard.new([4, 4, 4]), log: @log)
    takers = Array.new(4) do
      hand_over(ends[0], kept_alive: false)
      forwarder.forward(roster.to_a[0])
      ends.index { |e| !received_kinds(e).empty? }
    end
    assert_equal [2, 1, 2, 1], takers, "never back to the sender while another serves; turns among equals\n#{@log_io.string}"
  end

  def test_back_to_the_sender_when_no_other_serves
    roster, ends = workers(2)
    roster.to_a[1].stopping!(1.0)
    forwarder = Cluster::Balancer::Forwarder.new(roster: roster, board: FakeBoard.new([1, 1]), log: @log)
    hand_over(ends[0], kept_alive: true)
    forwarder.forward(roster.to_a[0])
    assert_equal [[true], []], ends.map { |e| received_kinds(e) }
  end

  def test_a_worker_that_cannot_take_it_is_skipped
    roster, ends = workers(3)
    forwarder = Cluster::Balancer::Forwarder.new(roster: roster, board: FakeBoard.new([0, 0, 9]), log: @log)
    ends[1].close # gone: the next one takes it
    hand_over(ends[0], kept_alive: true)
    forwarder.forward(roster.to_a[0])
    assert_equal [true], received_kinds(ends[2])
  end

  # A hot restart: every worker is stopping, and a connection one of them
  # handed over just before (its request may wait in the kernel) must not be
  # closed: it waits in the master until a worker serves again.
  def test_with_no_taker_it_is_held_until_a_worker_serves
    roster, ends = workers(2)
    roster.each { |w| w.stopping!(1.0) }
    forwarder = Cluster::Balancer::Forwarder.new(roster: roster, board: FakeBoard.new([0, 0, 0]), log: @log)
    hand_over(ends[0], kept_alive: false)
    forwarder.forward(roster.to_a[0])
    forwarder.place_held
    assert_equal [[], []], ends.map { |e| received_kinds(e) }, "nobody serves: nobody gets it"
    assert_equal 1, forwarder.held
    fresh = add_worker(roster, 2)
    forwarder.place_held
    assert_equal [false], received_kinds(fresh), "the first worker that serves gets it, new as it was"
    assert_equal 0, forwarder.held
    refute_match(/closed/, @log_io.string)
  end

  def test_what_cannot_be_held_any_more_is_closed_with_a_warning
    roster, ends = workers(1)
    roster.to_a[0].stopping!(1.0)
    forwarder = Cluster::Balancer::Forwarder.new(roster: roster, board: FakeBoard.new([0]), log: @log, max_held: 1)
    2.times do
      hand_over(ends[0], kept_alive: true)
      forwarder.forward(roster.to_a[0])
    end
    assert_equal 1, forwarder.held
    assert_match(/WARN: master: no worker took a handed-over connection and 1 wait already: closed/, @log_io.string)
  end

  # While the cluster drains a connection goes only to a worker with a thread
  # waiting (it starts the request at once), however few connections the
  # others hold; with none it waits in the master until one has.
  def test_draining_it_goes_only_where_a_thread_waits
    roster, ends = workers(3)
    board = FakeBoard.new([9, 0, 0], [1, 0, 0], true)
    forwarder = Cluster::Balancer::Forwarder.new(roster: roster, board: board, log: @log)
    hand_over(ends[1], kept_alive: false)
    forwarder.forward(roster.to_a[1])
    assert_equal [[false], [], []], ends.map { |e| received_kinds(e) }
    board.waiting = [0, 0, 0]
    hand_over(ends[0], kept_alive: true)
    forwarder.forward(roster.to_a[0])
    forwarder.place_held
    assert_equal [[], [], []], ends.map { |e| received_kinds(e) }, "no thread waits: held"
    assert_equal 1, forwarder.held
    board.waiting = [0, 0, 2]
    forwarder.place_held
    assert_equal [[], [], [true]], ends.map { |e| received_kinds(e) }
    assert_equal 0, forwarder.held
  end

  def test_a_worker_about_to_be_forgotten_is_drained
    roster, ends = workers(2)
    forwarder = Cluster::Balancer::Forwarder.new(roster: roster, board: FakeBoard.new([0, 0]), log: @log)
    hand_over(ends[0], kept_alive: true)
    hand_over(ends[0], kept_alive: false)
    forwarder.drain(roster.to_a[0])
    assert_equal [true, false], received_kinds(ends[1])
  end

  # Across a hot restart's exec the held connections go to the new master.
  def test_held_connections_pass_to_the_next_master
    roster, ends = workers(1)
    roster.to_a[0].stopping!(1.0)
    old = Cluster::Balancer::Forwarder.new(roster: roster, board: FakeBoard.new([0, 0]), log: @log)
    hand_over(ends[0], kept_alive: true)
    old.forward(roster.to_a[0])
    env, fds = old.exec_handover
    assert_equal [Cluster::Balancer::Forwarder::INHERIT_ENV], env.keys
    assert_equal fds.keys, fds.values, "each descriptor keeps its number across exec"
    # The new master (here: in the same process, with a duplicate of the descriptor).
    fd = Integer(env.values.first[/\A(\d+):k\z/, 1], 10)
    copy = IO.for_fd(fd, autoclose: false).dup
    copy.autoclose = false # the successor takes the descriptor over by number and closes it
    inherited = { Cluster::Balancer::Forwarder::INHERIT_ENV => "#{copy.fileno}:k" }
    roster2, = workers(0)
    successor = Cluster::Balancer::Forwarder.new(roster: roster2, board: FakeBoard.new([0]), log: @log, env: inherited)
    assert_empty inherited, "the variable is consumed"
    assert_equal 1, successor.held
    fresh = add_worker(roster2, 0)
    successor.place_held
    assert_equal [true], received_kinds(fresh)
  end

  def test_a_datagram_without_its_descriptor_is_logged
    roster, ends = workers(2)
    forwarder = Cluster::Balancer::Forwarder.new(roster: roster, board: FakeBoard.new([0, 0]), log: @log)
    ends[0].handoff.send("k", 0)
    forwarder.forward(roster.to_a[0])
    assert_match(/WARN: master: keep-alive hand-over failed: a hand-over datagram without its descriptor/,
                 @log_io.string)
  end

  private

  # A worker's balancer on a scripted engine (+answers+: what it says, e.g.
  # saturated_ms: 1): [engine, balancer, the master's side of its channel].
  def worker_side(**answers)
    master, worker = Cluster::Channel.pair
    @closables.concat(master.ios + worker.ios)
    engine = FakeEngine.new
    answers.each { |name, value| engine.public_send(:"#{name}=", value) }
    @engines << engine
    balancer = Cluster::Balancer.new(server: FakeServer.new(engine), channel: worker, log: @log, index: 3)
    [engine, balancer, master]
  end

  # +count+ booted workers in a roster: [roster, each worker's side of its channel].
  def workers(count)
    roster = Cluster::Roster.new
    [roster, Array.new(count) { |index| add_worker(roster, index) }]
  end

  # One more booted worker in +roster+: the worker's side of its channel.
  def add_worker(roster, index)
    master, worker = Cluster::Channel.pair
    @closables.concat(master.ios + worker.ios)
    roster.add(Cluster::WorkerRecord.new(index: index, pid: 100 + index, channel: master, now: 0.0)).booted!
    worker
  end

  # A connected pair of TCP sockets: what the engine hands over is a client's
  # TCP connection. (Not UNIXSocket.pair: a unix socket sent over a unix socket
  # is in flight for the kernel's unix garbage collector, which now and then
  # dropped one, and never does so to a TCP socket.)
  def tcp_pair
    @listener ||= TCPServer.new("127.0.0.1", 0).tap { |l| @closables << l }
    client = TCPSocket.new("127.0.0.1", @listener.local_address.ip_port)
    [client, @listener.accept]
  end

  # An idle connection the engine owns: [fd, kept_alive].
  def connection(kept_alive)
    client, server = tcp_pair
    @closables << client
    server.autoclose = false
    [server.fileno, kept_alive]
  end

  # A worker hands a connection to the master.
  def hand_over(side, kept_alive:)
    client, server = tcp_pair
    @closables << client << server
    assert side.send_connection_nonblock(server, kept_alive)
  end

  # The engine was asked to detach +calls+ ([max, pending_only] each), and the
  # master received connections of +kinds+ (kept alive or not).
  def assert_handed_over(calls, kinds, engine, master, message = nil)
    assert_equal calls, engine.detach_calls, message
    assert_equal kinds, received_kinds(master), @log_io.string
  end

  # The kinds of the connections waiting on +side+ (received and closed).
  def received_kinds(side)
    kinds = []
    while side.connection_waiting?
      io, kept_alive = side.recv_connection
      io.close
      kinds << kept_alive
    end
    kinds
  end
end
