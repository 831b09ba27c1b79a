# frozen_string_literal: true

require_relative "support/cluster_process"

# The master's supervision end to end (lib/margay/cluster.rb): a real master
# process with forked workers replaces the workers that die, fall silent,
# grow too big or cannot boot, and its workers do not outlive it.
# Signals, restarts, the mold and balancing: test/slow/cluster/.
class ClusterTest < Minitest::Test
  include ClusterProcess

  def test_workers_of_a_killed_master_finish_their_requests_and_exit
    start_cluster(2)
    workers = worker_pids
    slow = slow_request
    wait_for_log(/slow request in/)
    Process.kill(:KILL, @master)
    assert_match(/\r\n\r\n0\z/, slow.value, "the request in flight completes")
    wait_for_log(/the master is gone/, count: 2, timeout: 10)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
    sleep 0.05 until worker_pids.empty? || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    assert_empty worker_pids, "workers exit once the master is gone (they were #{workers.inspect})"
  end

  def test_killed_worker_closes_its_client_and_is_replaced
    start_cluster(2)
    victim_conn = TCPSocket.new("127.0.0.1", @port)
    victim_conn.write("GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
    wait_for_log(/slow request in (\d+)/)
    Process.kill(:KILL, log_text[/slow request in (\d+)/, 1].to_i)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    assert_equal "", read_all(victim_conn, timeout: 5), "the client of a killed worker gets a closed connection"
    wait_for_log(/booted/, count: 3, timeout: 5)
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 2.5
    assert_equal 200, post("x")[0]
  ensure
    victim_conn&.close
  end

  def test_silent_worker_is_killed_and_replaced
    start_cluster(1, worker_timeout: 1)
    pid = worker_pids.first
    Process.kill(:STOP, pid)
    wait_for_log(/silent for 1s: killing it/, timeout: 10)
    wait_for_log(/booted/, count: 2, timeout: 10)
    assert_equal 200, post("y")[0]
  end

  # worker_memory_limit: a worker over it is replaced.
  def test_worker_over_memory_limit_is_replaced
    start_cluster(1, worker_memory_limit: 1024 * 1024) # every worker is over 1 MiB
    wait_for_log(/RSS \d+ MiB over the limit of 1 MiB: replacing it/, timeout: 10)
    wait_for_log(/booted/, count: 2, timeout: 10)
    assert_equal 200, post("z")[0]
  end

  def test_a_request_ignoring_its_deadline_gets_its_worker_replaced
    start_cluster(1, request_timeout: 0.5)
    client = Thread.new { raw_exchange(@port, "GET /stuck HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 20) }
    wait_for_log(%r{request_timeout: GET /stuck ran}, timeout: 5)
    wait_for_log(/ignores its interrupt for 5s: capacity lost/, timeout: 10)
    wait_for_log(/booted/, count: 2, timeout: 15)
    assert_equal 200, post("fresh")[0]
    client.join(15)
  end

  # A worker that cannot boot: the master backs off and stays up.
  def test_boot_failures_back_off_and_the_master_survives
    @dir = Dir.mktmpdir("margay-bootfail-")
    File.write(File.join(@dir, "config.ru"), "raise 'cannot boot' if ENV['MARGAY_TEST_WORKER']\nrun ->(e) { [200, {}, []] }\n")
    File.write(File.join(@dir, "margay.rb"), "preload_app false\non_worker_boot { |i| }\n")
    # not preloaded: each worker loads config.ru itself and fails
    spawn_master("-w", "1", "-b", "tcp://127.0.0.1:0", "-C", "margay.rb", "config.ru", env: { "MARGAY_TEST_WORKER" => "1" })
    wait_for_log(/boot failed 1 time\(s\); next attempt in 1s/, timeout: 15)
    wait_for_log(/boot failed 2 time\(s\); next attempt in 2s/, timeout: 15)
    assert @process.alive?, "the master must not die because a worker did"
    assert_operator log_text.scan(/cannot boot/).size, :>=, 2, "each attempt reports the app's error"
  end
end
