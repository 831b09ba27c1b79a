# frozen_string_literal: true

require "test_helper"
require "margay/configuration"

# The one frozen configuration object: defaults, overrides, validation.
class ConfigurationTest < Minitest::Test
  Configuration = Margay::Configuration

  def test_defaults_and_derived_values
    c = Configuration.new(environment: "production")
    assert_equal Configuration::DEFAULTS.merge(environment: "production", tmpdir: Dir.tmpdir), c.to_h
    assert_equal 1, c.effective_min_threads, "one thread always waits for connections"
    refute c.preload_app?, "single mode loads the app once anyway"
    assert c.with(workers: 2).preload_app?, "the default in cluster mode"
    refute c.with(workers: 2, preload_app: false).preload_app?
    refute c.development?
    assert Configuration.new(environment: "development").development?
  end

  def test_frozen_deeply_and_with_makes_a_copy
    c = Configuration.new(binds: [+"tcp://127.0.0.1:0"])
    assert c.frozen?
    assert c.binds.frozen?
    assert c.binds.first.frozen?
    d = c.with(max_threads: 9)
    assert_equal [5, 9], [c.max_threads, d.max_threads]
    assert_equal c.binds, d.binds
  end

  def test_the_default_bind_names_the_default_host_and_port
    assert_equal "tcp://#{Configuration::DEFAULT_HOST}:#{Configuration::DEFAULT_PORT}", Configuration::DEFAULTS[:binds].first
    assert_equal "tcp://0.0.0.0:3000", Configuration.tcp_bind(3000)
    assert_equal "tcp://[::1]:80", Configuration.tcp_bind("80", "::1")
    assert_equal "tcp://[::1]:80", Configuration.tcp_bind(80, "[::1]")
    assert_raises(ArgumentError) { Configuration.tcp_bind("http") }
  end

  def test_mistakes_are_config_errors
    {
      { nope: 1 } => /unknown setting\(s\): nope/,
      { header_timeout: 0 } => /header_timeout must be a positive number, got 0/,
      { max_threads: 2.5 } => /max_threads must be a positive integer/,
      { min_threads: 3, max_threads: 2 } => /threads must be MIN:MAX with 0 <= MIN <= MAX, got 3:2/,
      { max_body_size: -1 } => /max_body_size must be a non-negative integer or nil/,
      { request_timeout: 0 } => /request_timeout must be a positive number of seconds or nil/,
      { event_backend: :kqueue } => /event_backend must be :auto, :epoll or :poll/,
      { binds: [] } => /at least one bind is required/,
      { binds: ["http://x:1"] } => /invalid bind "http:\/\/x:1"/,
      { binds: ["tcp://127.0.0.1:99999"] } => /invalid bind "tcp:\/\/127.0.0.1:99999": port 99999 is not in 0..65535/,
      { workers: -1 } => /workers must be a non-negative integer/,
      { hooks: { on_boot: [-> {}] } } => /unknown hook :on_boot/
    }.each do |settings, message|
      error = assert_raises(Margay::ConfigError, settings.inspect) { Configuration.new(**settings) }
      assert_match message, error.message
    end
  end

  def test_hooks_run_in_order_with_their_arguments
    seen = []
    c = Configuration.new(hooks: { before_worker_boot: [->(i) { seen << [:a, i] }, ->(i) { seen << [:b, i] }] })
    c.run_hook(:before_worker_boot, 3)
    c.run_hook(:before_fork)
    assert_equal [[:a, 3], [:b, 3]], seen
  end

  def test_a_hook_that_raises_is_logged_and_the_next_one_still_runs
    seen = []
    log = Object.new
    log.define_singleton_method(:exception) { |e, context| seen << [context, e.message] }
    c = Configuration.new(hooks: { after_booted: [-> { raise "boom" }, -> { seen << :second }] })
    assert_nil c.run_hook(:after_booted, log: log)
    assert_equal [["after_booted hook failed", "boom"], :second], seen
    _, err = capture_io { c.run_hook(:after_booted) }
    assert_match(/margay: after_booted hook failed: RuntimeError: boom/, err)
  end

  def test_cluster_only_hooks_are_named_for_the_single_mode_warning
    c = Configuration.new(hooks: { before_fork: [-> {}], after_booted: [-> {}], before_worker_boot: [->(_) {}] })
    assert_equal %i[before_fork before_worker_boot], c.cluster_only_hooks
  end
end
