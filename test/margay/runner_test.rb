# frozen_string_literal: true

require "test_helper"
require "margay/runner"

# What single and cluster mode share: the process title, the grace period
# after a stop, and the health listener's bind.
class RunnerTest < Minitest::Test
  Runner = Margay::Runner

  # The smallest process that mixes Runner in.
  class Example
    include Runner
  end

  def config(**settings)
    Margay::Configuration.new(**settings)
  end

  def test_title_like_pumas_with_the_tag_or_the_directory_name
    assert_equal "margay #{Margay::VERSION} (tcp://0.0.0.0:3000,unix:///s) [shop]",
                 Runner.title(config(tag: "shop"), ["tcp://0.0.0.0:3000", "unix:///s"])
    assert_equal "margay #{Margay::VERSION} (tcp://x:1) [#{File.basename(Dir.pwd)}]", Runner.title(config, ["tcp://x:1"])
    assert_equal "margay #{Margay::VERSION} (tcp://x:1)", Runner.title(config(tag: ""), ["tcp://x:1"])
  end

  def test_grace_period_is_force_shutdown_after_or_shutdown_timeout
    log = Margay::Log.new
    assert_equal 30, Example.new(config, log: log).grace_period
    assert_equal 5, Example.new(config(force_shutdown_after: 5), log: log).grace_period
    assert_equal 0, Example.new(config(force_shutdown_after: 0), log: log).grace_period
    assert_equal Float::INFINITY, Example.new(config(force_shutdown_after: -1), log: log).grace_period
  end

  # health_bind beyond loopback is said once at bind; on loopback (or a unix socket) nothing.
  def test_a_health_listener_beyond_loopback_is_warned_about
    [["tcp://0.0.0.0:0", 1], ["tcp://127.0.0.1:0", 0]].each do |url, warnings|
      out = StringIO.new
      runner = Example.new(config(binds: ["tcp://127.0.0.1:0"], health_bind: url), log: Margay::Log.new(out: out, err: out))
      runner.bind
      assert_equal 1, runner.health_listeners.size
      assert_equal warnings, out.string.scan(/health_bind .* is not a loopback address/).size, out.string
    ensure
      (runner.listeners + runner.health_listeners).each { |l| l.io.close } if runner&.listeners
    end
  end
end
