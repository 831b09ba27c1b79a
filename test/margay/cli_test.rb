# frozen_string_literal: true

require "test_helper"
require "etc"
require "fileutils"
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
        assert_equal Margay::Configuration::DEFAULTS[:binds], c.binds
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
    host = Margay::Configuration::DEFAULT_HOST.include?(":") ? "[#{Margay::Configuration::DEFAULT_HOST}]" : Margay::Configuration::DEFAULT_HOST
    assert_equal ["tcp://#{host}:3000"], config("-p", "3000").binds
    assert_equal ["tcp://127.0.0.1:1", "tcp://#{host}:3000"], config("-b", "tcp://127.0.0.1:1", "--port", "3000").binds
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
    refute c.quiet, "the last of -q and --log-requests wins, as in Puma"
    assert c.log_requests
    assert_equal "app.ru", c.rackup
    assert cli("app.ru").rackup_given?
  end

  def test_prune_bundler_flag
    assert config("--prune-bundler").prune_bundler
    refute config.prune_bundler
  end

  def test_lean_heap_flag
    assert config("--lean-heap").lean_heap
    refute config.lean_heap
  end

  def test_heap_room_before_fork_flag
    assert_in_delta 0.4, config("--heap-room-before-fork", "0.4").heap_room_before_fork
    assert_nil config.heap_room_before_fork
  end

  def test_jemalloc_flag
    c = config("--jemalloc", "app.ru")
    assert_equal [true, "app.ru"], [c.jemalloc, c.rackup]
    refute config.jemalloc
  end

  def test_health_and_drain_flags
    c = config("--health-bind", "tcp://127.0.0.1:9393", "--health-check-path", "/up", "--drain-delay", "5",
               "--agent-bind", "tcp://127.0.0.1:9394")
    assert_equal ["tcp://127.0.0.1:9393", "/up", 5, "tcp://127.0.0.1:9394"],
                 [c.health_bind, c.health_check_path, c.drain_delay, c.agent_bind]
    assert_equal 0.5, config("--drain-delay=0.5").drain_delay
    assert_match(/invalid --drain-delay "-1"/, assert_usage_error("--drain-delay", "-1"))
  end

  # Puma 8's flags set the same settings Puma's do.
  def test_puma_flags
    c = config("--control-url", "tcp://127.0.0.1:9293", "--control-token", "tok", "-S", "tmp/puma.state",
               "--dir", "/srv/app", "-f", "--idle-timeout", "30", "--plugin", "tmp_restart", "--preload",
               "-R", "bin/margay", "--early-hints", "--tag", "shop", "--redirect-stdout", "log/o",
               "--redirect-stderr", "log/e", "--redirect-append", "-s", "--bind-to-activated-sockets")
    assert_equal ["tcp://127.0.0.1:9293", "tok", "tmp/puma.state", "/srv/app"],
                 [c.control_url, c.control_token, c.state_path, c.directory]
    assert_equal [1000, 30, ["tmp_restart"], true, "bin/margay", "shop"],
                 [c.refork_after, c.idle_timeout, c.plugins, c.preload_app, c.restart_command, c.tag]
    assert_equal ["log/o", "log/e", true, true], [c.redirect_stdout, c.redirect_stderr, c.redirect_append, c.silent]
    assert_equal "", @err.string
    assert_equal [250, false], [config("--fork-worker", "250").refork_after, config("--no-redirect-append").redirect_append]
    assert_nil config("-f", "0").refork_after, "0: re-fork on SIGURG only"
    assert_match(%r{\Aunix://.*\.sock\z}, config("--control-url", "auto").control_url)
    assert_equal [false, true], [config("-v", "-q").log_requests, config("-v", "-q").quiet]
    assert_equal [true, false], [config("-q", "-v").log_requests, config("-q", "-v").quiet]
  end

  def test_long_flags_take_their_value_after_an_equals_sign
    c = config("--port=3000", "--threads=2:4", "--fork-worker=7", "--bind-to-activated-sockets=only")
    assert_equal [Margay::Configuration.tcp_bind(3000), 2, 4, 7], [*c.binds, c.min_threads, c.max_threads, c.refork_after]
  end

  def test_plugins_from_the_file_and_the_flags_add_up
    with_config_file("plugin :tmp_restart\n") do |path|
      assert_equal %w[tmp_restart yabeda], config("-C", path, "--plugin", "yabeda").plugins
    end
  end

  def test_include_adds_to_the_load_path_before_the_config_file_runs
    Dir.mktmpdir do |dir|
      File.write(File.join(dir, "margay_cli_test_lib.rb"), "MARGAY_CLI_TEST_THREADS = 7\n")
      with_config_file("require 'margay_cli_test_lib'\nmax_threads MARGAY_CLI_TEST_THREADS\n") do |path|
        assert_equal 7, config("-I", "#{dir}:/nonexistent-lib", "-C", path).max_threads
        assert_includes $LOAD_PATH, dir
      ensure
        $LOAD_PATH.delete(dir)
        $LOAD_PATH.delete("/nonexistent-lib")
      end
    end
  end

  def test_puma_only_flags_warn_once_each
    c = cli("--extra-runtime-dependencies", "a,b", "--debug")
    c.configuration
    assert_equal 2, @err.string.lines.size, @err.string
    assert_match(/\Amargay: --extra-runtime-dependencies is a Puma flag Margay has no use for \(.+\); ignored\n/, @err.string)
  end

  def test_no_config_reads_no_file
    Dir.mktmpdir do |dir|
      Dir.mkdir(File.join(dir, "config"))
      File.write(File.join(dir, "config", "puma.rb"), "max_threads 11\n")
      Dir.chdir(dir) do
        assert_equal 11, config.max_threads, "config/puma.rb is read by default, as Puma does"
        assert_equal 5, config("--no-config").max_threads
        assert_match(/--no-config and --config contradict/, assert_usage_error("--no-config", "-C", "config/puma.rb"))
      end
    end
  end

  def test_environment_flag_picks_config_puma_env_rb
    Dir.mktmpdir do |dir|
      FileUtils.mkdir_p(File.join(dir, "config", "puma"))
      File.write(File.join(dir, "config", "puma.rb"), "max_threads 11\n")
      File.write(File.join(dir, "config", "puma", "staging.rb"), "max_threads 12\n")
      Dir.chdir(dir) { assert_equal 12, config("-e", "staging").max_threads }
    end
  end

  def test_invalid_puma_flag_values
    assert_match(/invalid --idle-timeout "soon"/, assert_usage_error("--idle-timeout", "soon"))
    assert_match(/--bind-to-activated-sockets takes nothing or 'only'/, assert_usage_error("--bind-to-activated-sockets=all"))
    assert_match(/unknown option "bogus"/, assert_usage_error("-b", "tcp://127.0.0.1:0?bogus=1"))
  end

  def test_queue_flags
    assert_nil config.queue_timeout, "off by default"
    refute config.queue_time_header
    c = config("--queue-timeout", "2.5", "--queue-time-header")
    assert_in_delta 2.5, c.queue_timeout
    assert c.queue_time_header
    assert_match(/invalid --queue-timeout "0"/, assert_usage_error("--queue-timeout", "0"))
    assert_match(/invalid --queue-timeout "soon"/, assert_usage_error("--queue-timeout", "soon"))
    with_config_file("queue_timeout 10\nqueue_time_header true\n") do |path|
      c = config("-C", path)
      assert_equal [10, true], [c.queue_timeout, c.queue_time_header]
    end
    assert_raises(Margay::ConfigError) { Margay::Configuration.new(queue_timeout: -1) }
    assert_raises(Margay::ConfigError) { Margay::Configuration.new(queue_time_header: "yes") }
  end

  def test_version_and_help_exit_zero
    assert_equal 0, cli("-V").run
    assert_equal "margay version #{Margay::VERSION}\n", @out.string
    assert_equal 0, cli("--version").run
    assert_equal 0, cli("--help").run
    assert_match(/Usage: margay/, @out.string)
    %w[--bind --port --threads --environment --config --pidfile --quiet --log-requests --silent --no-config
       --control-url --control-token --state --dir --fork-worker --include --idle-timeout --plugin --preload
       --prune-bundler --extra-runtime-dependencies --restart-cmd --early-hints --tag --redirect-stdout
       --redirect-stderr --redirect-append --no-redirect-append --debug --bind-to-activated-sockets].each do |flag|
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

  # One line, as the README promises (it was two).
  def test_unknown_flag
    assert_equal "margay: invalid option: --nope (see margay --help)\n", assert_usage_error("--nope")
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
    with_config_file("threads 1, 2\nheader_timeout(-1)\n") do |path|
      assert_match(/#{Regexp.escape(path)}:2: header_timeout must be a positive number/, assert_usage_error("-C", path))
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
end
