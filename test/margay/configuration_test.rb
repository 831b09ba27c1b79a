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
    assert_equal 2, c.with(fiber_scheduler: true).effective_min_threads, "fiber mode: one sends and reads beside another's Ruby"
    assert_equal 1, c.with(fiber_scheduler: true, max_threads: 1).effective_min_threads, "never above max_threads"
    assert_equal 3, c.with(fiber_scheduler: true, min_threads: 3).effective_min_threads
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
    assert_equal Configuration.tcp_bind(Configuration::DEFAULT_PORT), Configuration::DEFAULTS[:binds].first
    assert_equal "tcp://0.0.0.0:3000", Configuration.tcp_bind(3000, "0.0.0.0")
    assert_equal "tcp://[::1]:80", Configuration.tcp_bind("80", "::1")
    assert_equal "tcp://[::1]:80", Configuration.tcp_bind(80, "[::1]")
    assert_raises(ArgumentError) { Configuration.tcp_bind("http") }
  end

  # Puma binds "::" (dual stack) when the machine has IPv6 beyond the
  # loopback, else 0.0.0.0; Margay's default host is chosen the same way.
  def test_default_host_is_dual_stack_when_ipv6_exists
    v6 = Addrinfo.ip("fd00::2")
    assert_equal "::", Configuration.default_host([Addrinfo.ip("127.0.0.1"), Addrinfo.ip("::1"), v6])
    assert_equal "0.0.0.0", Configuration.default_host([Addrinfo.ip("127.0.0.1"), Addrinfo.ip("::1")])
    assert_equal Configuration.default_host, Configuration::DEFAULT_HOST
  end

  # Puma's operational settings are checked as strictly as Margay's own.
  def test_operational_settings_are_validated
    {
      { quiet: true, log_requests: true } => /quiet and log_requests contradict/,
      { silent: "yes" } => /silent must be true or false/,
      { plugins: [:tmp_restart] } => /plugins must be a list of plugin names/,
      { control_url: "http://x" } => /invalid bind "http:\/\/x"/,
      { lowlevel_error_handler: 1 } => /lowlevel_error_handler must respond to call/,
      { app: "config.ru" } => /app must respond to call/,
      { custom_logger: 1 } => /custom_logger must respond to write, puts or info/,
      { remote_address: :header } => /remote_address must be :socket, :localhost or an address/,
      { remote_address_header: "X Forwarded" } => /remote_address_header must be a header name/,
      { proxy_protocol: :v2 } => /proxy_protocol must be nil or :v1/,
      { idle_timeout: 0 } => /idle_timeout must be a positive number of seconds or nil/,
      { force_shutdown_after: -2 } => /force_shutdown_after must be a number of seconds >= 0/,
      { worker_culling_strategy: :random } => /worker_culling_strategy must be :youngest or :oldest/,
      { tag: 3 } => /tag must be a non-empty String/,
      { control_token: "" } => /control_token must be a non-empty String/,
      { jemalloc: "" } => /jemalloc must be true, false or the library's path/,
      { jemalloc: :yes } => /jemalloc must be true, false or the library's path/,
      { heap_room_before_fork: 1 } => /heap_room_before_fork must be a share between 0 and 1 or nil/,
      { heap_room_before_fork: 0 } => /heap_room_before_fork must be a share between 0 and 1 or nil/,
    }.each do |settings, pattern|
      error = assert_raises(Margay::ConfigError, settings.inspect) { Configuration.new(**settings) }
      assert_match pattern, error.message
      assert_kind_of Configuration::InvalidSetting, error
    end
    config = Configuration.new(control_url: "unix:///tmp/ctl.sock", control_token: "none", plugins: ["tmp_restart"],
                               app: ->(_env) { [200, {}, []] }, proxy_protocol: :v1, force_shutdown_after: 0)
    assert_equal ["tmp_restart"], config.plugins
  end

  def test_settings_behind_a_load_balancer_are_validated
    {
      { health_bind: "http://x" } => /invalid bind "http:\/\/x"/,
      { health_bind: 9393 } => /health_bind must be tcp:\/\/HOST:PORT or unix:\/\/PATH/,
      { health_check_path: "up" } => /health_check_path must be a path such as "\/up"/,
      { health_check_path: "/up?x=1" } => /health_check_path must be a path/,
      { health_check_path: "/#{'a' * 255}" } => /at most 255 bytes/,
      { agent_bind: "unix:///tmp/agent.sock" } => /agent_bind must be tcp:\/\/HOST:PORT/,
      { agent_bind: "tcp://127.0.0.1:99999" } => /port 99999 is not in 0..65535/,
      { agent_bind: "tcp://127.0.0.1:9393", health_bind: "tcp://127.0.0.1:9393" } => /agent_bind and health_bind must differ/,
      { drain_delay: -1 } => /drain_delay must be a number of seconds >= 0/,
      { drain_delay: "5" } => /drain_delay must be a number of seconds >= 0/,
      { drain_delay: Float::INFINITY } => /drain_delay must be a number of seconds >= 0/
    }.each do |settings, pattern|
      error = assert_raises(Margay::ConfigError, settings.inspect) { Configuration.new(**settings) }
      assert_match pattern, error.message
    end
    config = Configuration.new(health_bind: "tcp://127.0.0.1:9393", health_check_path: "/up", drain_delay: 2.5)
    assert_equal ["tcp://127.0.0.1:9393", "/up", 2.5], [config.health_bind, config.health_check_path, config.drain_delay]
    assert_equal [nil, nil, 0, nil], Configuration.new.to_h.values_at(:health_bind, :health_check_path, :drain_delay, :agent_bind)
    assert_equal "tcp://0.0.0.0:9394", Configuration.new(agent_bind: "tcp://0.0.0.0:9394").agent_bind
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
