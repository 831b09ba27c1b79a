# frozen_string_literal: true

require_relative "../support/cluster_process"

# Puma's operational settings at run time, in a real process built from a
# Configuration (support/launch.rb): stdout/stderr redirects and HUP,
# the process title and tag, directory, idle_timeout, restart_command,
# lowlevel_error_handler, log_formatter, custom_logger, app.
class SingleSettingsTest < Minitest::Test
  include ClusterProcess

  APP = File.expand_path("../support/single_app.ru", __dir__)
  LAUNCH = File.expand_path("../support/launch.rb", __dir__)

  def start(settings, wait: true)
    @dir ||= Dir.mktmpdir("margay-settings-")
    spawn_process({ "MARGAY_TEST_SETTINGS" => settings }, RbConfig.ruby, LAUNCH, APP)
    wait_for_listening if wait
  end

  # The banner went to the redirected stdout: read the port from there.
  def wait_for_listening_in(path)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 20
    until (port = File.exist?(path) && File.read(path)[%r{Listening on tcp://127\.0\.0\.1:(\d+)}, 1])
      flunk "no banner in #{path}; log:\n#{log_text}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.02
    end
    @port = port.to_i
  end

  def get(path)
    raw_exchange(@port, "GET #{path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 10)
  end

  def test_redirects_at_start_and_hup_reopens_them
    @dir = Dir.mktmpdir("margay-settings-")
    out, err = File.join(@dir, "out.log"), File.join(@dir, "err.log")
    File.write(out, "old line\n")
    start("{ redirect_stdout: #{out.inspect}, redirect_stderr: #{err.inspect} }", wait: false)
    wait_for_listening_in(out)
    refute_match(/old line/, File.read(out), "redirect_append false: truncated")
    get("/say?one")
    wait_for_file(out, /app stdout one/)
    wait_for_file(err, /app stderr one/)
    File.rename(out, "#{out}.1") # logrotate
    File.rename(err, "#{err}.1")
    Process.kill(:HUP, @master)
    wait_for_reopen(@master, out => 1, err => 2)
    get("/say?two")
    wait_for_file(out, /app stdout two/)
    wait_for_file(err, /app stderr two/)
    assert @process.alive?, "HUP with redirects does not stop"
    Process.kill(:USR2, @master) # the restarted process appends to the files
    wait_for_file(out, /Listening on/)
    assert_match(/app stdout two/, File.read(out))
    assert_predicate stop_cluster, :success?
  end

  # HUP when the redirected file cannot be opened (its directory gone): said
  # on the old file, which the output keeps (IO#reopen(path) used to close
  # stdout first, losing every later line); once the directory is back, HUP
  # reopens.
  def test_hup_with_a_log_that_cannot_be_reopened_keeps_the_output
    logs, out = make_logs_dir("margay-settings-")
    start("{ redirect_stdout: #{out.inspect}, redirect_stderr: #{out.inspect} }", wait: false)
    wait_for_listening_in(out)
    File.rename(logs, "#{logs}.1")
    Process.kill(:HUP, @master)
    wait_for_file("#{logs}.1/out.log", /HUP: could not reopen the redirected logs/)
    get("/say?kept")
    wait_for_file("#{logs}.1/out.log", /app stdout kept/)
    wait_for_file("#{logs}.1/out.log", /app stderr kept/)
    Dir.mkdir(logs)
    Process.kill(:HUP, @master)
    wait_for_reopen(@master, out => 1)
    get("/say?new")
    wait_for_file(out, /app stdout new/)
    assert_predicate stop_cluster, :success?
  end

  def test_title_directory_and_tag
    @dir = Dir.mktmpdir("margay-settings-")
    app_dir = File.join(@dir, "app")
    Dir.mkdir(app_dir)
    start("{ tag: 'shop', directory: #{app_dir.inspect} }")
    assert_equal "#{@master} #{File.realpath(app_dir)}", get("/")[/\r\n\r\n(.*)\z/m, 1]
    title = File.read("/proc/#{@master}/cmdline").tr("\0", " ").strip
    assert_equal "margay #{Margay::VERSION} (tcp://127.0.0.1:#{@port}) [shop]", title
  end

  def test_idle_timeout_stops_gracefully
    start("{ idle_timeout: 1 }")
    get("/")
    assert_predicate master_exit(10, "still running after idle_timeout"), :success?
    assert_match(/no request for 1s \(idle_timeout\): stopping/, log_text)
  end

  def test_restart_command_is_what_a_hot_restart_runs
    @dir = Dir.mktmpdir("margay-settings-")
    marker = File.join(@dir, "restarted")
    script = File.join(@dir, "restart.rb")
    File.write(script, "File.write(#{marker.inspect}, Process.pid.to_s)\nload #{LAUNCH.inspect}\n")
    start("{ restart_command: #{"#{RbConfig.ruby} #{script}".inspect} }")
    Process.kill(:USR2, @master)
    wait_for_log(/Listening on/, count: 2)
    assert_equal @master.to_s, File.read(marker)
  end

  def test_lowlevel_error_handler_log_formatter_and_custom_logger
    handler = "->(error, env, status) { [503, { 'x-handled' => env['PATH_INFO'] }, [\"#{'#{error.message} #{status}'}\"]] }"
    start("{ lowlevel_error_handler: #{handler}, log_formatter: ->(line) { \"[fmt] \#{line}\" } }")
    response = get("/boom")
    assert_match(%r{\AHTTP/1.1 503}, response)
    assert_match(%r{x-handled: /boom}, response)
    assert response.end_with?("boom 500")
    assert_match(/^\[fmt\] \* Listening on/, log_text)
    wait_for_log(/^\[fmt\] ERROR: app error for GET \/boom/) # the log line may follow the response
  end

  def test_a_raising_lowlevel_error_handler_gives_the_plain_500
    start("{ lowlevel_error_handler: ->(_e) { raise 'handler down' }, environment: 'production' }")
    assert_match(%r{\AHTTP/1.1 500}, get("/boom"))
    wait_for_log(/lowlevel_error_handler raised: RuntimeError: handler down/)
  end

  def test_custom_logger_receives_the_server_log_and_app_replaces_the_rackup_file
    start("{ custom_logger: Class.new { def write(s) = $stdout.write(\"[custom] \#{s}\") }.new, " \
          "app: ->(_env) { [200, {}, ['from the app setting']] } }")
    assert_match(/\A\[custom\] Margay .* pid #{@master}\n/, log_text)
    assert get("/").end_with?("from the app setting")
  end

  def test_single_mode_runs_the_launcher_hooks_and_warns_about_cluster_ones
    start("{ hooks: { before_fork: [-> { puts 'RAN before_fork' }], after_booted: [-> { puts \"BOOTED \#{Process.pid}\" }], " \
          "after_stopped: [-> { puts 'STOPPED' }] } }")
    wait_for_log(/BOOTED #{@master}/)
    assert_match(/WARN: the before_fork hook only runs in cluster mode/, log_text)
    assert_predicate stop_cluster, :success?
    assert_match(/STOPPED\n\z/, log_text)
    refute_match(/RAN before_fork/, log_text)
  end
end
