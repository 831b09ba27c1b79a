# frozen_string_literal: true

require_relative "../support/cluster_process"

# The master's signals end to end (docs/SIGNALS.md; the inbox is
# lib/margay/cluster/signals.rb, what each does lib/margay/cluster.rb):
# graceful stops, TTIN/TTOU, HUP, and signals that arrive while the app loads; and that
# neither the master nor a worker ends over an error it did not expect.
# USR1/USR2: restarts_test.rb; URG: mold_test.rb.
class ClusterSignalsTest < Minitest::Test
  include ClusterProcess

  %i[INT QUIT].each do |sig|
    define_method(:"test_#{sig.downcase}_stops_gracefully") do
      start_cluster(2)
      slow = slow_request
      wait_for_log(/slow request in/)
      Process.kill(sig, @master)
      assert_match(/\r\n\r\n0\z/, slow.value, "the request in flight completes")
      assert_predicate master_exit(20, "master did not exit after #{sig}"), :success?
    end
  end

  # TERM: the master and every worker close their copies of the listening
  # socket at once, so new clients are refused while requests finish.
  def test_term_refuses_new_clients_while_requests_finish
    start_cluster(2)
    slow = slow_request
    wait_for_log(/slow request in/)
    Process.kill(:TERM, @master)
    refused = Timeout.timeout(4) do # the slow request takes 5 s
      loop do
        TCPSocket.new("127.0.0.1", @port).close
        sleep 0.02
      rescue Errno::ECONNREFUSED
        break true
      end
    end
    assert refused
    assert_match(/\r\n\r\n0\z/, slow.value, "the request in flight completes")
    assert_predicate master_exit(20, "master did not exit after TERM"), :success?
  end

  def test_ttin_and_ttou
    start_cluster(1)
    Process.kill(:TTIN, @master)
    wait_for_log(/booted/, count: 2)
    assert_equal 2, worker_pids.size
    Process.kill(:TTOU, @master)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
    sleep 0.05 until worker_pids.size == 1 || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    assert_equal 1, worker_pids.size
  end

  def test_hup_reaches_the_workers_and_they_keep_serving
    start_cluster(2)
    Process.kill(:HUP, @master)
    wait_for_log(/HUP in/, count: 2)
    assert_equal 200, post("h")[0]
  end

  # An app's own HUP handler that raises (its log directory gone, say) used to end the worker:
  # the exception surfaced in its main thread, and the master started another.
  def test_an_apps_hup_handler_that_raises_ends_no_worker
    @dir = Dir.mktmpdir("margay-hupraise-")
    File.write(File.join(@dir, "config.ru"), <<~RUBY)
      Signal.trap("HUP") { puts "HUP in \#{Process.pid}"; $stdout.flush; raise "cannot reopen app.log" }
      run ->(e) { [200, {}, ["up"]] }
    RUBY
    spawn_master("-w", "2", "-b", "tcp://127.0.0.1:0", "config.ru")
    wait_for_listening
    wait_for_log(/booted/, count: 2)
    before = worker_pids.sort
    Process.kill(:HUP, @master)
    wait_for_log(/the app's HUP handler raised \(serving on\): RuntimeError: cannot reopen app.log/, count: 2)
    assert_match(/up\z/, raw_exchange(@port, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))
    assert_equal before, worker_pids.sort, "the same workers serve"
    refute_match(/booted/, log_text.split("HUP in").last, "no worker was started again")
  end

  # An error the master's loop does not expect (here injected by the config file: two of its
  # checks fail every turn while ./fail exists, one before the signals are read and one after)
  # used to end the master, and the cluster with it. Each is said once, the workers serve on,
  # and TERM still stops the cluster.
  def test_the_master_outlives_an_error_in_its_loop
    @dir = Dir.mktmpdir("margay-masterloop-")
    File.write(File.join(@dir, "margay.rb"), <<~RUBY)
      require "margay/cluster"
      Margay::Cluster::Health.prepend(Module.new do
        def idle_too_long?(...)
          raise "injected failure" if File.exist?("fail")

          super
        end

        def check_heartbeats(...)
          raise "injected failure" if File.exist?("fail")

          super
        end
      end)
    RUBY
    File.write(File.join(@dir, "config.ru"), "run ->(e) { [200, {}, ['up']] }\n")
    spawn_master("-w", "2", "-b", "tcp://127.0.0.1:0", "-C", "margay.rb", "config.ru")
    wait_for_listening
    wait_for_log(/booted/, count: 2)
    File.write(File.join(@dir, "fail"), "")
    said = /master: carrying on after an error \(said once\): RuntimeError: injected failure/
    wait_for_log(said, count: 2)
    sleep 1.5 # more turns of the loop (each waits up to 0.5 s for an event)
    assert_match(/up\z/, raw_exchange(@port, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))
    assert_equal 2, log_text.scan(said).size, "once for each of the two places"
    refute_match(/ArgumentError/, log_text, "the injection passes its arguments on")
    Process.kill(:TERM, @master)
    assert_predicate master_exit(20, "master did not exit after TERM"), :success?
  end

  def test_signals_during_preload_are_not_fatal
    @dir = Dir.mktmpdir("margay-bootsig-")
    File.write(File.join(@dir, "config.ru"), "puts 'loading'; $stdout.flush; sleep 2\nrun ->(e) { [200, {}, ['up']] }\n")
    spawn_master("-w", "1", "-b", "tcp://127.0.0.1:0", "config.ru")
    wait_for_log(/loading/)
    %i[HUP TTIN TTOU URG].each { |sig| Process.kill(sig, @master) }
    wait_for_listening
    wait_for_log(/booted/)
    assert_predicate @process, :alive?
    assert_match(/up\z/, raw_exchange(@port, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))
  end
end
