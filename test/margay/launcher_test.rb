# frozen_string_literal: true

require "test_helper"
require "margay/launcher"
require "open3"

# What both modes share, in the launcher: which app it serves and how the
# banner names it, and the pidfile (written, and removed only while it is ours).
class LauncherTest < Minitest::Test
  def launcher(rackup_given: false, app: nil, **settings)
    config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], silent: true, **settings)
    Margay::Launcher.new(config, log: Margay::Log.new(quiet: true), app: app, app_name: "given", rackup_given: rackup_given)
  end

  def in_tmpdir(&)
    Dir.mktmpdir { |dir| Dir.chdir(dir, &) }
  end

  def test_a_given_app_is_served_under_its_name
    app = ->(_env) { [200, {}, []] }
    assert_equal [app, "given"], launcher(app: app).load_app
  end

  def test_the_config_files_app_is_served_when_no_app_is_given
    app = ->(_env) { [200, {}, []] }
    config = Margay::Configuration.new(app: app)
    served, description = Margay::Launcher.new(config, log: Margay::Log.new(quiet: true)).load_app
    assert_same app, served
    assert_match(/the config's app/, description)
  end

  def test_the_rackup_file_is_loaded
    in_tmpdir do
      File.write("config.ru", "run ->(_env) { [200, {}, ['ok']] }\n")
      app, description = launcher.load_app
      assert_equal "config.ru", description
      assert_equal 200, app.call({}).first
    end
  end

  # In a fresh Ruby (this one has everything loaded): the rackup file uses
  # Rack::Utils without requiring it, as it could when Margay's control app
  # loaded it in every process.
  def test_a_rackup_file_finds_rack_utils_loaded
    skip_on_jruby "the jruby-jars JRuby has no executable to spawn (RbConfig.ruby)"
    in_tmpdir do
      File.write("config.ru", "run ->(_env) { [200, {}, [Rack::Utils.escape_html('<ok>')]] }\n")
      script = 'require "margay"; require "margay/launcher"; ' \
               'config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], silent: true); ' \
               'app, = Margay::Launcher.new(config, log: Margay::Log.new(quiet: true)).load_app; print app.call({})[2].join'
      out, err, status = Open3.capture3(RbConfig.ruby, "-I", File.expand_path("../../lib", __dir__), "-e", script)
      assert status.success?, err
      assert_equal "&lt;ok&gt;", out
    end
  end

  def test_no_rackup_file_serves_the_demo_app_unless_one_was_named
    in_tmpdir do
      app, description = launcher.load_app
      assert_kind_of Margay::DemoApp, app
      assert_match(/built-in demo app \(no config.ru in /, description)
      error = assert_raises(Margay::ConfigError) { launcher(rackup_given: true).load_app }
      assert_equal "rackup file config.ru not found", error.message
    end
  end

  def test_a_rackup_file_that_raises_is_an_app_load_error
    in_tmpdir do
      File.write("config.ru", "raise 'boom'\n")
      error = assert_raises(Margay::AppLoadError) { launcher.load_app }
      assert_equal "cannot load config.ru", error.message
    end
  end

  def test_the_pidfile_is_removed_only_while_it_is_ours
    in_tmpdir do
      ours = launcher(pidfile: "margay.pid")
      ours.write_pidfile
      assert_equal "#{Process.pid}\n", File.read("margay.pid")
      ours.remove_pidfile
      refute File.exist?("margay.pid")

      ours.write_pidfile
      File.write("margay.pid", "1\n") # a newer process wrote its own
      ours.remove_pidfile
      assert_equal "1\n", File.read("margay.pid")
    end
  end

  def test_nothing_to_restart_or_stop_before_running
    assert_equal [false, false, nil], [launcher.restart, launcher.phased_restart, launcher.stop]
  end
  # JRuby has no fork: `workers N` warns and serves in one process, as Puma does there.
  def test_workers_on_jruby_warn_and_serve_in_one_process
    skip "MRI forks: workers N runs a cluster there (test/slow/cluster_test.rb)" unless Margay::OnJRuby::JRUBY
    out = StringIO.new
    config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], workers: 2)
    app = ->(_env) { [200, { "content-type" => "text/plain" }, ["one process"]] }
    launcher = Margay::Launcher.new(config, log: Margay::Log.new(out: out, err: out), app: app, app_name: "given")
    bound = Queue.new
    thread = Thread.new { launcher.run { |server| bound << server } }
    port = Timeout.timeout(30) { bound.pop }.addresses.first[/:(\d+)\z/, 1].to_i
    sock = TCPSocket.new("127.0.0.1", port)
    sock.write("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert_match(%r{\AHTTP/1.1 200 OK\r\n.*\r\n\r\none process\z}m, sock.read)
    assert_match(/workers 2 ignored: jruby cannot fork; serving in a single process/, out.string)
  ensure
    sock&.close
    launcher&.stop
    assert thread.join(10), "the launcher stopped" if thread
  end
end
