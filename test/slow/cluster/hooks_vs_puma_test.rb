# frozen_string_literal: true

require "test_helper"
require_relative "../support/child_env"
require_relative "../../support/processes"
require "tmpdir"
require "fileutils"

# The same config/puma.rb under Puma 8 (bench/Gemfile) and under Margay: the
# hooks run in the same order, in the same processes (master or worker),
# with the same arguments, from boot through TTOU to TERM.
class HooksVsPumaTest < Minitest::Test
  include ChildEnv
  include Margay::TestHelper

  ROOT = File.expand_path("../../..", __dir__)

  CONFIG = <<~'RUBY'
    $stdout.sync = true
    def say(name, arg = nil) = puts("HOOK #{name} #{Process.pid} #{arg.inspect}")
    workers 2
    preload_app!
    bind "tcp://127.0.0.1:0"
    before_fork { |x| say(:before_fork, x) }
    on_worker_fork { |i| say(:before_worker_fork, i) }
    after_worker_fork { |i| say(:after_worker_fork, i) }
    on_worker_boot(:k) { |i, data| data[:boot] = i; say(:before_worker_boot, i) }
    on_worker_shutdown(:k) { |i, data| say(:before_worker_shutdown, [i, data[:boot]]) }
    after_worker_shutdown { |w| say(:after_worker_shutdown, [w.index, w.pid, w.process_status&.success?]) }
    after_booted { say(:after_booted) }
    after_stopped { say(:after_stopped) }
  RUBY

  def setup
    @dir = Dir.mktmpdir("margay-vs-puma-")
    File.write(File.join(@dir, "puma.rb"), CONFIG)
    File.write(File.join(@dir, "app.ru"), "run ->(_env) { [200, {}, ['ok']] }\n")
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  # Boot, TTOU, TERM; returns [[hook, "master"/"worker", arg with pids as PID], ...].
  def run_server(env, *command)
    server = Margay::TestProcess.new(env, *command, chdir: @dir, in: File::NULL, unsetenv_others: !env.empty?).start
    master = server.pid
    wait = lambda do |pattern|
      server.wait_for(pattern, timeout: 30)
      assert_match pattern, server.output
    end
    wait.call(/HOOK after_booted/)
    Process.kill(:TTOU, master)
    wait.call(/HOOK after_worker_shutdown/)
    Process.kill(:TERM, master)
    assert server.wait_exit(timeout: 30), "#{command.last(3)} did not stop"
    server.output.scan(/^HOOK (\w+) (\d+) (.*)$/).map do |name, pid, arg|
      [name, pid.to_i == master ? "master" : "worker", arg.gsub(/\b\d{3,}\b/, "PID")]
    end
  ensure
    server&.kill
  end

  # The master's hooks in order; the workers' as a sorted list (two workers boot in either order).
  def shape(events)
    [events.select { |e| e[1] == "master" }, events.select { |e| e[1] == "worker" }.sort]
  end

  def test_same_hooks_same_processes_same_order_as_puma
    puma_env = clean_env.merge("BUNDLE_GEMFILE" => File.join(ROOT, "bench", "Gemfile"))
    skip "the bench bundle is not installed" unless system(puma_env, "bundle", "check", chdir: ROOT, %i[out err] => File::NULL)
    puma = run_server(puma_env, "bundle", "exec", "puma", "-C", "puma.rb", "app.ru")
    margay = run_server({}, RbConfig.ruby, File.join(ROOT, "exe/margay"), "-C", "puma.rb", "app.ru")
    assert_equal shape(puma), shape(margay)
    assert_equal 13, puma.size, puma.inspect # what the comparison covers
  end
end
