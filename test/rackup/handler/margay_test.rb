# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "rackup/handler/margay"

# How rackup's and Rails' options become a Configuration (no process needed;
# test/slow/rails_handler_test.rb runs the real thing).
class RackupHandlerTest < Minitest::Test
  include Margay::TestHelper

  Handler = Rackup::Handler::Margay

  def test_registered_as_margay
    assert_same Handler, Rackup::Handler.get(:margay)
  end

  def test_option_mapping
    c = Handler.configuration({ Host: "::1", Port: "8080", environment: "production", Threads: "2:6", Verbose: true,
                                quiet: true, header_timeout: "7", pid: "x.pid", config: "config.ru" },
                              config_file: "/nonexistent", env: {})
    assert_equal ["tcp://[::1]:8080"], c.binds
    assert_equal ["production", 2, 6, true, true, 7],
                 [c.environment, c.min_threads, c.max_threads, c.log_requests, c.quiet, c.header_timeout]
    assert_raises(Margay::ConfigError) { Handler.configuration({ Port: "http" }, config_file: "/nonexistent", env: {}) }
  end

  def test_rails_defaults_do_not_override_the_files_bind
    with_config_file("bind 'tcp://127.0.0.1:4567'\nthreads 3, 3\n") do |file|
      rails = { Host: "localhost", Port: 3000, environment: "development", user_supplied_options: [] }
      c = Handler.configuration(rails, config_file: file, env: {})
      assert_equal ["tcp://127.0.0.1:4567"], c.binds, "Rails' default Host/Port do not override the file's bind"
      assert_equal 3, c.max_threads
      c = Handler.configuration(rails.merge(user_supplied_options: [:Port]), config_file: file, env: {})
      assert_equal ["tcp://localhost:3000"], c.binds, "a port the user typed does"
      File.write(file, "threads 3, 3\n")
      assert_equal ["tcp://localhost:3000"], Handler.configuration(rails, config_file: file, env: {}).binds
    end
  end

  def test_without_host_and_port_the_default_bind
    assert_equal Margay::Configuration::DEFAULTS[:binds], Handler.configuration({}, config_file: "/nonexistent", env: {}).binds
  end

  # docs/CONFIGURATION.md: WEB_CONCURRENCY sets workers unless the file or a flag does, under rackup as with the CLI.
  def test_web_concurrency_sets_workers_unless_the_file_or_an_option_does
    env = { "WEB_CONCURRENCY" => "2" }
    assert_equal 2, Handler.configuration({ Port: 0 }, config_file: "/nonexistent", env: env).workers
    assert_equal 3, Handler.configuration({ Port: 0, workers: "3" }, config_file: "/nonexistent", env: env).workers
    with_config_file("workers 4\n") do |file|
      assert_equal 4, Handler.configuration({ Port: 0 }, config_file: file, env: env).workers
    end
  end

  def test_web_concurrency_from_the_process_environment
    saved = ENV.fetch("WEB_CONCURRENCY", nil)
    ENV["WEB_CONCURRENCY"] = "2"
    assert_equal 2, Handler.configuration({ Port: 0 }, config_file: "/nonexistent").workers
  ensure
    ENV["WEB_CONCURRENCY"] = saved
  end
end
