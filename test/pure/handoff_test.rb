# frozen_string_literal: true

require "test_helper"
require "margay/pure"

module Margay
  # What the pure engine's threads share (lib/margay/pure/handoff.rb): the ready list's order,
  # waits, timeout and close, the held requests and the counters. MRI runs the Mutex
  # implementation, JRuby the java.util.concurrent one (Handoff.ready picks by engine).
  class PureHandoffTest < Minitest::Test
    Conn = Struct.new(:name, :arrival, :queued)

    def test_oldest_first_and_queued_when_no_thread_waits
      ready = Pure::Handoff.ready
      a = Conn.new("a", 1.0)
      b = Conn.new("b", 2.0)
      ready.push(a)
      ready.push(b)
      assert a.queued, "no thread waited: a waits"
      assert_equal 2, ready.size
      assert_equal [1.0, 2.0], ready.arrivals.sort
      assert_same a, ready.take(nil)
      assert_same b, ready.take(nil)
      assert ready.empty?
    end

    def test_a_waiting_thread_gets_a_push_and_it_is_not_queued
      ready = Pure::Handoff.ready
      taker = Thread.new { ready.take(Pure::Handoff.now + 10) }
      Thread.pass until ready.waiting == 1
      conn = Conn.new("c")
      ready.push(conn)
      assert_same conn, taker.value
      refute conn.queued, "a thread waited for it"
      assert_equal 0, ready.waiting
      refute_nil ready.saturated_since, "no thread waits: saturated since then"
    end

    def test_take_times_out
      ready = Pure::Handoff.ready
      assert_equal :timeout, ready.take(Pure::Handoff.now + 0.05)
    end

    def test_push_behind_only_behind_others
      ready = Pure::Handoff.ready
      refute ready.push_behind(Conn.new("p")), "nothing waits: the thread keeps it"
      ready.push(Conn.new("x"))
      assert ready.push_behind(Conn.new("p"))
      assert_equal %w[x p], [ready.take(nil).name, ready.take(nil).name]
    end

    def test_close_answers_nil_after_what_waits_to_every_thread
      ready = Pure::Handoff.ready
      takers = Array.new(3) { Thread.new { ready.take(nil) } }
      Thread.pass until ready.waiting == 3
      ready.close
      assert_equal [nil, nil, nil], takers.map { |t| t.join(10)&.value }

      ready = Pure::Handoff.ready
      ready.push(Conn.new("left"))
      ready.close
      assert_equal "left", ready.take(nil).name
      assert_nil ready.take(nil)
      assert_nil ready.take(nil)
    end

    def test_drain_takes_what_waits
      ready = Pure::Handoff.ready
      ready.push(Conn.new("a"))
      ready.close
      assert_equal ["a"], ready.drain.map(&:name)
      assert ready.empty?
    end

    def test_held_and_counter
      held = Pure::Handoff.held
      conn = Conn.new("h")
      held.put(7, conn)
      assert_same conn, held.get(7)
      assert_equal 1, held.size
      assert_equal [conn], held.conns
      assert_same conn, held.take(7)
      assert_nil held.take(7), "a stale token finds nothing"

      counter = Pure::Handoff.counter
      threads = Array.new(4) { Thread.new { 1000.times { counter.incrementAndGet } } }
      threads.each(&:join)
      assert_equal 4000, counter.get
    end

    # The stats' histogram form, as the C engine's: a value on a bound counts in that bound's
    # bucket (Prometheus's le), the buckets are cumulative, the sum in seconds.
    def test_histogram
      hist = Pure::Handoff.histogram
      [0.005, 0.006, 0.3, 11.0, -1.0].each { |seconds| hist.observe(seconds) }
      threads = Array.new(4) { Thread.new { 250.times { hist.observe(0.001) } } }
      threads.each(&:join)
      h = hist.to_h
      assert_equal Stats::HISTOGRAM_BOUNDS, h[:buckets].keys
      assert_equal 1002, h[:buckets][0.005], "0.005, a negative one as 0, and the 1000 from four threads"
      assert_equal 1003, h[:buckets][0.01]
      assert_equal 1003, h[:buckets][0.25]
      assert_equal 1004, h[:buckets][0.5]
      assert_equal 1004, h[:buckets][10.0]
      assert_equal 1005, h[:buckets][Float::INFINITY]
      assert_equal 1005, h[:count]
      assert_in_delta 12.311, h[:sum], 1e-6
    end
  end
end
