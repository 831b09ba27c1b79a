# frozen_string_literal: true

require "test_helper"
require_relative "../support/child_env"
require_relative "../../support/processes"
require "socket"
require "tmpdir"
require "fileutils"

# Single-mode signals side by side with Puma 8 (bench/Gemfile), same app,
# same config file: USR2 and USR1 while a request runs (it completes, the
# same pid serves again on the same port), then HUP (a graceful stop, exit 0).
class SignalsVsPumaTest < Minitest::Test
  include ChildEnv
  include Margay::TestHelper

  ROOT = File.expand_path("../../..", __dir__)
  APP = <<~'RUBY'
    $stdout.sync = true
    run lambda { |env|
      if env["PATH_INFO"] == "/slow"
        puts "slow request"
        sleep 1
      end
      [200, { "content-type" => "text/plain" }, [Process.pid.to_s]]
    }
  RUBY

  def setup
    @dir = Dir.mktmpdir("margay-signals-vs-puma-")
    File.write(File.join(@dir, "app.ru"), APP)
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  def get(port, path)
    raw_exchange(port, "GET #{path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 10)
  end

  # What a user sees: [status of the request in flight, same pid after the restart, ...] per signal, then HUP's exit.
  def outcomes(env, *command)
    port = free_port
    File.write(File.join(@dir, "server.rb"), "bind 'tcp://127.0.0.1:#{port}'\nworkers 0\n")
    server = Margay::TestProcess.new(env, *command, "-C", "server.rb", "app.ru",
                                     chdir: @dir, in: File::NULL, unsetenv_others: !env.empty?).start
    wait = lambda do |pattern, count = 1|
      server.wait_for(pattern, count: count, timeout: 30)
      assert_operator server.output.scan(pattern).size, :>=, count, -> { server.output }
    end
    wait.call(/Listening on|Inherited tcp/)
    results = %i[USR2 USR1].each_with_index.map do |signal, i|
      slow = Thread.new { get(port, "/slow") }
      wait.call(/slow request/, i + 1)
      Process.kill(signal, server.pid)
      in_flight = slow.value[/\AHTTP\/1.1 (\d+)/, 1]
      wait.call(/Listening on|Inherited tcp/, i + 2) # Puma names an inherited socket so
      [signal, in_flight, get(port, "/").end_with?(server.pid.to_s)]
    end
    Process.kill(:HUP, server.pid)
    status = server.wait_exit(timeout: 30)
    assert status, -> { "#{command.first(3)} did not stop on HUP:\n#{server.output}" }
    results << [:HUP, status.exitstatus]
  ensure
    server&.kill
  end

  def test_single_mode_signals_as_puma
    puma_env = clean_env.merge("BUNDLE_GEMFILE" => File.join(ROOT, "bench", "Gemfile"))
    skip "the bench bundle is not installed" unless system(puma_env, "bundle", "check", chdir: ROOT, %i[out err] => File::NULL)
    puma = outcomes(puma_env, "bundle", "exec", "puma")
    margay = outcomes({}, RbConfig.ruby, File.join(ROOT, "exe/margay"))
    assert_equal [[:USR2, "200", true], [:USR1, "200", true], [:HUP, 0]], puma
    assert_equal puma, margay
  end
end
