# frozen_string_literal: true

require "test_helper"
require "margay/clock"
require "minitest/mock"

# The clocks: monotonic time never goes back, CPU time grows with work, and a
# thread's run-queue wait is read from the kernel where it says (0 for a thread
# gone, nil when a file cannot be read).
class ClockTest < Minitest::Test
  Clock = Margay::Clock

  def test_now_never_goes_back_and_cpu_grows_with_work
    before = [Clock.now, Clock.cpu]
    x = 0
    200_000.times { |i| x += i }
    assert_operator x, :positive?
    assert_operator Clock.now, :>=, before[0]
    assert_operator Clock.cpu, :>, before[1]
  end

  def test_run_delay_of_this_thread_a_gone_one_and_an_unreadable_one
    skip "no schedstat here" unless Clock::SCHEDSTAT

    assert_kind_of Float, Clock.run_delay([Thread.current.native_thread_id])
    assert_equal 0.0, Clock.run_delay([2**22 + 1]), "a thread id no task has counts 0"
    File.stub(:read, ->(*) { raise Errno::EMFILE }) do
      assert_nil Clock.run_delay([Thread.current.native_thread_id])
    end
  end
end
