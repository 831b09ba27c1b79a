# frozen_string_literal: true

require "test_helper"
require "margay/configuration/dsl"

# An existing config/puma.rb runs unchanged under `margay -C config/puma.rb`.
class PumaCompatTest < Minitest::Test
  # What `rails new` generated, 6.1 to 8.0 (test/fixtures/puma_configs/rails_*.rb, which the
  # slow suite also runs under the real executable).
  RAILS_TEMPLATES = Dir[File.expand_path("../../fixtures/puma_configs/rails_*.rb", __dir__)].to_h do |path|
    [File.basename(path, ".rb").delete_prefix("rails_").tr("_", "."), File.read(path)]
  end.freeze

  # A typical cluster configuration.
  CLUSTER = <<~RUBY
    workers ENV.fetch("WEB_CONCURRENCY") { 4 }
    threads 2, 8
    bind "tcp://127.0.0.1:9393"
    environment "production"
    preload_app!
    worker_timeout 30
    persistent_timeout 20
    first_data_timeout 15
    worker_shutdown_timeout 25
    fork_worker 500
    before_fork { }
    on_worker_boot { |index| index }
    on_worker_shutdown { |index| index }
    on_restart { }
    stdout_redirect "log/out.log", "log/err.log", true
    activate_control_app "tcp://127.0.0.1:9293", { no_token: true }
    lowlevel_error_handler { |e| [500, {}, ["oops"]] }
  RUBY

  def evaluate(source)
    Margay::Configuration::DSL.evaluate(source, "config/puma.rb")
  end

  def test_rails_templates_run_without_a_warning
    assert_equal %w[6.1 7.0 7.1 7.2 8.0], RAILS_TEMPLATES.keys.sort
    RAILS_TEMPLATES.each do |version, source|
      settings = nil
      _, err = capture_io { settings = evaluate(source) }
      config = Margay::Configuration.new(**settings)
      assert_equal [Margay::Configuration.tcp_bind(3000)], config.binds, version
      assert_includes config.plugins, "tmp_restart", version
      assert_equal "", err, version
    end
  end

  def test_rails_default_puma_rb
    settings = nil
    _, err = capture_io { settings = evaluate(RAILS_TEMPLATES.fetch("7.2")) }
    config = Margay::Configuration.new(**settings)
    assert_equal [3, 3, [Margay::Configuration.tcp_bind(3000)]], [config.min_threads, config.max_threads, config.binds]
    assert_equal ["tmp_restart"], config.plugins
    assert_equal "", err, "a Rails config/puma.rb needs no warning"
  end

  def test_cluster_puma_rb_maps_every_setting_without_a_warning
    settings = nil
    _, err = capture_io { settings = evaluate(CLUSTER) }
    config = Margay::Configuration.new(**settings)
    assert_equal [4, 2, 8, true], [config.workers, config.min_threads, config.max_threads, config.preload_app?]
    assert_equal [30, 20, 15, 25, 500],
                 [config.worker_timeout, config.keepalive_timeout, config.header_timeout, config.shutdown_timeout,
                  config.refork_after]
    assert_equal %i[before_fork before_worker_boot before_worker_shutdown before_restart].sort, config.hooks.keys.sort
    assert_equal ["log/out.log", "log/err.log", true], [config.redirect_stdout, config.redirect_stderr, config.redirect_append]
    assert_equal ["tcp://127.0.0.1:9293", "none"], [config.control_url, config.control_token]
    assert_equal [500, {}, ["oops"]], config.lowlevel_error_handler.call(RuntimeError.new, {}, 500)
    assert_equal "", err
  end

  # Every non-hook directive of Puma 5, 6, 7 and 8 is accepted: set, or one
  # warning naming the file and line. Never an unknown-setting failure.
  PUMA_NAMES = <<~'RUBY'
    app { |env| [200, {}, ["hi"]] }
    activate_control_app "unix:///tmp/pumactl.sock", auth_token: "12345"
    bind "tcp://127.0.0.1:9000"
    bind_to_activated_sockets "only"
    clean_thread_locals
    custom_logger $stdout
    debug
    directory "/srv/app/current"
    drain_on_shutdown
    early_hints
    enable_keep_alives false
    environment "production"
    extra_runtime_dependencies ["gem1"]
    fiber_per_request
    first_data_timeout 11
    force_shutdown_after 5
    fork_worker 0
    http_content_length_limit 1_000_000
    idle_timeout 120
    io_selector_backend :epoll
    load "#{__dir__}/puma_compat_loaded.rb"
    log_formatter { |line| "x #{line}" }
    log_requests false
    lowlevel_error_handler { |e, env, status| [status, {}, ["err"]] }
    max_fast_inline 10
    max_io_threads 4
    max_keep_alive 50
    mutate_stdout_and_stderr_to_sync_on_write
    nakayoshi_fork
    persistent_timeout 21
    pidfile "tmp/puma.pid"
    plugin :tmp_restart
    port 9001, "127.0.0.1"
    preload_app!
    prune_bundler
    queue_requests false
    quiet
    rack_url_scheme "https"
    rackup "app.ru"
    raise_exception_on_sigterm false
    restart_command "bin/puma"
    set_default_host "127.0.0.1"
    set_remote_address header: "X-Forwarded-For"
    shutdown_debug
    silence_fork_callback_warning
    silence_single_worker_warning
    state_path "tmp/puma.state"
    state_permission 0o600
    stdout_redirect "log/o", "log/e"
    tag "shop"
    threads 1, 4
    wait_for_less_busy_worker 0.01
    worker_boot_timeout 40
    worker_check_interval 3
    worker_culling_strategy :oldest
    worker_shutdown_timeout 12
    worker_timeout 50
    workers 2
    cluster { worker_timeout 55 }
    single { worker_timeout 99 }
    daemonize
    worker_directory "/srv/app/current"
    get(:max_threads)
    inject { tag "injected" }
  RUBY

  def test_every_puma_5_to_8_name_is_accepted
    settings = nil
    _, err = capture_io do
      File.write(File.join(__dir__, "puma_compat_loaded.rb"), "header_timeout 6\n")
      settings = Margay::Configuration::DSL.evaluate(PUMA_NAMES.gsub("\#{__dir__}", __dir__), "config/puma.rb")
    ensure
      File.delete(File.join(__dir__, "puma_compat_loaded.rb"))
    end
    config = Margay::Configuration.new(**settings)
    assert_equal [200, {}, ["hi"]], config.app.call({})
    assert_equal ["unix:///tmp/pumactl.sock", "12345"], [config.control_url, config.control_token]
    assert_equal ["tcp://127.0.0.1:9000", "tcp://127.0.0.1:9001"], config.binds
    assert_equal [6, 50, 55], [config.header_timeout, config.max_keepalive_requests, config.worker_timeout],
                 "load, max_keep_alive, the cluster block (workers 2)"
    assert_equal 1, evaluate("enable_keep_alives false\n")[:max_keepalive_requests], "one request per connection"
    assert_equal ["injected", "/srv/app/current", "bin/puma", :oldest], [config.tag, config.directory, config.restart_command,
                                                                         config.worker_culling_strategy]
    assert_equal [nil, 5.0, 120, "X-Forwarded-For"], [config.refork_after, config.force_shutdown_after, config.idle_timeout,
                                                      config.remote_address_header]
    assert_equal [true, false, "tmp/puma.state", ["tmp_restart"]], [config.quiet, config.log_requests, config.state_path, config.plugins]
    assert_equal "x a", config.log_formatter.call("a")
    assert_equal 4, config.max_io_threads, "issue 13: max_io_threads is a real setting"
    assert config.prune_bundler, "prune_bundler is a real setting"
    warned = err.lines.map { |line| line[/\Amargay: config\/puma\.rb:(\d+): '?(\w+)/, 2] }
    assert_equal %w[clean_thread_locals debug extra_runtime_dependencies fiber_per_request io_selector_backend
                    max_fast_inline mutate_stdout_and_stderr_to_sync_on_write nakayoshi_fork
                    queue_requests rack_url_scheme raise_exception_on_sigterm shutdown_debug state_permission
                    wait_for_less_busy_worker worker_check_interval daemonize], warned, err
    err.lines.each { |line| assert_match(/\Amargay: config\/puma\.rb:\d+: .+\(.+\); ignored\n\z/, line) }
  end

  def test_a_warning_is_printed_once_per_line
    _, err = capture_io { evaluate("3.times { nakayoshi_fork }\ndebug\n") }
    assert_equal 2, err.lines.size, err
  end

  def test_set_remote_address_forms
    assert_equal({ remote_address: :socket }, evaluate("set_remote_address\n"))
    assert_equal({ remote_address: :localhost }, evaluate("set_remote_address :localhost\n"))
    assert_equal({ remote_address: "10.0.0.1" }, evaluate("set_remote_address '10.0.0.1'\n"))
    assert_equal({ remote_address: :socket, proxy_protocol: nil, remote_address_header: "X-Real-IP" },
                 evaluate("set_remote_address header: 'X-Real-IP'\n"))
    assert_equal({ remote_address: :socket, remote_address_header: nil, proxy_protocol: :v1 },
                 evaluate("set_remote_address proxy_protocol: :v1\n"))
    {
      "set_remote_address proxy_protocol: :v2" => /only :v1 is supported/,
      "set_remote_address header: 'X Forwarded'" => /is not a header name/,
      "set_remote_address header: 'X', proxy_protocol: :v1" => /takes one of header: NAME or proxy_protocol: :v1/,
      "set_remote_address 42" => /takes :socket, :localhost/,
      "set_remote_address ''" => /non-empty address/
    }.each do |source, pattern|
      error = assert_raises(Margay::ConfigError, source) { evaluate("\n#{source}\n") }
      assert_match(/\Aconfig\/puma\.rb:2: /, error.message)
      assert_match pattern, error.message
    end
  end

  def test_puma_values_are_checked_at_their_line
    {
      "worker_culling_strategy :newest" => /worker_culling_strategy must be :youngest or :oldest/,
      "idle_timeout 'soon'" => /idle_timeout must be a positive number of seconds/,
      "force_shutdown_after :later" => /force_shutdown_after must be seconds >= 0, :immediately or :forever/,
      "fork_worker(-1)" => /fork_worker must be a number of requests >= 0/,
      "app" => /app needs a Rack app/,
      "lowlevel_error_handler" => /lowlevel_error_handler needs/,
      "bind_to_activated_sockets 'all'" => /takes true, false or 'only'/,
      "activate_control_app 'tcp://127.0.0.1:9', token: 'x'" => /unknown option\(s\) token/,
      "load 'nonexistent/puma.rb'" => /load: config file nonexistent\/puma\.rb not found/
    }.each do |source, pattern|
      error = assert_raises(Margay::ConfigError, source) { evaluate("threads 1, 2\n#{source}\n") }
      assert_match(/\Aconfig\/puma\.rb:2: /, error.message)
      assert_match pattern, error.message
    end
  end

  def test_drain_on_shutdown_false_warns_and_force_shutdown_after_takes_pumas_symbols
    settings = nil
    _, err = capture_io { settings = evaluate("drain_on_shutdown false\nforce_shutdown_after :forever\n") }
    assert_equal(-1, settings[:force_shutdown_after], ":forever: never cut")
    assert_equal 0, evaluate("force_shutdown_after :immediately\n")[:force_shutdown_after]
    assert_equal 1, err.lines.size, err
    assert_match(/\Amargay: config\/puma\.rb:1: drain_on_shutdown false: Margay always finishes/, err.lines[0])
  end

  def test_clear_binds_and_single_block
    assert_equal({ binds: ["tcp://127.0.0.1:2"] }, evaluate("bind 'tcp://127.0.0.1:1'\nclear_binds!\nbind 'tcp://127.0.0.1:2'\n"))
    settings = Margay::Configuration::DSL.evaluate("single { max_threads 3 }\ncluster { max_threads 9 }\n", "c.rb", env: {})
    assert_equal 3, settings[:max_threads]
    settings = Margay::Configuration::DSL.evaluate("single { max_threads 3 }\ncluster { max_threads 9 }\n", "c.rb",
                                                   env: { "WEB_CONCURRENCY" => "2" })
    assert_equal 9, settings[:max_threads], "WEB_CONCURRENCY=2 is cluster mode"
  end

  def test_activate_control_app_auto_and_default_token
    settings = evaluate("activate_control_app\n")
    assert_equal "unix://#{File.join(Dir.tmpdir, "margay-ctl-#{Process.pid}.sock")}", settings[:control_url]
    refute settings.key?(:control_token), "no token named: Margay makes a random one"
  end

  # ssl_bind adds the ssl:// bind Puma's DSL makes (test/slow/tls_test.rb compares it with
  # Puma's own); PEM text stays out of the URL (store:N, the Nth of ssl_pems).
  def test_ssl_bind_adds_an_ssl_bind
    settings = evaluate(%(bind "tcp://0.0.0.0:3000"\nssl_bind "0.0.0.0", "9443", key: "my key.pem", cert: "c.pem"\n))
    assert_equal ["tcp://0.0.0.0:3000", "ssl://0.0.0.0:9443?cert=c.pem&key=my+key.pem&verify_mode=none"], settings[:binds]
    settings = evaluate(%(ssl_bind "0.0.0.0", 9443, cert_pem: "CERT", key_pem: "KEY", verify_mode: "peer", ca: "/ca.pem"\n))
    assert_equal ["ssl://0.0.0.0:9443?cert=store%3A0&key=store%3A1&verify_mode=peer&ca=%2Fca.pem"], settings[:binds]
    assert_equal %w[CERT KEY], settings[:ssl_pems]
    url = Margay::Binder.parse(settings[:binds].first)
    assert_equal [:ssl, "0.0.0.0", 9443, "/ca.pem"], [url.scheme, url.host, url.port, url.options[:ca]]
  end
end
