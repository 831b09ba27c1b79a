# frozen_string_literal: true

require "test_helper"
require "margay/process/reexec"

# The command a hot restart executes (the exec itself runs in the slow
# tests' restarts, single and cluster).
class ReexecTest < Minitest::Test
  skip_on_jruby "no hot restart: it execs RbConfig.ruby, which the jruby-jars JRuby has no executable for"
  def config(**settings)
    Margay::Configuration.new(**settings)
  end

  def test_command_is_ruby_and_the_argv_or_restart_command_and_the_arguments
    argv = ["/usr/bin/margay", "-w", "2", "config.ru"]
    assert_equal [RbConfig.ruby, *argv], Margay::Reexec.command(config, argv)
    assert_equal ["bin/margay", "--preload", "-w", "2", "config.ru"],
                 Margay::Reexec.command(config(restart_command: "bin/margay --preload"), argv)
  end
end
