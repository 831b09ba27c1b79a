# frozen_string_literal: true

require "test_helper"
require_relative "support/child_env"
require_relative "support/child_output"
require "net/http"
require "open3"
require "tmpdir"

# Margay on JRuby 9.4 (the pure-Ruby engine) behind the two ways a Rack app is
# usually started: a Rails 7.2 app with Active Record on SQLite through JDBC
# (test/fixtures/rails_jruby_app) under `bin/rails server -u margay`, and a
# config.ru under `rackup -s margay`. Each runs through .ci/jruby, which installs
# JRuby and the bundle once (under ~/.cache/margay-jruby) and reuses them.
# Skipped where Java is not installed (.ci/run installs it).
class JrubyTest < Minitest::Test
  include ChildEnv
  include ChildOutput

  ROOT = File.expand_path("../..", __dir__)
  JRUBY = File.join(ROOT, ".ci", "jruby")
  RAILS_APP = "test/fixtures/rails_jruby_app"
  # A JVM boots slower than MRI, and Rails on it slower still.
  BOOT = 180

  def setup
    skip "no java on PATH: .ci/jruby needs OpenJDK 17 (.ci/run installs it)" unless executable_in_path?("java")
  end

  def teardown
    kill_child
  end

  def test_rails_server_with_margay_on_jruby
    env = jruby_env("MARGAY_JRUBY_GEMFILE" => RAILS_APP + "/Gemfile")
    install(env)
    Dir.mktmpdir("margay-jruby-rails-") do |tmp|
      env = env.merge("MARGAY_FIXTURE_DB" => File.join(tmp, "fixture.sqlite3"))
      spawn_child(env, JRUBY, "-C", RAILS_APP, "bin/rails", "server", "-u", "margay", "-b", "127.0.0.1", "-p", "0",
                  "-P", File.join(tmp, "server.pid"), chdir: ROOT)
      port = wait_for_line(%r{Listening on tcp://127\.0\.0\.1:(\d+)}, timeout: BOOT)[1].to_i
      assert_match(/=> Booting Margay/, @output)
      assert_match(/App: given by Rails/, @output)

      Net::HTTP.start("127.0.0.1", port, open_timeout: 5, read_timeout: 60) do |http|
        page = http.get("/")
        assert_equal "200", page.code, @output
        assert_match(%r{\AHello from Rails 7\.2\.\d+ on Margay/#{Regexp.escape(Margay::VERSION)} \(jruby, SQLite\)\z},
                     page.body)
        # Each POST writes a row and reads the table back, on one kept-alive connection.
        assert_equal "1 /a", http.post("/visits", "/a", "content-type" => "text/plain").body
        assert_equal "2 /b", http.post("/visits", "/b", "content-type" => "text/plain").body
      end
      assert_equal @pid, File.read(File.join(tmp, "server.pid")).to_i, "the JVM's pid (.ci/jruby execs it)"

      Process.kill("TERM", @pid)
      status = wait_exit(timeout: 60)
      assert status.success?, "rails server exited with #{status.inspect}:\n#{@output}"
      assert_match(/SIGTERM received: stopping gracefully/, @output)
    end
  end

  # Also: JAVA_OPTS reaches the JVM (the app reads back a system property set there).
  def test_rackup_with_margay_on_jruby
    env = jruby_env
    install(env)
    env = env.merge("JAVA_OPTS" => "-Xmx512m -Dmargay.probe=set")
    Dir.mktmpdir("margay-jruby-rackup-") do |dir|
      File.write(File.join(dir, "config.ru"), <<~'RUBY')
        body = ->(env) { "#{env['SERVER_SOFTWARE']} #{RUBY_ENGINE} #{ENV_JAVA['margay.probe']}" }
        run ->(env) { [200, { "content-type" => "text/plain" }, [body.(env)]] }
      RUBY
      spawn_child(env, JRUBY, "-C", dir, "-S", "rackup", "-s", "margay", "-o", "127.0.0.1", "-p", "0",
                  "-O", "Threads=2:4", chdir: ROOT)
      port = wait_for_line(%r{Listening on tcp://127\.0\.0\.1:(\d+)}, timeout: BOOT)[1].to_i
      assert_match(/Threads: 2:4/, @output)

      Net::HTTP.start("127.0.0.1", port, open_timeout: 5, read_timeout: 30) do |http|
        2.times do
          response = http.get("/")
          assert_equal "200", response.code
          assert_equal "Margay/#{Margay::VERSION} jruby set", response.body
        end
      end

      Process.kill("INT", @pid)
      assert wait_exit(timeout: 60).success?, @output
    end
  end

  private

  # This run's environment without its bundle (rake test:slow runs under MRI's),
  # plus +extra+.
  def jruby_env(extra = {})
    clean_env.merge("RACK_ENV" => nil, "RAILS_ENV" => nil).merge(extra)
  end

  # .ci/jruby installs JRuby and the bundle on its first run (minutes on a fresh
  # machine): done here, outside the boot timeout.
  def install(env)
    out, status = Open3.capture2e(env, JRUBY, "-e", "puts RUBY_ENGINE", chdir: ROOT)
    assert status.success?, ".ci/jruby could not install JRuby or its bundle:\n#{out}"
  end
end
