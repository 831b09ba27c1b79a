# frozen_string_literal: true

require_relative "support/cluster_process"
require_relative "../../bench/lib/balancers"

# The HAProxy agent-check listener (agent_bind) through the real executable, in a single
# process and in a 2-worker cluster (docs/OPERATIONS.md "HAProxy agent-check"): one line per
# connection, its weight falling while slow requests hold app threads, "drain" from TERM with
# drain_delay on, the port kept over a hot restart; and the real HAProxy shows the server as
# DRAIN within agent-inter + 0.5 s of TERM.
class AgentProcessTest < Minitest::Test
  include ClusterProcess

  DRAIN = 3
  AGENT = %r{HAProxy agent on tcp://127\.0\.0\.1:(\d+)}

  # exe/margay with an agent listener and the settings given; returns once it says "up".
  def start(workers, **settings)
    start_cluster(workers, agent_bind: "tcp://127.0.0.1:0", min_threads: 2, max_threads: 2, **settings)
    @agent = log_text[AGENT, 1].to_i # the banner's line, beside the one start_cluster waited for
    wait_until(10, "the agent says up") { agent_line.start_with?("up ") }
  end

  # What the agent port says to a connection that sends nothing ("" when refused).
  def agent_line
    TCPSocket.open("127.0.0.1", @agent) { |sock| read_all(sock, timeout: 2) }
  rescue SystemCallError
    ""
  end

  def wait_for_line(seconds, want)
    wait_until(seconds, "the agent to say #{want.inspect}") { agent_line == want }
  end

  # Two slow requests hold two of the process's (or cluster's) app threads: the weight falls to
  # the free share, and rises again once they are done.
  def assert_weight_follows_busy_threads(threads)
    assert_equal "up ready 100% maxconn:#{threads}\n", agent_line
    slows = Array.new(2) { slow_request }
    wait_until(10) { log_text.scan(/slow request in/).size >= 2 }
    want = [100 * (threads - 2) / threads, 10].max
    wait_for_line(2, "up ready #{want}% maxconn:#{threads}\n")
    slows.each(&:join)
    wait_for_line(2, "up ready 100% maxconn:#{threads}\n")
  end

  def test_a_single_process_says_its_free_threads
    start(0)
    assert_weight_follows_busy_threads(2)
  end

  def test_a_cluster_says_its_workers_free_threads
    start(2)
    assert_weight_follows_busy_threads(4)
  end

  # TERM with drain_delay: "drain" at once, while requests are still served.
  def assert_term_says_drain
    term_at = now
    Process.kill(:TERM, @master)
    wait_for_line(1, "drain\n")
    assert_operator now - term_at, :<, 0.5
    assert_equal "200", raw_get(@port, "/")[%r{\AHTTP/1.1 (\d+)}, 1], "still serving while draining"
    assert_predicate master_exit(DRAIN + 5), :success?
  end

  def test_term_says_drain_in_a_single_process
    start(0, drain_delay: DRAIN)
    assert_term_says_drain
  end

  def test_term_says_drain_in_a_cluster
    start(2, drain_delay: DRAIN)
    assert_term_says_drain
  end

  # A hot restart hands the agent listener over like the health listener: the same port, "up"
  # again once the new process serves.
  def test_usr2_keeps_the_agent_listener
    start(0)
    Process.kill(:USR2, @master)
    wait_for_log(AGENT, count: 2)
    assert_equal [@agent], log_text.scan(AGENT).flatten.map(&:to_i).uniq
    wait_for_line(10, "up ready 100% maxconn:2\n")
  end

  # The real HAProxy (agent-check every second) takes the weight and maxconn from the line (the
  # weight halved while one of two threads is busy), and shows the server as DRAIN within
  # agent-inter + 0.5 s of TERM.
  def test_haproxy_shows_the_server_draining_after_term
    skip "haproxy is not installed" unless which("haproxy")
    start(0, drain_delay: DRAIN)
    backend = { name: "m1", address: "127.0.0.1", port: @port, agent: @agent }
    @haproxy = MargayBench::Balancers::HAProxy.new(dir: @dir, port: free_port, backends: [backend], agent_inter: 1000)
    @haproxy.start(File.join(@dir, "haproxy.log"))
    wait_until(5) { stat("status") == "UP" && stat("slim") == "2" && stat("weight") == "100" }
    slow = slow_request
    wait_until(3) { stat("weight") == "50" } # one of two threads busy
    slow.join
    assert_equal "200", raw_get(@haproxy.port, "/")[%r{\AHTTP/1.1 (\d+)}, 1], "served through HAProxy"
    term_at = now
    Process.kill(:TERM, @master)
    wait_until(3) { stat("status").to_s.start_with?("DRAIN") } # "DRAIN (agent)"
    assert_operator now - term_at, :<=, 1.0 + 0.5, "DRAIN within agent-inter + 0.5 s of TERM"
  ensure
    @haproxy&.stop
  end

  private

  # A column of HAProxy's `show stat` for the one server.
  def stat(column) = @haproxy.stat(column)["m1"]

  def free_port
    TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
  end

  def which(cmd)
    (ENV.fetch("PATH", "").split(File::PATH_SEPARATOR) | %w[/usr/sbin /sbin]).any? { |d| File.executable?(File.join(d, cmd)) }
  end
end
