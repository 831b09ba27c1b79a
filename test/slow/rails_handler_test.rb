# frozen_string_literal: true

require "test_helper"
require_relative "support/child_output"
require "digest/sha2" # at load: threads autoloading Digest::SHA256 at once race
require "net/http"
require "open3"
require "tmpdir"

# The rackup handler end to end: a real Rails 7.2 app (test/fixtures/rails_app,
# its own Gemfile, margay by path) under `bin/rails server -u margay`, and a
# plain config.ru under `rackup -s margay`.
#
# The Rails bundle is not part of Margay's; install it once with
#   bundle install --gemfile test/fixtures/rails_app/Gemfile
class RailsHandlerTest < Minitest::Test
  include ChildOutput

  ROOT = File.expand_path("../..", __dir__)
  RAILS_APP = File.join(ROOT, "test", "fixtures", "rails_app")
  RAILS_GEMFILE = File.join(RAILS_APP, "Gemfile")
  CLEAN = { "RUBYOPT" => nil, "BUNDLER_SETUP" => nil, "RACK_ENV" => nil, "RAILS_ENV" => nil }.freeze

  def teardown
    kill_child
  end

  def test_rails_server_with_margay
    skip_unless_rails_bundle
    Dir.mktmpdir("margay-rails-") do |tmp|
      pidfile = File.join(tmp, "server.pid")
      env = CLEAN.merge("BUNDLE_GEMFILE" => RAILS_GEMFILE)
      spawn_child(env, "bin/rails", "server", "-u", "margay", "-b", "127.0.0.1", "-p", "0", "-P", pidfile, chdir: RAILS_APP)
      port = wait_for_line(%r{Listening on tcp://127\.0\.0\.1:(\d+)})[1].to_i
      assert_match(/=> Booting Margay/, @output)
      assert_match(/App: given by Rails/, @output)

      Net::HTTP.start("127.0.0.1", port, open_timeout: 5, read_timeout: 20) do |http|
        page = http.get("/")
        assert_equal "200", page.code, @output
        assert_match(/\AHello from Rails 7\.2\.\d+ on Margay\/#{Regexp.escape(Margay::VERSION)}\z/, page.body)

        body = Random.new(42).bytes(300_000) # above body_buffer_size: goes through the tempfile
        echo = http.post("/echo", body, "content-type" => "application/octet-stream")
        assert_equal "200", echo.code, @output
        assert_equal "#{body.bytesize} #{Digest::SHA256.hexdigest(body)}", echo.body, "same connection, keep-alive"
      end
      assert_equal @pid, File.read(pidfile).to_i

      Process.kill("TERM", @pid)
      status = wait_exit
      assert status.success?, "rails server exited with #{status.inspect}:\n#{@output}"
      assert_match(/SIGTERM received: stopping gracefully/, @output)
    end
  end

  # The app's config/puma.rb (what `rails new` writes) is read by
  # `bin/rails server -u margay`: RAILS_MAX_THREADS counts, and the -p the
  # user typed wins over the file's `port`, as under Puma.
  def test_rails_server_reads_the_apps_config_puma_rb
    skip_unless_rails_bundle
    puma_rb = File.join(RAILS_APP, "config", "puma.rb")
    skip "the fixture has its own config/puma.rb" if File.exist?(puma_rb)
    File.write(puma_rb, <<~RUBY)
      threads_count = ENV.fetch("RAILS_MAX_THREADS", 3)
      threads threads_count, threads_count
      port ENV.fetch("PORT", 3000)
      plugin :tmp_restart
      pidfile ENV["PIDFILE"] if ENV["PIDFILE"]
    RUBY
    wrote = true
    env = CLEAN.merge("BUNDLE_GEMFILE" => RAILS_GEMFILE, "RAILS_MAX_THREADS" => "4", "PORT" => nil)
    spawn_child(env, "bin/rails", "server", "-u", "margay", "-b", "127.0.0.1", "-p", "0", chdir: RAILS_APP)
    port = wait_for_line(%r{Listening on tcp://127\.0\.0\.1:(\d+)})[1].to_i
    assert_match(/Threads: 4:4/, @output)
    assert_equal "200", Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/")).code
    Process.kill("TERM", @pid)
    assert wait_exit.success?, @output
  ensure
    File.delete(puma_rb) if wrote
  end

  def test_rackup_with_margay
    Dir.mktmpdir("margay-rackup-") do |dir|
      File.write(File.join(dir, "config.ru"), <<~'RUBY')
        run ->(env) { [200, { "content-type" => "text/plain" }, ["#{env['SERVER_SOFTWARE']} #{env['rack.multithread']}"]] }
      RUBY
      env = CLEAN.merge("BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile"))
      spawn_child(env, "bundle", "exec", "rackup", "-s", "margay", "-o", "127.0.0.1", "-p", "0", "-O", "Threads=2:4",
            "-O", "header_timeout=5", chdir: dir)
      port = wait_for_line(%r{Listening on tcp://127\.0\.0\.1:(\d+)})[1].to_i
      assert_match(/Threads: 2:4/, @output)

      response = Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/"))
      assert_equal "200", response.code
      assert_equal "Margay/#{Margay::VERSION} true", response.body

      Process.kill("INT", @pid)
      assert wait_exit.success?, @output
    end
  end

  # rackup's default Host in development is localhost: like Puma's handler,
  # Margay then listens on every loopback address (127.0.0.1 and ::1).
  def test_rackup_default_host_listens_on_both_loopbacks
    skip "no ::1 on this machine" unless Socket.ip_address_list.any?(&:ipv6_loopback?)
    Dir.mktmpdir("margay-rackup-") do |dir|
      File.write(File.join(dir, "config.ru"), "run ->(env) { [200, {}, [env['SERVER_NAME'].to_s]] }\n")
      env = CLEAN.merge("BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile"))
      spawn_child(env, "bundle", "exec", "rackup", "-s", "margay", "-p", "0", chdir: dir)
      port = wait_for_line(%r{Listening on tcp://127\.0\.0\.1:(\d+)})[1].to_i
      wait_for_line(%r{Listening on tcp://\[::1\]:#{port}})
      assert_equal "200", Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/")).code
      assert_equal "200", Net::HTTP.start("::1", port) { |http| http.get("/") }.code
      Process.kill("INT", @pid)
      assert wait_exit.success?, @output
    end
  end

  private

  def skip_unless_rails_bundle
    _, status = Open3.capture2e(CLEAN.merge("BUNDLE_GEMFILE" => RAILS_GEMFILE), "bundle", "check", chdir: RAILS_APP)
    return if status.success?

    skip "the Rails fixture bundle is not installed: run `bundle install --gemfile test/fixtures/rails_app/Gemfile`"
  end

end
