# frozen_string_literal: true

require "test_helper"
require "margay/launcher"

# Single mode in this process: a Launcher without workers runs a Single, which
# serves until stopped, puts the signal handlers it replaced back, runs
# after_stopped and removes its pidfile. (Its signals, a restart in place and
# a second INT are tested on the executable: test/slow/single/signals_test.rb.)
class SingleTest < Minitest::Test
  include Margay::TestHelper

  def config(**settings)
    Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], silent: true, min_threads: 1, max_threads: 1, **settings)
  end

  def test_serves_until_stopped_then_cleans_up
    Dir.mktmpdir do |dir|
      stopped = []
      cfg = config(pidfile: File.join(dir, "margay.pid"), hooks: { after_stopped: [-> { stopped << true }] })
      launcher = Margay::Launcher.new(cfg, log: Margay::Log.new(quiet: true), app: Rack::Lint.new(->(_env) { [200, {}, ["hi"]] }))
      previous = Signal.trap("TERM", "SYSTEM_DEFAULT")
      rack_env = ENV.fetch("RACK_ENV", nil)
      answer = nil
      status = launcher.run do |server|
        port = server.addresses.first[/\d+\z/].to_i
        Thread.new do
          answer = raw_get(port)
          launcher.stop
        end
      end
      assert_equal 0, status
      assert_match(/\r\n\r\nhi\z/, answer)
      assert_equal [true], stopped, "after_stopped ran once"
      refute File.exist?(cfg.pidfile), "the pidfile is removed"
      assert_equal "SYSTEM_DEFAULT", Signal.trap("TERM", previous), "the TERM handler it replaced is back"
    ensure
      ENV["RACK_ENV"] = rack_env
    end
  end

  def test_a_restart_is_refused_without_a_command_line_or_before_serving
    single = Margay::Single.new(nil, config, log: Margay::Log.new(quiet: true), restart_argv: nil)
    assert_equal [false, nil], [single.restart, single.stop]
    single = Margay::Single.new(nil, config, log: Margay::Log.new(quiet: true), restart_argv: ["margay"])
    assert_equal false, single.restart, "nothing serves yet"
  end
end
