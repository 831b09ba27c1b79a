# frozen_string_literal: true

require "test_helper"
require "margay/cli"
require "margay/native"

# Fiber mode's settings (issue 13): the flag, the config file's directives (Margay's and
# Puma's names), their checks, and the refusal on the poll backend.
class FiberSettingsTest < Minitest::Test
  skip_on_jruby "no fiber mode: it needs the C engine's epoll"
  include Margay::TestHelper

  def cli_config(*argv)
    Margay::CLI.new(["--no-config", *argv], out: StringIO.new, err: StringIO.new).configuration
  end

  def test_off_by_default
    c = Margay::Configuration.new
    assert_equal [false, 1024, 0], [c.fiber_scheduler, c.max_in_flight, c.max_io_threads]
  end

  def test_the_fibers_flag_and_max_in_flight
    c = cli_config("--fibers", "--max-in-flight", "64")
    assert_equal [true, 64], [c.fiber_scheduler, c.max_in_flight]
  end

  def test_the_config_file_directives
    with_config_file("fiber_scheduler\nmax_in_flight 200\nmax_io_threads 4\n") do |path|
      c = Margay::CLI.new(["-C", path], out: StringIO.new, err: StringIO.new).configuration
      assert_equal [true, 200, 4], [c.fiber_scheduler, c.max_in_flight, c.max_io_threads]
    end
    with_config_file("fiber_scheduler false\n") do |path|
      refute Margay::CLI.new(["-C", path], out: StringIO.new, err: StringIO.new).configuration.fiber_scheduler
    end
  end

  def test_bad_values_are_refused
    assert_raises(Margay::ConfigError) { Margay::Configuration.new(max_in_flight: 0) }
    assert_raises(Margay::ConfigError) { Margay::Configuration.new(max_io_threads: -1) }
    assert_raises(Margay::ConfigError) { Margay::Configuration.new(fiber_scheduler: "yes") }
  end

  def test_the_poll_backend_refuses_fiber_mode_in_one_line
    error = assert_raises(Margay::ConfigError) { Margay::Configuration.new(fiber_scheduler: true, event_backend: :poll) }
    assert_equal "fiber mode needs the epoll event backend: drop fiber_scheduler or use event_backend :epoll/:auto",
                 error.message
    refute_includes error.message, "\n"
  end

  def test_a_native_wait_set_refuses_a_poll_engine
    config = Margay::Configuration.new(event_backend: :poll)
    engine = Margay::Native::Engine.new(config.to_h.values_at(*Margay::Native::Engine::SETTINGS), {})
    error = assert_raises(NotImplementedError) { Margay::Native::FiberWaits.new(engine, Margay::Native::InFlight.new(1)) }
    assert_match(/needs the epoll event backend \(this engine uses poll\)/, error.message)
  ensure
    engine&.close
  end

  def test_fiber_per_request_still_warns_with_a_pointer_to_fiber_mode
    with_config_file("fiber_per_request\n") do |path|
      c = nil
      _, err = capture_io { c = Margay::CLI.new(["-C", path], out: StringIO.new, err: StringIO.new).configuration }
      refute c.fiber_scheduler
      assert_match(/'fiber_per_request'.*fiber_scheduler true/, err)
    end
  end
end
