# frozen_string_literal: true

require_relative "support/cluster_process"

# Fiber mode in a cluster (issue 13), through the real executable: hot (USR2) and phased (USR1)
# restarts lose no request, and a request waiting in a fiber completes across a graceful stop.
class FibersClusterTest < Minitest::Test
  include ClusterProcess

  def test_hot_and_phased_restarts_lose_no_request_in_fiber_mode
    start_cluster(2, fiber_scheduler: true, threads: 1)
    counts = Hash.new(0)
    lock = Mutex.new
    running = true
    clients = Array.new(8) do
      Thread.new do
        while running
          result = begin
            status, _, answer = post("x" * 1000)
            status == 200 && answer == "1000" ? :ok : :"bad_#{status}"
          rescue SystemCallError, EOFError, IOError => e
            :"#{e.class}"
          end
          lock.synchronize { counts[result] += 1 }
        end
      end
    end
    Process.kill(:USR2, @master)
    wait_for_log(/booted/, count: 4)
    Process.kill(:USR1, @master)
    wait_for_log(/booted/, count: 6)
    sleep 0.3
    running = false
    clients.each(&:join)
    assert_equal [:ok], counts.keys, "every request must be answered 200: #{counts.inspect}\n#{log_text}"
    stop_cluster
  end

  def test_a_waiting_fiber_completes_across_a_graceful_stop
    start_cluster(1, fiber_scheduler: true, threads: 1)
    slow = Array.new(3) { slow_request } # three 5 s sleeps on the one thread at once
    wait_for_log(/slow request in/, count: 3, timeout: 4) # on one thread: only fibers overlap them
    Process.kill(:TERM, @master)
    slow.each { |t| assert_match(/\A HTTP\/1.1 200.*\r\n\r\n0\z/m, " #{t.value}") }
    assert_predicate master_exit(20, "master did not exit after TERM"), :success?
  end
end
