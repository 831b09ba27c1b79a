# frozen_string_literal: true

require "test_helper"
require "margay/cluster/roster"
require "margay/cluster/channel"

# The master's set of workers (Margay::Cluster::Roster) and its questions:
# which serve, which is the mold, which index a new worker gets.
class RosterTest < Minitest::Test
  skip_on_jruby "no cluster: JRuby has no fork"
  Cluster = Margay::Cluster

  def setup
    @roster = Cluster::Roster.new
    @channels = []
  end

  def teardown
    @channels.each(&:close)
  end

  def add(index, pid)
    master, worker = Cluster::Channel.pair
    @channels << master << worker
    @roster.add(Cluster::WorkerRecord.new(index: index, pid: pid, channel: master, now: 0.0))
  end

  def test_records_by_pid_in_the_order_added
    a = add(0, 10)
    b = add(1, 11)
    assert_equal 2, @roster.size
    assert_same b, @roster[11]
    assert_equal [a, b], @roster.to_a
    assert_same a, @roster.delete(a)
    assert_nil @roster.delete(a), "gone already"
    assert_nil @roster[10]
    @roster.delete(b)
    assert_empty @roster
  end

  def test_restarts_count_the_workers_started_in_a_slot_after_its_first
    assert_equal({}, @roster.restarts)
    first = add(0, 10)
    add(1, 11)
    @roster.delete(first)
    add(0, 12) # its replacement
    @roster.delete(@roster[12])
    add(0, 13)
    assert_equal({ 0 => 2, 1 => 0 }, @roster.restarts)
  end

  def test_serving_excludes_the_mold_and_the_stopping
    a = add(0, 10)
    b = add(1, 11)
    c = add(2, 12)
    b.mold_pending!
    c.stopping!(1.0)
    assert_equal [a], @roster.serving
    assert_same b, @roster.mold
    b.stopping!(2.0)
    assert_nil @roster.mold, "a mold told to stop is no mold to ask"
  end

  def test_free_index_fills_the_lowest_gap_and_keeps_the_molds_slot
    add(0, 10)
    mold = add(1, 11)
    add(2, 12)
    assert_equal 3, @roster.free_index(3)
    mold.mold_pending!
    assert_equal 3, @roster.free_index(3), "the mold keeps its slot: it serves again as that worker"
    stopping = @roster[10]
    stopping.stopping!(1.0)
    assert_equal 3, @roster.free_index(3), "a stopping worker keeps its slot until it is gone"
    @roster.delete(stopping)
    assert_equal 0, @roster.free_index(3)
  end

  def test_by_beat_finds_the_worker_of_a_pipe
    a = add(0, 10)
    b = add(1, 11)
    assert_same b, @roster.by_beat(b.channel.beat)
    assert_same a, @roster.by_beat(a.channel.beat)
    assert_nil @roster.by_beat($stdin)
  end

  def test_close_channels
    a = add(0, 10)
    @roster.close_channels
    assert a.channel.ios.all?(&:closed?)
  end

  def test_cull_picks_the_youngest_or_the_oldest_serving_worker
    add(0, 100)
    add(1, 101)
    add(2, 102)
    @roster[102].stopping!(1.0)
    assert_equal [101, 100], [@roster.cull(:youngest).pid, @roster.cull(:oldest).pid]
  end
end
