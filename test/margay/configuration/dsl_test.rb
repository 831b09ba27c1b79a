# frozen_string_literal: true

require "test_helper"
require "etc"
require "tmpdir"
require "margay/configuration/dsl"

# The config file evaluates to a Hash of Configuration settings; mistakes in it
# are ConfigErrors naming the file and line.
class DSLTest < Minitest::Test
  def evaluate(source, path = "config/margay.rb")
    Margay::Configuration::DSL.evaluate(source, path)
  end

  def assert_config_error(source, pattern, path = "config/margay.rb")
    error = assert_raises(Margay::ConfigError) { evaluate(source, path) }
    assert_match pattern, error.message
    error
  end

  def test_the_puma_style_directives
    settings = evaluate(<<~RUBY)
      bind "tcp://127.0.0.1:3000"
      bind "unix:///tmp/app.sock"
      port 4000
      port 4001, "::1"
      threads 2, 8
      environment :production
      pidfile "tmp/pids/margay.pid"
      rackup "app.ru"
      quiet
      log_requests
    RUBY
    assert_equal({ binds: ["tcp://127.0.0.1:3000", "unix:///tmp/app.sock", Margay::Configuration.tcp_bind(4000),
                           "tcp://[::1]:4001"],
                   min_threads: 2, max_threads: 8, environment: "production", pidfile: "tmp/pids/margay.pid",
                   rackup: "app.ru", quiet: false, log_requests: true }, settings, "quiet then log_requests: the last wins")
  end

  def test_every_plain_setting_by_its_name
    settings = evaluate(<<~RUBY)
      header_timeout 10
      body_timeout 5.5
      keepalive_timeout 20
      max_body_size 10 * 1024 * 1024
      max_connections nil
      event_backend "poll"
      min_threads 1
      max_threads 3
      shutdown_timeout 4
    RUBY
    assert_equal({ header_timeout: 10, body_timeout: 5.5, keepalive_timeout: 20, max_body_size: 10_485_760,
                   max_connections: nil, event_backend: :poll, min_threads: 1, max_threads: 3, shutdown_timeout: 4 },
                 settings)
    config = Margay::Configuration.new(**settings)
    assert_equal 10_485_760, config.max_body_size
  end

  def test_each_configuration_default_except_binds_and_hooks_is_a_directive
    evaluator = Margay::Configuration::DSL::Evaluator.new("x.rb")
    (Margay::Configuration::SETTINGS - %i[binds hooks] - Margay::Configuration::PumaCompat::SETTINGS).each do |key|
      assert evaluator.respond_to?(key), "no directive for #{key}"
    end
  end

  def test_numbers_from_env_strings
    settings = evaluate(%(threads "2", "6"\nmax_threads "6"\nheader_timeout "2.5"\nport "3000"\n))
    assert_equal({ min_threads: 2, max_threads: 6, header_timeout: 2.5, binds: [Margay::Configuration.tcp_bind(3000)] }, settings)
  end

  def test_threads_with_one_number
    assert_equal({ min_threads: 5, max_threads: 5 }, evaluate("threads 5"))
  end

  def test_plain_ruby_works
    settings = evaluate(<<~RUBY)
      max = Integer(ENV.fetch("MARGAY_DSL_TEST_UNSET", "7"))
      threads 1, max
      bind "tcp://127.0.0.1:\#{3000 + 1}" if max > 1
    RUBY
    assert_equal({ min_threads: 1, max_threads: 7, binds: ["tcp://127.0.0.1:3001"] }, settings)
  end

  def test_unknown_directive_names_file_and_line
    assert_config_error("threads 1, 2\n\nfrobnicate 3\n", /\Aconfig\/margay\.rb:3: unknown setting 'frobnicate'\z/)
  end

  def test_wrong_arguments_name_file_and_line
    assert_config_error("bind\n", /config\/margay\.rb:1: wrong number of arguments/)
    assert_config_error("# ok\nheader_timeout 1, 2\n", /config\/margay\.rb:2: wrong number of arguments/)
    assert_config_error("port 'http'\n", /config\/margay\.rb:1: port must be an integer, got "http"/)
    assert_config_error("threads 1, 'many'\n", /config\/margay\.rb:1: threads must be integers/)
  end

  def test_ruby_errors_in_the_file_name_file_and_line
    assert_config_error("\nraise 'boom'\n", /config\/margay\.rb:2: boom \(RuntimeError\)/)
    assert_config_error("threads 1,\n", /config\/margay\.rb:\d+: syntax error/)
    assert_config_error("require 'margay_no_such_file'\n", /config\/margay\.rb:1: cannot load such file/)
  end

  def test_cluster_directives
    assert_equal({ workers: 0 }, evaluate("workers nil\n"), "nil (an unset ENV value) means no workers")
    assert_equal({ workers: 4, preload_app: true }, evaluate("workers 4\npreload_app!\n"))
    assert_equal Etc.nprocessors, evaluate("workers :auto\n")[:workers]
    assert_config_error("workers 'many'\n", /config\/margay\.rb:1: workers must be a number or :auto/)
    hooks = evaluate("on_worker_boot { |i| i }\nbefore_worker_boot { |i| i }\nafter_worker_fork { |i| i }\nbefore_fork { }\n")[:hooks]
    assert_equal [2, 1, 1], [hooks[:before_worker_boot].size, hooks[:after_worker_fork].size, hooks[:before_fork].size]
    assert_config_error("on_restart\n", /config\/margay\.rb:1: on_restart needs a block/)
  end

  # Every hook name of Puma 5 to 8 (the deprecated ones too) => the hook it registers.
  PUMA_HOOK_NAMES = {
    before_fork: :before_fork, before_worker_fork: :before_worker_fork, on_worker_fork: :before_worker_fork,
    after_worker_fork: :after_worker_fork, after_worker_boot: :after_worker_fork,
    before_worker_boot: :before_worker_boot, on_worker_boot: :before_worker_boot,
    before_worker_shutdown: :before_worker_shutdown, on_worker_shutdown: :before_worker_shutdown,
    after_worker_shutdown: :after_worker_shutdown, before_restart: :before_restart, on_restart: :before_restart,
    before_refork: :before_refork, on_refork: :before_refork, after_refork: :after_refork,
    before_thread_start: :before_thread_start, on_thread_start: :before_thread_start,
    before_thread_exit: :before_thread_exit, on_thread_exit: :before_thread_exit,
    after_booted: :after_booted, on_booted: :after_booted, after_stopped: :after_stopped,
    on_stopped: :after_stopped, out_of_band: :out_of_band
  }.freeze

  def test_every_puma_hook_name_registers_its_hook_without_a_warning
    PUMA_HOOK_NAMES.each do |directive, hook|
      settings = nil
      _, err = capture_io { settings = evaluate("#{directive} { }\n") }
      assert_equal [hook], settings[:hooks].keys, directive
      assert_empty err, directive
      Margay::Configuration.new(**settings) # a valid configuration
    end
    assert_equal Margay::Configuration::HOOKS.sort, PUMA_HOOK_NAMES.values.uniq.sort
  end

  def test_a_hook_key_gives_the_block_its_data
    hooks = evaluate("before_worker_boot(:db) { |i, data| data[:n] = i }\n" \
                     "before_worker_shutdown('db') { |i, data| data[:seen] = [i, data[:n]] }\n")[:hooks]
    config = Margay::Configuration.new(hooks: hooks)
    data = {}
    config.run_hook(:before_worker_boot, 2, data: data)
    config.run_hook(:before_worker_shutdown, 2, data: data)
    assert_equal({ db: { n: 2, seen: [2, 2] } }, data)
    assert_config_error("before_worker_boot(1) { }\n", /margay\.rb:1: before_worker_boot: the key must be a String or Symbol/)
  end

  def test_load_reads_a_file
    Dir.mktmpdir do |dir|
      path = File.join(dir, "margay.rb")
      File.write(path, "max_threads 9\nnope\n")
      error = assert_raises(Margay::ConfigError) { Margay::Configuration::DSL.load(path) }
      assert_equal "#{path}:2: unknown setting 'nope'", error.message
      File.write(path, "max_threads 9\n")
      assert_equal({ max_threads: 9 }, Margay::Configuration::DSL.load(path))
      error = assert_raises(Margay::ConfigError) { Margay::Configuration::DSL.load(File.join(dir, "missing.rb")) }
      assert_match(/cannot read config file .*missing\.rb: No such file or directory/, error.message)
    end
  end

  def test_the_file_cannot_reach_a_server
    # The evaluator only records values: there is nothing to call `=` on.
    assert_config_error("self.max_threads = 3\n", /unknown setting 'max_threads='/)
  end
end
