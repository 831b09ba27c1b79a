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
    assert_equal ["production", 2, 6, true, false, 7],
                 [c.environment, c.min_threads, c.max_threads, c.log_requests, c.quiet, c.header_timeout]
    c = Handler.configuration({ Port: 0, quiet: true, Silent: true }, config_file: "/nonexistent", env: {})
    assert_equal [true, false, true], [c.quiet, c.log_requests, c.silent]
    assert_equal ["unix://./tmp/app.sock"], Handler.configuration({ Host: "./tmp/app.sock", Port: 3000 },
                                                                  config_file: "/nonexistent", env: {}).binds
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

  RAILS_PUMA_RB = <<~RUBY
    threads_count = ENV.fetch("RAILS_MAX_THREADS", 3)
    threads threads_count, threads_count
    port ENV.fetch("PORT", 3000)
    plugin :tmp_restart
  RUBY

  # `bin/rails server -u margay` reads the app's config/puma.rb, as Puma's
  # handler does: its threads and port count; Rails' defaults sit under the
  # file, what the user typed goes over it; a defaulted Host is the host of the
  # file's bare `port` (localhost in development).
  def test_rails_server_reads_config_puma_rb
    Dir.mktmpdir do |dir|
      Dir.mkdir(File.join(dir, "config"))
      File.write(File.join(dir, "config", "puma.rb"), RAILS_PUMA_RB)
      Dir.chdir(dir) do
        rails = { Host: "localhost", Port: 3000, environment: "development", user_supplied_options: [] }
        with_env("RAILS_MAX_THREADS" => "7", "PORT" => "4100") do
          c = Handler.configuration(rails, env: {})
          assert_equal [7, 7, ["tcp://localhost:4100"], ["tmp_restart"]], [c.min_threads, c.max_threads, c.binds, c.plugins]
          c = Handler.configuration(rails.merge(Port: 5000, user_supplied_options: [:Port]), env: {})
          assert_equal ["tcp://localhost:5000"], c.binds, "rails server -p wins over the file's port"
          c = Handler.configuration(rails.merge(Host: "0.0.0.0", user_supplied_options: [:Host]), env: {})
          assert_equal ["tcp://0.0.0.0:3000"], c.binds, "-b without -p: Rails' port, as Puma's handler does"
          c = Handler.configuration(rails.merge(Host: "0.0.0.0", environment: "production"), env: {})
          assert_equal ["tcp://0.0.0.0:4100"], c.binds, "the file's port on Rails' default host"
        end
        File.write(File.join(dir, "config", "margay.rb"), "max_threads 9\n")
        assert_equal 9, Handler.configuration({ Port: 0 }, env: {}).max_threads, "config/margay.rb comes first"
      end
    end
  end

  private
end
