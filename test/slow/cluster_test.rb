# frozen_string_literal: true

require "test_helper"
require "open3"
require "tmpdir"
require "fileutils"
require "json"

# Cluster mode end to end: a real master process with forked workers,
# driven by signals, under continuous client load.
class ClusterTest < Minitest::Test
  include Margay::TestHelper

  ROOT = File.expand_path("../..", __dir__)
  APP = File.expand_path("support/cluster_app.ru", __dir__)

  # Start `exe/margay -w WORKERS` with +settings+ written to a config file.
  def start_cluster(workers, **settings)
    @dir = Dir.mktmpdir("margay-cluster-")
    config = File.join(@dir, "margay.rb")
    File.write(config, settings.map { |k, v| "#{k} #{v.inspect}\n" }.join)
    @stdin, @out, @thread = Open3.popen2e(RbConfig.ruby, File.join(ROOT, "exe/margay"), "-w", workers.to_s,
                                          "-b", "tcp://127.0.0.1:0", "-C", config, APP, chdir: @dir)
    @log = +""
    @log_lock = Mutex.new
    @reader = Thread.new do
      @out.each_line { |line| @log_lock.synchronize { @log << line } }
    rescue IOError
      nil
    end
    wait_for_log(%r{Listening on tcp://127\.0\.0\.1:(\d+)})
    @port = log_text[%r{Listening on tcp://127\.0\.0\.1:(\d+)}, 1].to_i
    wait_for_log(/booted/, count: workers)
    @master = @thread.pid
  end

  def stop_cluster
    return unless @thread

    Process.kill(:TERM, @master) if @thread.alive?
    assert @thread.join(20), -> { "master did not exit after TERM; processes:\n#{Margay::TestWatchdog.process_report(@master)}" }
    @reader.join(5)
  ensure
    @stdin&.close
  end

  # A master that would not stop is killed with its workers, also when the
  # graceful stop's assertion failed (no process outlives its test).
  def teardown
    stop_cluster if @thread&.alive?
  ensure
    kill_cluster
    FileUtils.rm_rf(@dir) if @dir
  end

  def kill_cluster
    return unless @thread&.alive?

    pids = [@thread.pid, *Margay::TestWatchdog.descendants(@thread.pid)]
    pids.each do |pid|
      Process.kill(:KILL, pid)
    rescue Errno::ESRCH
      nil
    end
    @thread.join(5)
  end

  def log_text
    @log_lock.synchronize { @log.dup }
  end

  def wait_for_log(pattern, count: 1, timeout: 20)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    until log_text.scan(pattern).size >= count
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        flunk "timed out waiting for #{pattern.inspect} x#{count}; log:\n#{log_text}\n" \
              "processes:\n#{Margay::TestWatchdog.process_report(@master || @thread.pid)}"
      end
      sleep 0.02
    end
  end

  # Workers that booted and are still running (an exited orphan may linger as
  # a zombie until init reaps it: that counts as gone).
  def worker_pids
    log_text.scan(/worker \d+ \(pid (\d+)\) booted/).flatten.map(&:to_i).select do |pid|
      File.read("/proc/#{pid}/stat")[/\) (\S)/, 1] != "Z"
    rescue Errno::ENOENT, Errno::ESRCH
      false
    end
  end

  def post(body)
    sock = TCPSocket.new("127.0.0.1", @port)
    sock.write("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: #{body.bytesize}\r\nConnection: close\r\n\r\n#{body}")
    read_response(sock, timeout: 30)
  ensure
    sock&.close
  end

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

  def test_workers_of_a_killed_master_finish_their_requests_and_exit
    start_cluster(2)
    workers = worker_pids
    slow = Thread.new { raw_exchange(@port, "GET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 15) }
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

end

# Worker replacement on memory growth (worker_memory_limit).
class ClusterMemoryTest < ClusterTest
  def test_worker_over_memory_limit_is_replaced
    start_cluster(1, worker_memory_limit: 1024 * 1024) # every worker is over 1 MiB
    wait_for_log(/RSS \d+ MiB over the limit of 1 MiB: replacing it/, timeout: 10)
    wait_for_log(/booted/, count: 2, timeout: 10)
    assert_equal 200, post("z")[0]
  end

  # the inherited tests run once, in ClusterTest
  ClusterTest.public_instance_methods(false).grep(/\Atest_/).each { |m| undef_method(m) if method_defined?(m) }
end

# Reforking: a warm worker becomes the mold and the workers are re-forked from it.
class ClusterReforkTest < ClusterTest
  ClusterTest.public_instance_methods(false).grep(/\Atest_/).each { |m| undef_method(m) if method_defined?(m) }

  def test_urg_makes_a_mold_and_workers_are_reforked_from_it
    start_cluster(2)
    Process.kill(:URG, @master)
    wait_for_log(/mold ready \(pid (\d+)\)/)
    mold = log_text[/mold ready \(pid (\d+)\)/, 1].to_i
    wait_for_log(/booted/, count: 4, timeout: 20) # both serving slots replaced by the mold's children
    children = worker_pids.last(2)
    children.each do |pid|
      refute_equal mold, parent_of(pid), "a reforked worker is not the mold's child"
      assert_equal @master, parent_of(pid), "the master (a child subreaper) adopted it"
      assert_equal "margay: worker", File.read("/proc/#{pid}/cmdline").split("\0").first[/\Amargay: worker/]
    end
    assert_match(/\Amargay: mold/, File.read("/proc/#{mold}/cmdline"))
    5.times { assert_equal 200, post("r")[0] }
    Process.kill(:KILL, children.first)
    wait_for_log(/booted/, count: 5, timeout: 10) # a lost child is replaced, again from the mold
    assert_equal 200, post("again")[0]
  end

  def test_refork_after_requests
    start_cluster(1, refork_after: 20)
    30.times { assert_equal 200, post("w")[0] }
    wait_for_log(/becomes the mold/, timeout: 10)
    wait_for_log(/mold ready/, timeout: 10)
    wait_for_log(/booted/, count: 2, timeout: 10)
    assert_equal 200, post("after")[0]
  end

  private

  def parent_of(pid)
    File.read("/proc/#{pid}/stat").split(") ").last.split[1].to_i
  end
end

# The remaining signals, and request_timeout in cluster mode.
class ClusterSignalsTest < ClusterTest
  ClusterTest.public_instance_methods(false).grep(/\Atest_/).each { |m| undef_method(m) if method_defined?(m) }

  %i[INT QUIT].each do |sig|
    define_method(:"test_#{sig.downcase}_stops_gracefully") do
      start_cluster(2)
      slow = Thread.new { raw_exchange(@port, "GET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 15) }
      wait_for_log(/slow request in/)
      Process.kill(sig, @master)
      assert_match(/\r\n\r\n0\z/, slow.value, "the request in flight completes")
      assert @thread.join(20), "master did not exit after #{sig}"
      assert_predicate @thread.value, :success?
    end
  end

  def test_term_during_a_hot_restart_stops_instead
    start_cluster(1)
    slow = Thread.new { raw_exchange(@port, "GET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 15) }
    wait_for_log(/slow request in/)
    Process.kill(:USR2, @master) # waits for the slow request before re-executing
    wait_for_log(/hot restart/)
    Process.kill(:TERM, @master)
    assert_match(/\r\n\r\n0\z/, slow.value, "the request in flight completes")
    assert @thread.join(20), "master did not exit after TERM"
    assert_predicate @thread.value, :success?
    assert_match(/stop requested during the hot restart/, log_text)
    assert_equal 1, log_text.scan(/^Margay \d/).size, "no re-executed master: #{log_text}"
  end

  # TERM: the master and every worker close their copies of the listening
  # socket at once, so new clients are refused while requests finish.
  def test_term_refuses_new_clients_while_requests_finish
    start_cluster(2)
    slow = Thread.new { raw_exchange(@port, "GET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 15) }
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
    assert @thread.join(20), "master did not exit after TERM"
    assert_predicate @thread.value, :success?
  end

  # A worker told to stop sends no heartbeat while it finishes its requests:
  # a worker_timeout shorter than that must not get it killed mid-request.
  def test_a_draining_worker_is_not_killed_for_silence
    start_cluster(1, worker_timeout: 1)
    slow = Thread.new { raw_exchange(@port, "GET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 15) }
    wait_for_log(/slow request in/)
    Process.kill(:USR1, @master) # the phased restart stops the only worker; its request takes 5 s
    assert_match(/\r\n\r\n0\z/, slow.value, "the request in flight completes")
    wait_for_log(/booted/, count: 2, timeout: 10)
    refute_match(/silent for 1s/, log_text)
  end

  def test_hup_reaches_the_workers_and_they_keep_serving
    start_cluster(2)
    Process.kill(:HUP, @master)
    wait_for_log(/HUP in/, count: 2)
    assert_equal 200, post("h")[0]
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
end

# Signals that reach the master while it is still loading the app.
class ClusterBootSignalsTest < ClusterTest
  ClusterTest.public_instance_methods(false).grep(/\Atest_/).each { |m| undef_method(m) if method_defined?(m) }

  def test_signals_during_preload_are_not_fatal
    @dir = Dir.mktmpdir("margay-bootsig-")
    File.write(File.join(@dir, "config.ru"), "puts 'loading'; $stdout.flush; sleep 2\nrun ->(e) { [200, {}, ['up']] }\n")
    @stdin, @out, @thread = Open3.popen2e(RbConfig.ruby, File.join(ROOT, "exe/margay"), "-w", "1",
                                          "-b", "tcp://127.0.0.1:0", "config.ru", chdir: @dir)
    @log = +""
    @log_lock = Mutex.new
    @reader = Thread.new { @out.each_line { |l| @log_lock.synchronize { @log << l } } }
    @master = @thread.pid
    wait_for_log(/loading/)
    %i[HUP TTIN TTOU URG].each { |sig| Process.kill(sig, @master) }
    wait_for_log(%r{Listening on tcp://127\.0\.0\.1:(\d+)})
    @port = log_text[%r{Listening on tcp://127\.0\.0\.1:(\d+)}, 1].to_i
    wait_for_log(/booted/)
    assert_predicate @thread, :alive?
    assert_match(/up\z/, raw_exchange(@port, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))
  end
end

# A worker that cannot boot: the master backs off and stays up.
class ClusterBootFailureTest < ClusterTest
  ClusterTest.public_instance_methods(false).grep(/\Atest_/).each { |m| undef_method(m) if method_defined?(m) }

  def test_boot_failures_back_off_and_the_master_survives
    @dir = Dir.mktmpdir("margay-bootfail-")
    File.write(File.join(@dir, "config.ru"), "raise 'cannot boot' if ENV['MARGAY_TEST_WORKER']\nrun ->(e) { [200, {}, []] }\n")
    File.write(File.join(@dir, "margay.rb"), "preload_app false\non_worker_boot { |i| }\n")
    env = { "MARGAY_TEST_WORKER" => "1" }
    # not preloaded: each worker loads config.ru itself and fails
    @stdin, @out, @thread = Open3.popen2e(env, RbConfig.ruby, File.join(ROOT, "exe/margay"), "-w", "1",
                                          "-b", "tcp://127.0.0.1:0", "-C", "margay.rb", "config.ru", chdir: @dir)
    @log = +""
    @log_lock = Mutex.new
    @reader = Thread.new { @out.each_line { |l| @log_lock.synchronize { @log << l } } }
    @master = @thread.pid
    wait_for_log(/boot failed 1 time\(s\); next attempt in 1s/, timeout: 15)
    wait_for_log(/boot failed 2 time\(s\); next attempt in 2s/, timeout: 15)
    assert @thread.alive?, "the master must not die because a worker did"
    assert_operator log_text.scan(/cannot boot/).size, :>=, 2, "each attempt reports the app's error"
  end
end

# Keep-alive balancing: an idle keep-alive connection pinned to a saturated
# worker is handed to a worker with a free thread.
class ClusterHandoverTest < ClusterTest
  ClusterTest.public_instance_methods(false).grep(/\Atest_/).each { |m| undef_method(m) if method_defined?(m) }

  def test_idle_connection_of_a_saturated_worker_is_served_elsewhere
    start_cluster(2, min_threads: 1, max_threads: 1)
    pinned = TCPSocket.new("127.0.0.1", @port)
    pinned.write("GET /pid HTTP/1.1\r\nHost: t\r\n\r\n")
    pinned_pid = read_response(pinned)[2].to_i
    busy = occupy(pinned_pid)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    pinned.write("GET /pid HTTP/1.1\r\nHost: t\r\n\r\n")
    status, _, body = read_response(pinned, timeout: 10)
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    assert_equal 200, status
    refute_equal pinned_pid, body.to_i, "answered by the other worker"
    assert_operator elapsed, :<, 2.5, "waited for the busy worker (its request takes 5 s)"
  ensure
    pinned&.close
    busy&.close
  end

  # A connection accepted just before its worker got busy, that has not sent
  # its first request yet, moves too (it is idle like a kept-alive one).
  def test_new_connection_of_a_saturated_worker_is_served_elsewhere
    start_cluster(2, min_threads: 1, max_threads: 1)
    pids = Array.new(40) { get_pid }.uniq
    assert_equal 2, pids.size, "both workers answer"
    fresh = []
    until fresh.map { |sock| owner(sock, pids) }.uniq.size == 2 # one at least on each worker; silent so far
      flunk "new connections all went to one worker" if fresh.size == 20
      fresh << TCPSocket.new("127.0.0.1", @port)
      sleep 0.05 # accepted
    end
    target = owner(fresh.first, pids)
    other = (pids - [target]).first
    busy = occupy(target)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    fresh.each { |sock| sock.write("GET /pid HTTP/1.1\r\nHost: t\r\n\r\n") }
    answers = fresh.map { |sock| read_response(sock, timeout: 10) }
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    assert_equal [[200, other]] * fresh.size, answers.map { |status, _, body| [status, body.to_i] }
    assert_operator elapsed, :<, 2.5, "a first request waited for the busy worker (its request takes 5 s)"
  ensure
    fresh&.each(&:close)
    busy&.close
  end

  private

  def get_pid
    sock = TCPSocket.new("127.0.0.1", @port)
    sock.write("GET /pid HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    read_response(sock)[2].to_i
  ensure
    sock&.close
  end

  # Which of the processes +pids+ holds the server side of client socket
  # +sock+ (Linux: the socket's inode in /proc/net/tcp, then each fd table).
  def owner(sock, pids)
    port = format("%04X", sock.local_address.ip_port)
    line = File.readlines("/proc/net/tcp").find { |l| l.split[2]&.end_with?(":#{port}") }
    inode = line&.split&.fetch(9)
    pids.find do |pid|
      Dir.glob("/proc/#{pid}/fd/*").any? { |fd| File.readlink(fd) == "socket:[#{inode}]" rescue false } # rubocop:disable Style/RescueModifier
    end
  end

  # Occupy the only thread of the worker +pid+ with a 5 s request; returns its
  # socket. Requests that land on the other worker answer at once and are retried.
  def occupy(pid)
    20.times do
      sock = TCPSocket.new("127.0.0.1", @port)
      sock.write("GET /slow_in?#{pid} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
      return sock unless sock.wait_readable(0.3)

      sock.close
    end
    flunk "could not occupy worker #{pid}"
  end
end
