# frozen_string_literal: true

require_relative "control_process"

# The puma gem's own pumactl (bench/Gemfile) against Margay's control app,
# single and cluster mode: stats in Puma's shape, gc-stats,
# thread-backtraces, the token, phased-restart, restart and stop, through a
# control URL and through the state file.
class SlowPumactlTest < Minitest::Test
  include ControlProcess

  def test_single_mode_stats_tools_and_stop
    start_margay(control_token: "t0ken", max_threads: 7)
    3.times { assert_equal "pid #{@pid}", get }
    assert_equal({ "pid" => @pid, "control_url" => state["control_url"], "control_auth_token" => "t0ken",
                   "running_from" => @dir }, state)
    url = state["control_url"]

    stats = pumactl_json("-C", url, "-T", "t0ken", "stats")
    assert_equal SINGLE_KEYS, stats.keys
    assert_equal 7, stats["max_threads"]
    assert_equal 3, stats["requests_count"]
    assert_equal stats.keys, pumactl_json("-S", @state, "stats").keys, "the state file leads pumactl there too"
    assert_kind_of Integer, pumactl_json("-S", @state, "gc-stats").fetch("count")
    names = pumactl_json("-S", @state, "thread-backtraces").map { |t| t.fetch("name") }
    assert(names.any? { |n| n.include?("margay control") }, names.inspect)

    out, status = pumactl("-C", url, "-T", "wrong", "stats")
    assert_equal [1, "Unauthorized access to server (wrong auth token)\n"], [status, out]
    out, status = pumactl("-S", @state, "refork")
    assert_equal 1, status
    assert_includes out, "refork not available"

    out, status = pumactl("-S", @state, "stop")
    assert_equal [0, "Command stop sent success\n"], [status, out]
    assert_equal 0, wait_exit
    refute File.exist?(@state), "the state file goes with the process"
  end

  def test_cluster_mode_stats_phased_restart_restart_and_stop
    start_margay(workers: 2, control_url: "unix://#{File.join(@dir, 'ctl.sock')}", control_token: "none")
    assert_equal "unix://#{File.join(@dir, 'ctl.sock')}", state["control_url"]
    4.times { get }
    stats = eventually("every worker checked in") do
      s = pumactl_json("-S", @state, "stats")
      s if s["worker_status"].all? { |w| w["last_status"].any? }
    end
    assert_equal CLUSTER_KEYS, stats.keys
    assert_equal [2, 0, 2, 0], stats.values_at("workers", "phase", "booted_workers", "old_workers")
    stats["worker_status"].each do |w|
      assert_equal WORKER_KEYS, w.keys
      assert_equal LAST_STATUS_KEYS, w["last_status"].keys
    end
    first_pids = stats["worker_status"].map { |w| w["pid"] }
    served = eventually("the workers reported the requests") do
      n = pumactl_json("-S", @state, "stats")["worker_status"].sum { |w| w["last_status"]["requests_count"] }
      n if n >= 4
    end
    assert_equal 4, served

    out, status = pumactl("-S", @state, "phased-restart")
    assert_equal [0, "Command phased-restart sent success\n"], [status, out]
    stats = eventually("the workers replaced in phase 1") do
      s = pumactl_json("-S", @state, "stats")
      s if s["phase"] == 1 && s["booted_workers"] == 2 && s["worker_status"].none? { |w| first_pids.include?(w["pid"]) }
    end
    assert_equal 0, stats["old_workers"]
    assert(stats["worker_status"].all? { |w| w["phase"] == 1 })

    assert_equal 0, pumactl("-S", @state, "restart")[1]
    wait_for_log(/Starting control server/, count: 2) # the master re-executed itself
    wait_for_log(/booted/, count: 6)
    assert_equal @pid, state["pid"], "a hot restart keeps the master's pid"
    assert_equal 0, pumactl_json("-S", @state, "stats")["phase"], "a new master starts at phase 0"

    assert_equal 0, pumactl("-S", @state, "stop")[1]
    assert_equal 0, wait_exit
    refute File.exist?(@state)
    refute File.exist?(File.join(@dir, "ctl.sock")), "the control socket's file goes too"
  end

  def test_single_mode_restart_in_place
    skip "single-mode restart in place (USR2) is not in this tree yet" unless Margay::Launcher.method_defined?(:restart)

    start_margay(control_token: "t")
    assert_equal ["Command restart sent success\n", 0], pumactl("-S", @state, "restart")
    wait_for_log(/Starting control server/, count: 2)
    assert_equal "pid #{@pid}", get, "same process, serving again"
    assert_equal @pid, state["pid"]
    assert_equal 0, pumactl("-S", @state, "phased-restart")[1], "no phases in single mode: a restart, like Puma"
    wait_for_log(/Starting control server/, count: 3)
    assert_equal 0, pumactl("-S", @state, "stop")[1]
    assert_equal 0, wait_exit
  end

  def test_halt_exits_at_once
    start_margay
    assert_equal 0, pumactl("-S", @state, "halt")[1]
    assert_equal 0, wait_exit(timeout: 10)
    refute File.exist?(@state)
  end
end
