# frozen_string_literal: true

require "test_helper"
require "margay/fibers/fiber_timers"

# The timer heap of a fiber-mode thread (Margay::Server::FiberTimers), on a clock the test sets:
# due order (ties in the order added), the next wait's bound, cancelling, and the rebuild that
# keeps cancelled entries from piling up.
class FiberTimersTest < Minitest::Test
  Timers = Margay::Server::FiberTimers

  def setup
    @clock = Margay::TestHelper::ManualClock.new
    @timers = Timers.new(clock: @clock)
  end

  def at(now, &block)
    @clock.at(now, &block)
  end

  def fired(now)
    [].tap { |out| @timers.fire(now) { |target, value| out << [target, value] } }
  end

  def test_due_timers_fire_in_time_order_then_in_the_order_added
    at(10.0) do
      @timers.add(3, :c, 3)
      @timers.add(1, :a, 1)
      @timers.add(3, :d) # a tie with :c, added after it
      @timers.add(2, :b, 2)
    end
    assert_empty fired(10.9)
    assert_equal [[:a, 1]], fired(11.0)
    assert_equal [[:b, 2], [:c, 3], [:d, nil]], fired(13.0)
    assert_equal 0, @timers.size
    assert_empty fired(100.0)
  end

  def test_many_timers_come_out_sorted
    random = Random.new(13)
    durations = Array.new(500) { random.rand(0..50) / 10.0 }
    at(0.0) { durations.each_with_index { |d, i| @timers.add(d, i) } }
    expected = durations.each_with_index.sort_by { |d, i| [d, i] }.map(&:last)
    assert_equal expected, fired(10.0).map(&:first)
  end

  def test_next_timeout_ms_bounds_the_wait
    assert_nil @timers.next_timeout_ms(0.0), "no timer: wait until something happens"
    at(1.0) do
      @timers.add(0.5, :later)
      @timers.add(0.0101, :soon)
    end
    assert_equal 11, @timers.next_timeout_ms(1.0), "rounded up: never woken before it is due"
    assert_equal 0, @timers.next_timeout_ms(1.02), "due"
    assert_equal 0, @timers.next_timeout_ms(5.0), "overdue"
  end

  def test_a_cancelled_timer_never_fires_nor_bounds_the_wait
    first, second = at(0.0) { [@timers.add(1, :first), @timers.add(2, :second)] }
    @timers.cancel(first)
    @timers.cancel(first) # twice: nothing more
    assert_equal 2000, @timers.next_timeout_ms(0.0), "the cancelled first one is skipped"
    assert_equal 1, @timers.size, "and dropped from the heap on the way"
    assert_equal [[:second, nil]], fired(3.0)
    @timers.cancel(second) # after it fired: nothing
    assert_equal 0, @timers.size
  end

  def test_what_the_fire_block_adds_or_cancels_counts_at_once
    later = nil
    at(0.0) do
      @timers.add(1, :first)
      later = @timers.add(2, :cancelled_by_first)
      @timers.add(3, :last)
    end
    seen = []
    at(1.0) do
      @timers.fire(5.0) do |target, _|
        seen << target
        next unless target == :first

        @timers.cancel(later)
        @timers.add(0, :added_by_first) # due at 1.0
      end
    end
    assert_equal %i[first added_by_first last], seen
  end

  def test_cancelled_entries_do_not_pile_up
    entries = at(0.0) { Array.new(200) { |i| @timers.add(60 + i, i) } }
    entries.first(150).each { |e| @timers.cancel(e) }
    assert_operator @timers.size, :<=, 100, "rebuilt once cancelled entries were most of the heap"
    assert_equal (150...200).to_a, fired(1000.0).map(&:first)
  end
end
