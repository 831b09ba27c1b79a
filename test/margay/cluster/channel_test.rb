# frozen_string_literal: true

require "test_helper"
require "margay/cluster/channel"

# The master<->worker protocol (Margay::Cluster::Channel): every message
# arrives as it was sent, over the real pipe and sockets.
class ChannelTest < Minitest::Test
  skip_on_jruby "no cluster: JRuby has no fork"
  Channel = Margay::Cluster::Channel

  def setup
    @master, @worker = Channel.pair
  end

  def teardown
    [@master, @worker].each(&:close)
  end

  def test_each_report_arrives_by_name
    Channel::REPORTS.each_key do |report|
      @worker.report(report)
      assert_equal [report], @master.read_reports
    end
  end

  def test_reports_read_together_and_the_end_of_the_pipe
    assert_equal false, @master.read_reports, "nothing sent yet"
    @worker.report(:alive)
    @worker.report(:refork_due)
    @worker.report!(:mold_ready)
    assert_equal %i[alive refork_due mold_ready], @master.read_reports
    @worker.close
    assert_nil @master.read_reports, "EOF: the worker is gone"
  end

  def test_a_report_to_a_master_that_is_gone_raises_epipe
    @master.close
    assert_raises(Errno::EPIPE) { @worker.report(:alive) }
  end

  def test_become_the_mold_and_drain
    assert_empty @worker.asked
    @master.ask_to_become_mold
    assert_equal [:mold], @worker.asked
    assert_empty @worker.asked, "asked once"
    @master.ask_to_drain
    @master.ask_to_become_mold
    assert_equal %i[mold drain], @worker.asked
  end

  def test_fork_orders
    refute @worker.order_waiting?(0)
    @master.order_fork(7)
    assert @worker.order_waiting?(1)
    assert_equal 7, @worker.next_order
    @master.ctl.write("something else\n")
    assert_nil @worker.next_order, "a line that is no fork order"
    @master.close
    assert_raises(EOFError) { @worker.next_order }
  end

  # The mold's answer carries the new worker's pid and the master's ends of
  # its links: the master then talks to the new worker through them.
  def test_the_molds_answer_round_trips
    new_master, new_worker = Channel.pair
    @worker.answer_order(4711, new_master)
    new_master.close # the mold's copies
    pid, received = @master.receive_answer
    assert_equal 4711, pid
    assert_kind_of UNIXSocket, received.ctl
    new_worker.report(:booted)
    assert_equal [:booted], received.read_reports
    received.order_fork(3)
    assert_equal 3, new_worker.next_order
    send_and_receive(new_worker, received, true)
  ensure
    [new_master, new_worker, received].each { |side| side&.close }
  end

  def test_an_answer_without_its_descriptors_names_the_worker_to_kill
    r, w = IO.pipe
    @worker.ctl.sendmsg("4711\n", 0, nil, Socket::AncillaryData.unix_rights(r))
    error = assert_raises(Margay::MoldAnswerError) { @master.receive_answer }
    assert_equal 4711, error.pid
    assert_equal "the mold sent 1 descriptors", error.message
  ensure
    [r, w].each { |io| io&.close }
  end

  def test_no_answer_from_a_mold_that_is_gone
    @worker.close
    error = assert_raises(Margay::MoldAnswerError) { @master.receive_answer }
    assert_nil error.pid
  end

  def test_a_connection_arrives_with_its_kind
    [true, false].each { |kept_alive| send_and_receive(@worker, @master, kept_alive) }
  end

  def test_connections_over_a_plain_datagram_pair
    a, b = UNIXSocket.pair(:DGRAM)
    from = Channel.new(nil, nil, a)
    to = Channel.new(nil, nil, b)
    refute to.connection_waiting?
    send_and_receive(from, to, false)
    send_and_receive(to, from, true)
  ensure
    [a, b].each { |s| s&.close }
  end

  # A worker looks every tick (5 ms): a look that allocated left garbage in the
  # heap it shares with its template until the next GC, copying its pages.
  def test_looking_for_orders_and_connections_allocates_nothing
    2.times do # the buffers sized once, GC.stat's first call made
      @worker.asked
      @worker.connection_waiting?
      GC.stat(:total_allocated_objects)
    end
    before = GC.stat(:total_allocated_objects)
    200.times do
      @worker.asked
      @worker.connection_waiting?
    end
    # (at most one: the measurement's own; recvmsg and a fresh read buffer made about 800)
    assert_operator GC.stat(:total_allocated_objects) - before, :<=, 1, "objects allocated by 200 empty looks"
    @master.ask_to_become_mold
    assert_equal [:mold], @worker.asked, "an order is still seen"
    send_and_receive(@master, @worker, true)
    refute @worker.connection_waiting?
  end

  # The master receives a connection per hand-over under load (a worker one per
  # hand-over back): recvmsg's default 4 KiB control buffer was malloc'd each
  # time, garbage among the pages the process shares with the others.
  def test_receiving_a_connection_mallocs_less_than_a_default_control_buffer
    client, server = tcp_pair
    received = []
    GC.disable # a GC resets the count
    measured = 50.times.sum do
      assert @worker.send_connection_nonblock(server, true)
      before = GC.stat(:malloc_increase_bytes)
      received << @master.recv_connection.first
      GC.stat(:malloc_increase_bytes) - before
    end
    GC.enable
    # (about 2.4 KB each: the IO, the data, the control buffer; 6.4 KB with the default 4 KiB one)
    assert_operator measured / 50, :<, 4096, "malloc'd bytes per connection received"
    received.last.write("x")
    assert_equal "x", client.read(1), "a connection received this way still works"
  ensure
    GC.enable
    [client, server, *received].each { |s| s&.close }
  end

  def test_a_datagram_without_a_descriptor_raises
    @worker.handoff.send("k", 0)
    assert @master.connection_waiting?
    assert_raises(SocketError) { @master.recv_connection }
  end

  def test_sending_to_a_peer_that_is_gone_fails_without_raising
    client, server = UNIXSocket.pair
    @master.close
    refute @worker.send_connection_nonblock(server, true)
  ensure
    [client, server].each { |s| s&.close }
  end

  def test_pair_closes_what_it_made_when_descriptors_run_out
    skip "needs /proc/self/fd" unless File.directory?("/proc/self/fd")
    limit = Process.getrlimit(Process::RLIMIT_NOFILE)
    GC.start # Ruby collects garbage when descriptors run out: let it close stray IOs now, not during the test
    before = open_fds
    free = (0..).lazy.reject { |fd| before.include?(fd) }.first(5)
    Process.setrlimit(Process::RLIMIT_NOFILE, free[4], limit[1]) # the pipe and one socket pair fit, not the third
    assert_raises(Errno::EMFILE) { Channel.pair }
    Process.setrlimit(Process::RLIMIT_NOFILE, *limit)
    assert_empty open_fds - before, "the pipe and the socket pair made before the failure are closed"
  ensure
    Process.setrlimit(Process::RLIMIT_NOFILE, *limit) if limit
  end

  STATUS = { backlog: 0, running: 3, pool_capacity: 2, busy_threads: 3, io_threads: 0, backlog_max: 0, max_threads: 5,
             requests_count: 12_345, reactor_max: 17, rss_kib: 81_000, pss_kib: 40_500, boot_rss_kib: 70_000,
             boot_pss_kib: 30_000, errors: 2, abandoned: 1, busy_ms: 123_456, shed: 7, oldest_wait_ms: 40 }
           .merge(Margay::Stats::HISTOGRAM_KEYS.each_with_index.to_h { |k, i| [k, i * 1_000_003] }).freeze

  def test_a_report_carries_the_workers_status_to_the_master
    assert_nil @master.last_status, "no status before the first report"
    assert_nil @master.last_checkin
    @worker.report(:booted, STATUS)
    assert_equal [:booted], @master.read_reports
    assert_equal STATUS, @master.last_status
    assert_kind_of Time, @master.last_checkin
  end

  def test_the_last_of_several_statuses_wins_and_reports_are_not_taken_from_its_digits
    @worker.report(:alive, STATUS)
    @worker.report(:alive, STATUS.merge(requests_count: 12_346))
    @worker.report(:refork_due)
    assert_equal %i[alive refork_due], @master.read_reports
    assert_equal 12_346, @master.last_status[:requests_count]
  end

  def test_a_status_split_across_reads_is_completed_by_the_next_read
    @worker.beat.write(".S0,1,4,1,0,0,5,")
    assert_equal [:alive], @master.read_reports
    assert_nil @master.last_status, "half a frame is kept, not parsed"
    @worker.beat.write("99,2,81000,40500,70000,30000,4,5,6,7\n")
    assert_equal [], @master.read_reports
    assert_equal 99, @master.last_status[:requests_count]
    assert_equal 1, @master.last_status[:running]
    assert_equal 40_500, @master.last_status[:pss_kib], "the worker's memory follows its counters"
    assert_equal [4, 5, 6, 7], @master.last_status.values_at(:errors, :abandoned, :busy_ms, :shed), "then Margay's own counters"
  end

  def test_a_status_carries_the_histograms_within_one_pipe_write
    histogram = { buckets: Margay::Stats::HISTOGRAM_BOUNDS.each_with_index.to_h { |le, i| [le, 10**12 + i] },
                  sum: 123_456.789012, count: 10**12 + 14 }
    server_stats = { queue_time_seconds: histogram, request_duration_seconds: histogram }
    status = STATUS.merge(Margay::Stats.histogram_integers(server_stats))
    @worker.report(:alive, status)
    frame = Margay::Stats::HISTOGRAM_KEYS.map { |k| status[k] }.join(",")
    assert_operator frame.bytesize * 2, :<, Margay::Cluster::Channel::MAX_FRAME, "the largest figures fit a frame"
    @master.read_reports
    assert_equal({ queue_time_seconds: histogram, request_duration_seconds: histogram },
                 Margay::Stats.histograms_from(@master.last_status), "the master rebuilds them")
  end

  def test_a_status_is_integers_only
    assert_raises(ArgumentError, TypeError) { @worker.report(:alive, STATUS.merge(backlog: "1,2\nM")) }
    assert_equal false, @master.read_reports, "nothing was sent"
  end
  private

  def tcp_pair
    listener = TCPServer.new("127.0.0.1", 0)
    client = TCPSocket.new("127.0.0.1", listener.local_address.ip_port)
    [client, listener.accept]
  ensure
    listener&.close
  end

  # A connection sent from one side arrives at the other: same socket, same kind.
  def send_and_receive(from, to, kept_alive)
    client, server = tcp_pair # a client's TCP connection, as the engine hands over (a unix socket in flight
    # is the kernel's unix garbage collector's to drop now and then)
    assert from.send_connection_nonblock(server, kept_alive)
    server.close # the sender's copy
    assert to.connection_waiting?
    io, kind = to.recv_connection
    assert_equal kept_alive, kind
    client.write("x")
    assert_equal "x", io.read(1)
  ensure
    [client, server, io].each { |s| s&.close }
  end

  def open_fds
    Dir.open("/proc/self/fd") { |dir| dir.children.map(&:to_i) - [dir.fileno] }.sort
  end
end
