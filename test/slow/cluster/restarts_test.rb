# frozen_string_literal: true

require_relative "../support/cluster_process"

# Hot (USR2) and phased (USR1) restarts end to end (lib/margay/cluster.rb):
# no request is lost, and a stop asked for meanwhile wins.
class ClusterRestartsTest < Minitest::Test
  include ClusterProcess

  def test_zero_downtime_through_hot_and_phased_restarts
    start_cluster(2)
    body = "p" * 16_384
    counts = Hash.new(0)
    lock = Mutex.new
    running = true
    clients = Array.new(10) do
      Thread.new do
        while running
          result = begin
            status, _, answer = post(body)
            status == 200 && answer == "16384" ? :ok : :"bad_#{status}"
          rescue SystemCallError, EOFError, IOError => e
            :"#{e.class}"
          end
          lock.synchronize { counts[result] += 1 }
        end
      end
    end
    booted = 2
    5.times do
      Process.kill(:USR2, @master)
      booted += 2
      wait_for_log(/booted/, count: booted)
      Process.kill(:USR1, @master)
      booted += 2
      wait_for_log(/booted/, count: booted)
    end
    sleep 0.3
    running = false
    clients.each(&:join)
    assert_equal [:ok], counts.keys, "every request must be answered 200: #{counts.inspect}\n#{log_text}"
    assert_operator counts[:ok], :>, 100
    warn "zero-downtime: #{counts.inspect}, #{log_text.scan(/booted/).size} workers booted, #{log_text.scan(/hot restart/).size} hot, #{log_text.scan(/phased restart/).size} phased" if ENV["VERBOSE"]
    stop_cluster
  end

  def test_term_during_a_hot_restart_stops_instead
    start_cluster(1)
    slow = slow_request
    wait_for_log(/slow request in/)
    Process.kill(:USR2, @master) # waits for the slow request before re-executing
    wait_for_log(/hot restart/)
    Process.kill(:TERM, @master)
    assert_match(/\r\n\r\n0\z/, slow.value, "the request in flight completes")
    assert_predicate master_exit(20, "master did not exit after TERM"), :success?
    assert_match(/stop requested during the hot restart/, log_text)
    assert_equal 1, log_text.scan(/^Margay \d/).size, "no re-executed master: #{log_text}"
  end

  # A worker told to stop sends no heartbeat while it finishes its requests:
  # a worker_timeout shorter than that must not get it killed mid-request.
  def test_a_draining_worker_is_not_killed_for_silence
    start_cluster(1, worker_timeout: 1)
    slow = slow_request
    wait_for_log(/slow request in/)
    Process.kill(:USR1, @master) # the phased restart stops the only worker; its request takes 5 s
    assert_match(/\r\n\r\n0\z/, slow.value, "the request in flight completes")
    wait_for_log(/booted/, count: 2, timeout: 10)
    refute_match(/silent for 1s/, log_text)
  end
end
