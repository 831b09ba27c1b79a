# frozen_string_literal: true

require "test_helper"
require "minitest/mock"
require "margay/cluster"

# How the master makes a worker (Margay::Cluster::Spawner), in a real fork
# with the worker's own code stood in for: what the child keeps of the master.
class SpawnerTest < Minitest::Test
  skip_on_jruby "no cluster: JRuby has no fork"
  Cluster = Margay::Cluster

  # Stands in for Cluster::Worker: reports which of +fds+ are open in the
  # child on +report+, then exits.
  class Probe
    def initialize(report, fds)
      @report = report
      @fds = fds
    end

    def run
      @report.write(@fds.select { |fd| File.exist?("/proc/self/fd/#{fd}") }.join(","))
      @report.close
      exit!(0)
    end
  end

  # Connections the master holds for its workers (a hot restart handed them
  # over) are its alone: a copy in a worker would keep such a socket open
  # after the worker that adopted it closed it, and its client would never
  # see the connection end.
  def test_a_forked_worker_keeps_none_of_the_connections_the_master_holds
    skip "needs /proc" unless File.directory?("/proc/self/fd")
    held, client = UNIXSocket.pair
    held.autoclose = false # the Forwarder takes the descriptor over, as a re-executed master does
    roster = Cluster::Roster.new
    log = Margay::Log.new(out: StringIO.new, err: StringIO.new)
    forwarder = Cluster::Balancer::Forwarder.new(roster: roster, board: Margay::Native::IdleBoard.new(2), log: log,
                                                 env: { Cluster::Balancer::Forwarder::INHERIT_ENV => "#{held.fileno}:k" })
    assert_equal 1, forwarder.held
    signals = Cluster::Signals.new
    spawner = Cluster::Spawner.new(config: Margay::Configuration.new(workers: 1), log: log, listeners: [],
                                   roster: roster, signals: signals, board: Margay::Native::IdleBoard.new(2),
                                   app: ->(_env) { [200, {}, []] }, app_loader: nil, forwarder: forwarder)
    report_r, report_w = IO.pipe
    record = Cluster::Worker.stub(:new, ->(**) { Probe.new(report_w, [held.fileno]) }) { spawner.fork_child(0) }
    report_w.close
    assert_equal "", report_r.read, "the held connection's descriptor is closed in the worker"
    Process.wait(record.pid)
    assert_equal 1, forwarder.held, "the master still holds it"
  ensure
    [report_r, report_w, client].each { |io| io&.close unless io&.closed? }
    record&.channel&.close
    forwarder&.close_held
  end

  # Stands in for Cluster::Worker: writes "boot;" on +report+ as it starts, then exits.
  class Booting
    def initialize(report)
      @report = report
    end

    def run
      @report.write("boot;")
      @report.close
      exit!(0)
    end
  end

  # Puma's order, whatever the two processes' speed: the master's after_worker_fork (the block)
  # has run before the worker starts to boot (before_worker_boot is the first thing it runs).
  def test_the_worker_boots_only_after_the_masters_block_ran
    log = Margay::Log.new(out: StringIO.new, err: StringIO.new)
    roster = Cluster::Roster.new
    board = Margay::Native::IdleBoard.new(2)
    spawner = Cluster::Spawner.new(config: Margay::Configuration.new(workers: 1), log: log, listeners: [],
                                   roster: roster, signals: Cluster::Signals.new, board: board,
                                   app: ->(_env) { [200, {}, []] }, app_loader: nil,
                                   forwarder: Cluster::Balancer::Forwarder.new(roster: roster, board: board, log: log))
    report_r, report_w = IO.pipe
    record = Cluster::Worker.stub(:new, ->(**) { Booting.new(report_w) }) do
      spawner.fork_child(0) do
        sleep 0.2 # a slow after_worker_fork: the worker must still wait for it
        report_w.write("hook;")
      end
    end
    report_w.close
    assert_equal "hook;boot;", report_r.read
    Process.wait(record.pid)
  ensure
    [report_r, report_w].each { |io| io&.close unless io&.closed? }
    record&.channel&.close
  end

  def test_close_held_and_close_inherited_close_the_descriptors
    a, a_peer = UNIXSocket.pair
    b, b_peer = UNIXSocket.pair
    [a, b].each { |io| io.autoclose = false } # taken over by descriptor number below
    log = Margay::Log.new(out: StringIO.new, err: StringIO.new)
    env = { Cluster::Balancer::Forwarder::INHERIT_ENV => "#{a.fileno}:n" }
    forwarder = Cluster::Balancer::Forwarder.new(roster: Cluster::Roster.new, board: Margay::Native::IdleBoard.new(1),
                                                 log: log, env: env)
    forwarder.close_held
    assert_equal 0, forwarder.held
    assert_nil a_peer.wait_readable(1) && a_peer.read_nonblock(1, exception: false), "the client sees the end"
    Cluster::Balancer::Forwarder.close_inherited(env = { Cluster::Balancer::Forwarder::INHERIT_ENV => "#{b.fileno}:k" })
    assert_empty env
    assert_nil b_peer.wait_readable(1) && b_peer.read_nonblock(1, exception: false)
  ensure
    [a_peer, b_peer].each { |io| io&.close }
  end
end
