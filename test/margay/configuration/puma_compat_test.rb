# frozen_string_literal: true

require "test_helper"
require "margay/configuration/dsl"

# An existing config/puma.rb runs unchanged under `margay -C config/puma.rb`.
class PumaCompatTest < Minitest::Test
  # What `rails new` (7.2) generates.
  RAILS_7_2 = <<~RUBY
    threads_count = ENV.fetch("RAILS_MAX_THREADS", 3)
    threads threads_count, threads_count
    port ENV.fetch("PORT", 3000)
    plugin :tmp_restart
    pidfile ENV["PIDFILE"] if ENV["PIDFILE"]
  RUBY

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

  def test_rails_default_puma_rb
    settings = nil
    _, err = capture_io { settings = evaluate(RAILS_7_2) }
    config = Margay::Configuration.new(**settings)
    assert_equal [3, 3, ["tcp://0.0.0.0:3000"]], [config.min_threads, config.max_threads, config.binds]
    assert_equal "margay: config/puma.rb:4: 'plugin' is a Puma setting Margay does not have " \
                 "(Puma plugins do not load into Margay); ignored\n", err
  end

  def test_cluster_puma_rb_maps_settings_and_warns_once_per_unsupported_line
    settings = nil
    _, err = capture_io { settings = evaluate(CLUSTER) }
    config = Margay::Configuration.new(**settings)
    assert_equal [4, 2, 8, true], [config.workers, config.min_threads, config.max_threads, config.preload_app?]
    assert_equal [30, 20, 15, 25, 500],
                 [config.worker_timeout, config.keepalive_timeout, config.header_timeout, config.shutdown_timeout,
                  config.refork_after]
    assert_equal %i[before_fork before_worker_boot before_worker_shutdown before_restart].sort, config.hooks.keys.sort
    lines = err.lines
    assert_equal 3, lines.size, err
    assert_match(/config\/puma\.rb:15: 'stdout_redirect' is a Puma setting/, lines[0])
    assert_match(/config\/puma\.rb:16: 'activate_control_app'/, lines[1])
    assert_match(/config\/puma\.rb:17: 'lowlevel_error_handler'/, lines[2])
  end

  # Serving plain HTTP where TLS was asked for is never right: until Margay
  # speaks TLS, ssl_bind stops the start with one line naming the file and line.
  def test_ssl_bind_refuses_to_start
    error = assert_raises(Margay::ConfigError) do
      evaluate(%(bind "tcp://0.0.0.0:3000"\nssl_bind "0.0.0.0", "9443", key: "k.pem", cert: "c.pem"\n))
    end
    assert_match(/config\/puma\.rb:2: ssl_bind: Margay does not speak TLS yet, and will not serve plain HTTP/, error.message)
  end
end
