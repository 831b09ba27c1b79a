# frozen_string_literal: true

require "test_helper"
require "etc"
require "tmpdir"
require "margay/cli"

# The flags and the config file become one Configuration; mistakes become one
# line on stderr and exit status 64. Nothing here starts a server.
class CLITest < Minitest::Test
  include Margay::TestHelper

  def cli(*argv)
    @out = StringIO.new
    @err = StringIO.new
    Margay::CLI.new(argv, out: @out, err: @err)
  end

  def config(*argv)
    cli(*argv).configuration
  end

  # Runs the CLI and expects a usage failure; returns stderr.
  def assert_usage_error(*argv)
    status = cli(*argv).run
    assert_equal 64, status, "expected exit 64 for #{argv.inspect}, stderr: #{@err.string}"
    assert_equal "", @out.string
    refute_match(/\.rb:\d+:in /, @err.string, "no backtrace on a usage error")
    assert @err.string.start_with?("margay: "), @err.string
    @err.string
  end

  def test_defaults_without_flags_or_config_file
    Dir.mktmpdir do |dir|
      Dir.chdir(dir) do
        c = config
        assert_equal ["tcp://0.0.0.0:9292"], c.binds
        assert_equal [0, 5], [c.min_threads, c.max_threads]
        assert_equal "config.ru", c.rackup
        refute cli.rackup_given?
      end
    end
  end

  def test_bind_is_repeatable
    c = config("-b", "tcp://127.0.0.1:0", "--bind", "unix:///tmp/margay-test.sock")
    assert_equal ["tcp://127.0.0.1:0", "unix:///tmp/margay-test.sock"], c.binds
  end

  def test_port_replaces_the_default_bind_and_adds_to_explicit_binds
    assert_equal ["tcp://0.0.0.0:3000"], config("-p", "3000").binds
    assert_equal ["tcp://127.0.0.1:1", "tcp://0.0.0.0:3000"], config("-b", "tcp://127.0.0.1:1", "--port", "3000").binds
  end

  def test_threads_min_max_and_single_number
    c = config("-t", "2:8")
    assert_equal [2, 8], [c.min_threads, c.max_threads]
    c = config("--threads", "4")
    assert_equal [4, 4], [c.min_threads, c.max_threads]
  end

  def test_other_flags
    c = config("-e", "production", "--pidfile", "tmp/m.pid", "-q", "--log-requests", "app.ru")
    assert_equal "production", c.environment
    assert_equal "tmp/m.pid", c.pidfile
    assert c.quiet
    assert c.log_requests
    assert_equal "app.ru", c.rackup
    assert cli("app.ru").rackup_given?
  end

  def test_version_and_help_exit_zero
    assert_equal 0, cli("-v").run
    assert_equal "Margay #{Margay::VERSION}\n", @out.string
    assert_equal 0, cli("--help").run
    assert_match(/Usage: margay/, @out.string)
    %w[--bind --port --threads --environment --config --pidfile --quiet --log-requests].each do |flag|
      assert_includes @out.string, flag
    end
  end

  def test_config_file_is_read_and_flags_win
    with_config_file(<<~RUBY) do |path|
      bind "tcp://127.0.0.1:4000"
      threads 1, 3
      environment "staging"
      header_timeout 7
      rackup "from_file.ru"
    RUBY
      c = config("-C", path)
      assert_equal ["tcp://127.0.0.1:4000"], c.binds
      assert_equal [1, 3], [c.min_threads, c.max_threads]
      assert_equal "staging", c.environment
      assert_equal 7, c.header_timeout
      assert cli("-C", path).rackup_given?

      c = config("-C", path, "-b", "tcp://127.0.0.1:0", "-t", "2:9", "-e", "production", "other.ru")
      assert_equal ["tcp://127.0.0.1:0"], c.binds, "CLI binds replace the file's"
      assert_equal [2, 9], [c.min_threads, c.max_threads]
      assert_equal "production", c.environment
      assert_equal 7, c.header_timeout, "settings the flags do not name stay"
      assert_equal "other.ru", c.rackup
    end
  end

  def test_config_margay_rb_is_read_by_default
    Dir.mktmpdir do |dir|
      Dir.mkdir(File.join(dir, "config"))
      File.write(File.join(dir, "config", "margay.rb"), "max_threads 11\n")
      Dir.chdir(dir) { assert_equal 11, config.max_threads }
    end
  end

  def test_unknown_flag
    assert_match(/invalid option: --nope/, assert_usage_error("--nope"))
  end

  def test_workers_flag_and_web_concurrency
    assert_equal 3, config("-w", "3").workers
    assert_equal Etc.nprocessors, config("--workers", "auto").workers
    assert_match(/invalid --workers "many"/, assert_usage_error("-w", "many"))
    with_env("WEB_CONCURRENCY" => "2") do
      assert_equal 2, config.workers
      assert_equal 4, config("-w", "4").workers, "the flag wins over WEB_CONCURRENCY"
    end
  end

  def test_abbreviated_long_flags_are_not_guessed
    assert_match(/--env/, assert_usage_error("--env", "production"))
  end

  def test_invalid_values
    assert_match(/missing argument: --port/, assert_usage_error("--port"))
    assert_match(/invalid port "abc"/, assert_usage_error("-p", "abc"))
    assert_match(/invalid port "70000"/, assert_usage_error("-p", "70000"))
    assert_match(/threads must be MIN:MAX or N, got "2-8"/, assert_usage_error("-t", "2-8"))
    assert_match(/threads must be MIN:MAX with 0 <= MIN <= MAX/, assert_usage_error("-t", "8:2"))
    assert_match(/invalid bind "http:\/\/x"/, assert_usage_error("-b", "http://x"))
    assert_match(/port 99999 is not in 0\.\.65535/, assert_usage_error("-b", "tcp://127.0.0.1:99999"))
  end

  def test_contradictions
    assert_match(/one rackup file expected, got 2/, assert_usage_error("a.ru", "b.ru"))
    assert_match(/contradictory --environment values: production and development/,
                 assert_usage_error("-e", "production", "-e", "development"))
    assert_match(/contradictory --threads/, assert_usage_error("-t", "1:2", "-t", "3:4"))
  end

  def test_same_value_twice_is_not_a_contradiction
    assert_equal "production", config("-e", "production", "-e", "production").environment
  end

  def test_config_file_errors_exit_64_naming_the_file
    assert_match(%r{config file /nonexistent/margay.rb not found}, assert_usage_error("-C", "/nonexistent/margay.rb"))
    with_config_file("threads 1, 2\nfrobnicate 3\n") do |path|
      assert_match(/\A"?margay: #{Regexp.escape(path)}:2: unknown setting 'frobnicate'/, assert_usage_error("-C", path))
    end
    with_config_file("header_timeout(-1)\n") do |path|
      assert_match(/#{Regexp.escape(path)}: header_timeout must be a positive number/, assert_usage_error("-C", path))
    end
    with_config_file("bind 'tcp://x:1'\n  end\n") do |path|
      assert_match(/#{Regexp.escape(path)}:2: syntax error/, assert_usage_error("-C", path))
    end
  end

  def test_missing_rackup_file_named_explicitly_exits_64
    Dir.mktmpdir do |dir|
      missing = File.join(dir, "missing.ru")
      assert_match(/rackup file #{Regexp.escape(missing)} not found/, assert_usage_error("-b", "tcp://127.0.0.1:0", missing))
    end
  end

  private

  def with_env(vars)
    saved = vars.keys.to_h { |k| [k, ENV[k]] }
    vars.each { |k, v| ENV[k] = v }
    yield
  ensure
    saved.each { |k, v| ENV[k] = v }
  end
end
