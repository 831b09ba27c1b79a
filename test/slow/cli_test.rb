# frozen_string_literal: true

require "test_helper"
require_relative "support/child_output"
require "json"
require "net/http"
require "fileutils"
require "open3"
require "tmpdir"

# The real executable: `bundle exec exe/margay`, port learnt from the banner,
# requests over TCP, TERM/INT, exit statuses and the pidfile.
class SlowCLITest < Minitest::Test
  include ChildOutput

  ROOT = File.expand_path("../..", __dir__)
  EXE = File.join(ROOT, "exe", "margay")
  ENV_FOR_CHILD = { "BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile"), "RACK_ENV" => nil, "RAILS_ENV" => nil }.freeze

  # The app tells the test on stdout when a slow request has started, so the
  # test can signal the server while that request is in flight.
  APP = <<~'RUBY'
    run lambda { |env|
      case env["PATH_INFO"]
      when "/slow"
        $stdout.puts "app: slow request started"
        sleep 0.5
        [200, { "content-type" => "text/plain" }, ["slow done"]]
      when "/block"
        $stdout.puts "app: blocking request started"
        sleep 60
        [200, {}, []]
      else
        [200, { "content-type" => "text/plain" }, ["env=#{ENV['RACK_ENV']}"]]
      end
    }
  RUBY

  def setup
    @dir = Dir.mktmpdir("margay-slow-cli-")
    File.write(File.join(@dir, "app.ru"), APP)
    @pid = nil
    @output = +""
  end

  def teardown
    kill_child
  ensure
    FileUtils.remove_entry(@dir)
  end

  # Start the executable in @dir with +args+; returns after it is spawned.
  def spawn_margay(*args)
    spawn_child(ENV_FOR_CHILD, "bundle", "exec", EXE, *args, chdir: @dir)
  end

  def port_from_banner
    wait_for_line(%r{Listening on tcp://127\.0\.0\.1:(\d+)})[1].to_i
  end

  def serving_on?(path)
    UNIXSocket.open(path) do |s|
      s.write("GET / HTTP/1.0\r\n\r\n")
      s.read.start_with?("HTTP/1.1 200")
    end
  rescue SystemCallError
    false
  end

  def get(port, path)
    Net::HTTP.start("127.0.0.1", port, open_timeout: 5, read_timeout: 10) { |http| http.get(path) }
  end

  def run_margay(*args)
    Open3.capture3(ENV_FOR_CHILD, "bundle", "exec", EXE, *args, chdir: @dir)
  end

  def test_serves_the_rackup_file_and_stops_gracefully_on_term
    pidfile = File.join(@dir, "margay.pid")
    spawn_margay("-b", "tcp://127.0.0.1:0", "-e", "production", "-t", "1:3", "--pidfile", pidfile, "app.ru")
    port = port_from_banner
    assert_match(/Margay #{Regexp.escape(Margay::VERSION)}/, @output)
    assert_match(/Environment: production/, @output)
    assert_match(/Threads: 1:3/, @output)
    assert_equal @pid, File.read(pidfile).to_i, "pidfile holds the server's pid"

    response = get(port, "/")
    assert_equal "200", response.code
    assert_equal "env=production", response.body, "RACK_ENV is set from -e"

    slow = Thread.new { get(port, "/slow") }
    wait_for_line(/app: slow request started/)
    Process.kill("TERM", @pid)
    assert_equal "slow done", slow.value.body, "the request in flight finishes after TERM"

    status = wait_exit
    assert status.success?, "exit status #{status.inspect}; output:\n#{@output}"
    refute File.exist?(pidfile), "pidfile removed on exit"
    assert_match(/SIGTERM received: stopping gracefully/, @output)
    assert_raises(Errno::ECONNREFUSED) { TCPSocket.new("127.0.0.1", port) }
  end

  def test_fiber_mode_from_the_command_line
    spawn_margay("-b", "tcp://127.0.0.1:0", "--fibers", "--max-in-flight", "50", "-t", "1:1", "app.ru")
    port = port_from_banner
    assert_match(/Fibers: a fiber per request, at most 50 in flight/, @output)
    assert_equal "200", get(port, "/").code

    Process.kill("TERM", @pid)
    assert wait_exit.success?, @output
  end

  def test_demo_app_without_config_ru_and_int_stops
    File.delete(File.join(@dir, "app.ru"))
    spawn_margay("-b", "tcp://127.0.0.1:0", "--log-requests")
    port = port_from_banner
    assert_match(/built-in demo app \(no config\.ru/, @output)

    page = get(port, "/")
    assert_equal "200", page.code
    assert_includes page.body, "Margay #{Margay::VERSION}"
    stats = JSON.parse(get(port, "/stats.json").body)
    assert_operator stats.dig("stats", "requests"), :>=, 2
    assert_equal ["tcp://127.0.0.1:#{port}"], stats["addresses"]
    wait_for_line(%r{"GET /stats\.json HTTP/1\.1" 200}) # --log-requests

    Process.kill("INT", @pid)
    assert wait_exit.success?, @output
  end

  def test_second_int_forces_exit
    pidfile = File.join(@dir, "margay.pid")
    spawn_margay("-b", "tcp://127.0.0.1:0", "--pidfile", pidfile, "app.ru")
    port = port_from_banner
    blocked = Thread.new do
      get(port, "/block")
    rescue StandardError => e
      e
    end
    wait_for_line(/app: blocking request started/)
    Process.kill("INT", @pid)
    wait_for_line(/SIGINT received/)
    Process.kill("INT", @pid)
    status = wait_exit(timeout: 10)
    assert_equal Margay::Launcher::FORCED_EXIT_STATUS, status.exitstatus, @output
    refute File.exist?(pidfile), "pidfile removed on a forced exit too"
    blocked.join(10)
  end

  def test_usage_errors_exit_64_with_one_message
    [
      [["--bogus"], /invalid option: --bogus/],
      [["-t", "many"], /threads must be MIN:MAX or N/],
      [["-b", "tcp://127.0.0.1:0", "missing.ru"], /rackup file missing\.ru not found/],
      [["-C", "nope.rb"], /config file nope\.rb not found/]
    ].each do |args, pattern|
      out, err, status = run_margay(*args)
      assert_equal 64, status.exitstatus, "#{args.inspect}: #{err}"
      assert_match pattern, err
      assert_equal "", out
      refute_match(/\.rb:\d+:in /, err, "no backtrace for #{args.inspect}")
    end
  end

  def test_config_file_error_exits_64
    File.write(File.join(@dir, "bad.rb"), "threads 1, 2\nworker_count 4\n")
    _, err, status = run_margay("-C", "bad.rb")
    assert_equal 64, status.exitstatus
    assert_equal "margay: bad.rb:2: unknown setting 'worker_count'\n", err
  end

  def test_port_in_use_exits_64
    taken = TCPServer.new("127.0.0.1", 0)
    _, err, status = run_margay("-b", "tcp://127.0.0.1:#{taken.local_address.ip_port}", "app.ru")
    assert_equal 64, status.exitstatus
    assert_match(/margay: cannot bind/, err)
  ensure
    taken&.close
  end

  def test_app_that_raises_while_loading_exits_1_with_its_backtrace
    File.write(File.join(@dir, "broken.ru"), "raise 'config.ru is broken'\n")
    _, err, status = run_margay("-b", "tcp://127.0.0.1:0", "broken.ru")
    assert_equal 1, status.exitstatus
    assert_match(/cannot load broken\.ru: RuntimeError: config\.ru is broken/, err)
    assert_match(/broken\.ru:1/, err, "the app's own backtrace helps here")
  end

  # A Procfile line written for Puma 8: -v is --log-requests (it printed the
  # version and exited 0 before), -p listens dual stack on [::] like Puma.
  def test_a_puma_procfile_line_serves_and_logs_requests
    skip "no IPv6 on this machine" unless Margay::Configuration::DEFAULT_HOST == "::"
    spawn_margay("-v", "-p", "0", "-t", "1:2", "app.ru")
    port = wait_for_line(%r{Listening on tcp://\[::\]:(\d+)})[1].to_i
    assert_equal "200", get(port, "/v4").code, "IPv4 clients reach the [::] listener"
    response = Net::HTTP.start("::1", port) { |http| http.get("/v6") }
    assert_equal "200", response.code
    wait_for_line(%r{GET /v6})
    assert_match(%r{GET /v4}, @output, "-v logs every request, as Puma's --log-requests")
    Process.kill("TERM", @pid)
    assert wait_exit.success?, @output
  end

  # -s: nothing on stdout, Puma's --silent.
  def test_silent_prints_nothing_on_stdout
    sock = File.join(@dir, "s.sock")
    spawn_child(ENV_FOR_CHILD, "bundle", "exec", EXE, "-s", "-b", "unix://#{sock}", "app.ru", chdir: @dir, err: File::NULL)
    deadline = Margay::Clock.now + 20
    until serving_on?(sock) # the signal handlers are in place once it serves
      flunk "margay -s did not serve within 20 s" if Margay::Clock.now > deadline
      sleep 0.05
    end
    Process.kill("TERM", @pid)
    assert wait_exit.success?
    assert_equal "", @output
  end

  # `gem "margay", path:` on a checkout nobody compiled: one line saying
  # what to run, not a LoadError backtrace.
  def test_an_uncompiled_checkout_says_what_to_run
    Dir.mktmpdir("margay-checkout-") do |checkout|
      FileUtils.cp_r(%w[lib exe Rakefile margay.gemspec].map { |f| File.join(ROOT, f) }, checkout)
      Dir[File.join(checkout, "lib", "**", "*.{so,bundle}")].each { |f| File.delete(f) }
      out, err, status = Open3.capture3({ "RUBYOPT" => nil, "BUNDLE_GEMFILE" => nil, "BUNDLER_SETUP" => nil },
                                        RbConfig.ruby, File.join(checkout, "exe", "margay"), "-b", "tcp://127.0.0.1:0",
                                        chdir: @dir)
      assert_equal 69, status.exitstatus, err
      assert_equal "", out
      assert_equal 1, err.lines.size, err
      assert_match(/\Amargay: the native extension is not built: run `bundle install && bundle exec rake compile` in #{Regexp.escape(checkout)}/, err)
    end
  end

  # A Puma config at config/puma.rb is read without -C, as Puma reads it.
  def test_config_puma_rb_is_read_by_default
    Dir.mkdir(File.join(@dir, "config"))
    File.write(File.join(@dir, "config", "puma.rb"), "threads 2, 3\nbind 'tcp://127.0.0.1:0'\nplugin :tmp_restart\n")
    spawn_margay("app.ru")
    port_from_banner
    assert_match(/Threads: 2:3/, @output)
    Process.kill("TERM", @pid)
    assert wait_exit.success?, @output
  end
end
