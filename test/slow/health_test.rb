# frozen_string_literal: true

require_relative "support/cluster_process"
require_relative "../support/promtool"

# Health and drain through the real executable, in a single process and in a 2-worker cluster
# (docs/OPERATIONS.md): the health listener answers /livez and /readyz while every app thread
# is stuck in a request; on TERM with drain_delay readiness turns 503 at once, every response
# after it carries connection: close (an idle kept-alive connection's next one too), requests
# are still served, and the process exits within drain_delay + the longest request + 1 s.
class HealthProcessTest < Minitest::Test
  include ClusterProcess
  include Margay::Promtool

  DRAIN = 2

  # exe/margay with one thread per process, a health listener and the settings given.
  def start(workers, **settings)
    @dir = Dir.mktmpdir("margay-health-")
    config = File.join(@dir, "margay.rb")
    settings = { health_bind: "tcp://127.0.0.1:0", min_threads: 1, max_threads: 1 }.merge(settings)
    File.write(config, settings.map { |k, v| "#{k} #{v.inspect}\n" }.join)
    spawn_master("-w", workers.to_s, "-b", "tcp://127.0.0.1:0", "-C", config, APP)
    wait_for_listening
    wait_for_log(%r{Health on tcp://127\.0\.0\.1:(\d+)})
    @health = log_text[%r{Health on tcp://127\.0\.0\.1:(\d+)}, 1].to_i
    wait_for_log(/booted/, count: workers) if workers.positive?
    wait_until(10) { probe("/readyz").first == 200 }
  end

  # GET +path+ on a connection of its own, asking to be kept alive: [status, headers, body].
  def get(port, path, timeout: 5)
    TCPSocket.open("127.0.0.1", port) do |sock|
      sock.write("GET #{path} HTTP/1.1\r\nHost: t\r\n\r\n")
      read_response(sock, timeout: timeout)
    end
  end

  # GET +path+ on the health listener: [status, seconds it took].
  def probe(path)
    started = now
    [get(@health, path, timeout: 1).first, now - started]
  rescue EOFError, SystemCallError
    [nil, now - started]
  end

  # Occupy every app thread of +processes+ with /slow requests (5 s); the threads reading them.
  def saturate(processes)
    slows = Array.new(processes * 2) { slow_request }
    wait_until(10) { log_text.scan(/slow request in (\d+)/).uniq.size >= processes }
    slows
  end

  def assert_probes_answer_while_saturated(processes)
    slows = saturate(processes)
    answers = Array.new(20) { probe(%w[/livez /readyz][_1 % 2]) }
    assert_equal [200], answers.map(&:first).uniq, "every probe answered 200"
    assert_operator answers.map(&:last).max, :<, 0.5, "each in well under a second"
    app = TCPSocket.new("127.0.0.1", @port)
    app.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    refute app.wait_readable(0.5), "the app itself is saturated: its own request waits"
    slows.each(&:join)
  ensure
    app&.close
  end

  def test_probes_are_answered_while_the_only_thread_is_in_a_request
    start(0)
    assert_probes_answer_while_saturated(1)
    assert_match(/^puma_max_threads\{index="0"\} 1$/, get(@health, "/metrics").last)
  end

  def test_probes_are_answered_while_every_worker_thread_is_in_a_request
    start(2)
    assert_probes_answer_while_saturated(2)
    status, headers, body = get(@health, "/metrics")
    assert_equal [200, "text/plain; version=0.0.4; charset=utf-8"], [status, headers["content-type"]]
    assert_match(/^puma_workers 2$/, body, "the master's figures for the cluster, answered by a worker")
    assert_promtool_accepts(body) # last: it skips without promtool
  end

  # /readyz in a cluster reflects the workers: 503 once none serves (answered by the stopping
  # workers' own health threads while they finish their requests), 200 again once one does.
  def test_cluster_readiness_follows_the_workers
    start(2)
    slows = saturate(2)
    Process.kill(:STOP, @master) # the master replaces nobody meanwhile
    worker_pids.each { |pid| Process.kill(:TERM, pid) }
    wait_until(2) { probe("/readyz").first == 503 }
    assert_equal 200, probe("/livez").first, "a worker still answers"
    Process.kill(:CONT, @master)
    slows.each(&:join)
    wait_until(20) { probe("/readyz").first == 200 }
  end

  # A hot restart hands the health listener over like the main ones: the port bound as port 0
  # stays, and probes are answered again once the new process serves.
  def assert_usr2_keeps_the_health_listener(booted)
    Process.kill(:USR2, @master)
    wait_for_log(%r{Health on tcp://127\.0\.0\.1:(\d+)}, count: 2)
    wait_for_log(/booted/, count: booted) if booted.positive?
    assert_equal [@health], log_text.scan(%r{Health on tcp://127\.0\.0\.1:(\d+)}).flatten.map(&:to_i).uniq
    wait_until(10) { probe("/readyz").first == 200 }
  end

  def test_usr2_keeps_the_health_listener_in_a_single_process
    start(0)
    assert_usr2_keeps_the_health_listener(0)
  end

  def test_usr2_keeps_the_health_listener_in_a_cluster
    start(2)
    assert_usr2_keeps_the_health_listener(4)
  end

  def drain_and_check(processes)
    idle = TCPSocket.new("127.0.0.1", @port)
    idle.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    assert_nil read_response(idle)[1]["connection"], "kept alive before TERM"
    slow = slow_request
    wait_for_log(/slow request in/)
    term_at = now
    Process.kill(:TERM, @master)
    wait_until(1) { probe("/readyz").first == 503 }
    unready_after = now - term_at
    assert_operator unready_after, :<=, 0.1 + 0.02, "readiness 503 within 100 ms of TERM (a probe's own time aside)"
    assert_equal 200, probe("/livez").first, "alive while draining"
    idle.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    status, headers, = read_response(idle)
    assert_equal [200, "close"], [status, headers["connection"]], "the idle kept-alive connection is answered, then closed"
    served = 0
    while now - term_at < DRAIN - 0.5
      status, headers, = get(@port, "/")
      assert_equal [200, "close"], [status, headers["connection"]], "served during the drain, connection: close"
      served += 1
      sleep 0.05
    end
    assert_operator served, :>=, 5 * processes
    assert_match(/\r\n\r\n0\z/, slow.value, "the request in flight completes")
    status = master_exit(DRAIN + 5 + 1 + 2)
    took = now - term_at
    assert_predicate status, :success?
    assert_operator took, :>=, DRAIN, "the drain lasted drain_delay"
    assert_operator took, :<=, DRAIN + 5 + 1, "exit within drain_delay + the longest request + 1 s"
  ensure
    idle&.close
  end

  def test_term_drains_a_single_process
    start(0, max_threads: 2, drain_delay: DRAIN)
    drain_and_check(1)
    assert_match(/draining for #{DRAIN}s/, log_text)
  end

  # USR2 with drain_delay drains before the restart, as TERM does before a stop: unready at
  # once, an idle kept-alive connection's next request answered with connection: close (not
  # cut while idle), then the new process serves and is ready again.
  def assert_restart_drains(signal, booted)
    idle = TCPSocket.new("127.0.0.1", @port)
    idle.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    read_response(idle)
    Process.kill(signal, @master)
    wait_until(1) { probe("/readyz").first == 503 }
    idle.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    status, headers, = read_response(idle)
    assert_equal [200, "close"], [status, headers["connection"]], "answered during the drain, then closed"
    wait_for_log(/booted/, count: booted) if booted.positive?
    wait_until(DRAIN + 15) { probe("/readyz").first == 200 }
  ensure
    idle&.close
  end

  def test_usr2_drains_a_single_process_before_restarting
    start(0, drain_delay: DRAIN)
    assert_restart_drains(:USR2, 0)
    assert_match(/SIGUSR2 received: draining for #{DRAIN}s/, log_text)
  end

  def test_usr2_drains_a_cluster_before_restarting
    start(2, drain_delay: DRAIN)
    assert_restart_drains(:USR2, 4)
    assert_match(/master: draining for #{DRAIN}s .* before restarting/, log_text)
  end

  # USR1 with drain_delay: each worker replaced drains first while the others serve (the
  # cluster stays ready), its kept-alive connection answered with connection: close.
  def test_usr1_drains_each_worker_it_replaces
    start(2, drain_delay: DRAIN)
    conns = Array.new(6) do
      TCPSocket.new("127.0.0.1", @port).tap { |c| c.write("GET /pid HTTP/1.1\r\nHost: t\r\n\r\n") }
    end
    old = conns.map { |c| read_response(c)[2].to_i }.uniq
    Process.kill(:USR1, @master)
    # each connection asks again until one is answered by a worker that drains (its answer says
    # connection: close); none is cut without an answer, and the cluster stays ready
    closed = false
    deadline = now + 4 * DRAIN + 10
    until closed || now > deadline
      conns.each do |c|
        c.write("GET /pid HTTP/1.1\r\nHost: t\r\n\r\n")
        status, headers, = read_response(c, timeout: 10)
        assert_equal 200, status
        break if (closed = headers["connection"] == "close")
      end
      assert_equal 200, probe("/readyz").first, "the cluster stays ready while one worker drains"
      sleep 0.1
    end
    assert closed, "no kept-alive connection was answered by a draining worker\n#{log_text}"
    wait_for_log(/booted/, count: 4)
    wait_until(4 * DRAIN + 10, "every old worker gone") { old.none? { |pid| File.exist?("/proc/#{pid}") } }
    refute_includes old, get(@port, "/pid")[2].to_i
  ensure
    conns&.each(&:close)
  end

  def test_term_drains_a_cluster
    start(2, max_threads: 2, drain_delay: DRAIN)
    drain_and_check(2)
    assert_match(/master: draining for #{DRAIN}s/, log_text)
  end
end
