# frozen_string_literal: true

require_relative "../support/cluster_process"

# Every hook at Puma's moment, in Puma's process, with Puma's arguments, in
# a real cluster: each hook prints "HOOK name pid arg" and the test reads the
# order and the pids from the log.
class ClusterHooksTest < Minitest::Test
  include ClusterProcess

  CONFIG = <<~'RUBY'
    $stdout.sync = true
    def say(name, arg = nil) = puts("HOOK #{name} #{Process.pid} #{arg.inspect}")
    preload_app!
    before_fork { |x| say(:before_fork, x) }
    before_worker_fork { |i| say(:before_worker_fork, i) }
    after_worker_fork { |i| say(:after_worker_fork, i) }
    on_worker_boot(:k) { |i, data| data[:boot] = i; say(:before_worker_boot, i) }
    on_worker_shutdown(:k) { |i, data| say(:before_worker_shutdown, [i, data[:boot]]) }
    after_worker_shutdown { |w| say(:after_worker_shutdown, [w.index, w.pid, w.process_status&.success?]) }
    on_restart { |launcher| say(:before_restart, launcher.class.name) }
    on_refork { say(:before_refork) }
    after_refork { say(:after_refork) }
    on_thread_start { |control| say(:before_thread_start, control.max_threads) }
    after_booted { say(:after_booted) }
    after_stopped { say(:after_stopped) }
    out_of_band { say(:out_of_band) }
    after_booted { raise "a failing hook" }
  RUBY

  def start
    @dir = Dir.mktmpdir("margay-hooks-")
    File.write(File.join(@dir, "margay.rb"), CONFIG)
    spawn_master("-w", "2", "-t", "1:3", "-b", "tcp://127.0.0.1:0", "-C", File.join(@dir, "margay.rb"), APP)
    wait_for_listening
    wait_for_log(/HOOK after_booted/)
  end

  # [[name, pid, arg], ...] in log order.
  def hooks
    log_text.scan(/^HOOK (\w+) (\d+) (.*)$/).map { |name, pid, arg| [name.to_sym, pid.to_i, arg] }
  end

  def named(name)
    hooks.select { |h| h[0] == name }
  end

  def test_boot_order_and_processes
    start
    seen = hooks
    names = seen.map(&:first)
    assert_equal [[:before_fork, @master, "nil"]], named(:before_fork), "once, in the master, before any fork"
    assert_equal 0, names.index(:before_fork)
    %i[before_worker_fork after_worker_fork].each do |name|
      assert_equal [[name, @master, "0"], [name, @master, "1"]], named(name).sort_by(&:last), name
    end
    assert names.index(:before_worker_fork) < names.index(:after_worker_fork)
    boots = named(:before_worker_boot)
    assert_equal %w[0 1], boots.map(&:last).sort
    assert_equal worker_pids.sort, boots.map { |h| h[1] }.sort, "before_worker_boot runs in the workers"
    assert named(:before_thread_start).all? { |h| worker_pids.include?(h[1]) && h[2] == "3" }
    assert_equal [[:after_booted, @master, "nil"]], named(:after_booted), "once every worker booted"
    assert_match(/after_booted hook failed: RuntimeError: a failing hook/, log_text)
    assert_equal 2, boots.size, "the master survived the failing hook and started no worker more"

    get = raw_exchange(@port, "GET /pid HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 10)
    server = get[/\r\n\r\n(\d+)/, 1].to_i
    wait_for_log(/HOOK out_of_band #{server}/)
  end

  def test_shutdown_restart_and_stop
    start
    workers = named(:before_worker_boot).to_h { |h| [h[2].to_i, h[1]] }
    Process.kill(:TTOU, @master) # the youngest (last started) worker stops
    wait_for_log(/HOOK after_worker_shutdown/)
    down = named(:before_worker_shutdown).first
    index = down[2][/\[(\d+)/, 1].to_i
    assert_equal [workers[index], "[#{index}, #{index}]"], [down[1], down[2]], "in the worker, with its key's data"
    assert_equal [[:after_worker_shutdown, @master, "[#{index}, #{workers[index]}, true]"]], named(:after_worker_shutdown)

    Process.kill(:USR2, @master)
    wait_for_log(/HOOK before_restart/)
    wait_for_log(/HOOK after_booted/, count: 2)
    restart = named(:before_restart)
    assert_equal [[:before_restart, @master, '"Margay::Launcher"']], restart, "in the master (same pid: exec)"
    names = hooks.map(&:first)
    assert names.rindex(:after_worker_shutdown) < names.index(:before_restart), "the workers are gone first"
    assert_equal 2, named(:before_fork).size, "the new master runs before_fork again"

    stop_cluster
    assert_equal [@master], named(:after_stopped).map { |h| h[1] }
    assert_equal :after_stopped, hooks.last.first
  end

  def test_refork_hooks_run_in_the_mold
    start
    Process.kill(:URG, @master)
    wait_for_log(/HOOK after_refork/)
    wait_for_log(/serves again/)
    refork = named(:before_refork)
    assert_equal 1, refork.size
    mold = refork.first[1]
    assert_includes named(:before_worker_boot).map { |h| h[1] }, mold, "the mold was a worker"
    forks = named(:before_worker_fork).select { |h| h[1] == mold }
    assert_equal 1, forks.size, "the mold runs the fork hooks for the worker it forks (it is the other one)"
    assert_equal [[:after_refork, mold, "nil"]], named(:after_refork), "once, as Puma's worker 0, before serving again"
    names = hooks.map(&:first)
    assert_operator names.rindex(:after_worker_fork), :<, names.index(:after_refork)
    assert_equal 1, named(:before_worker_boot).count { |h| h[1] == mold }, "serving again is no new boot"
  end

  def test_without_preload_before_worker_boot_runs_before_the_app_loads
    @dir = Dir.mktmpdir("margay-hooks-")
    File.write(File.join(@dir, "margay.rb"), "$stdout.sync = true\npreload_app false\n" \
                                             "on_worker_boot { |i| puts \"HOOK before_worker_boot \#{Process.pid} \#{i}\" }\n")
    spawn_master("-w", "1", "-b", "tcp://127.0.0.1:0", "-C", File.join(@dir, "margay.rb"),
                 File.expand_path("../support/single_app.ru", __dir__))
    wait_for_log(/booted/)
    pid = named(:before_worker_boot).first[1]
    assert_operator log_text.index("HOOK before_worker_boot #{pid}"), :<, log_text.index("APP loaded in #{pid}")
  end
end
