# frozen_string_literal: true

require "test_helper"
require "margay/native"

# The HAProxy agent-check listener (agent_bind), answered by the engine's health thread
# (ext/margay/core/health.c) over real sockets: one line per connection, then the close.
# "up ready W% maxconn:N" while ready, W from the free app threads (at least 10%), "drain"
# once draining, "down" when not ready otherwise; a cluster worker answers for the board.
class AgentTest < Minitest::Test
  include Margay::TestHelper

  # The agent listener's [host, port].
  def agent_port(server)
    url = server.health_listeners.find { |l| server.agent_listener?(l) }.url
    [url[%r{//(.*):}, 1], url[/:(\d+)\z/, 1].to_i]
  end

  # Connect, send nothing, read until the server closes.
  def agent_line(address)
    sock = TCPSocket.new(*address)
    read_all(sock, timeout: 2)
  ensure
    sock&.close
  end

  def wait_for_line(port, want)
    line = nil
    Timeout.timeout(5) { sleep 0.01 until (line = agent_line(port)) == want }
  rescue Timeout::Error
    flunk "agent line #{line.inspect}, expected #{want.inspect}"
  end

  def test_the_weight_falls_as_threads_are_busy_with_a_floor
    release = Queue.new
    started = Queue.new
    settings = { min_threads: 4, max_threads: 4, agent_bind: "tcp://127.0.0.2:0", health_bind: "tcp://127.0.0.1:0" }
    with_server(blocking_app(Queue.new, release, started), **settings) do |_, port, server|
      ap = agent_port(server)
      wait_for_line(ap, "up ready 100% maxconn:4\n") # "down" until the engine has started
      blockers = Array.new(3) { Thread.new { raw_get(port, "/block") } }
      3.times { pop_within(started) }
      wait_for_line(ap, "up ready 25% maxconn:4\n")
      blockers << Thread.new { raw_get(port, "/block") }
      pop_within(started)
      wait_for_line(ap, "up ready 10% maxconn:4\n") # every thread busy: the floor
      assert_match(%r{\AHTTP/1.1 200}, raw_get(health_port(server), "/readyz"), "the health listener beside it answers too")
      4.times { release << true }
      blockers.each { |t| t.join(5) }
      wait_for_line(ap, "up ready 100% maxconn:4\n")
    ensure
      4.times { release << true }
    end
  end

  def health_port(server)
    server.health_listeners.reject { |l| server.agent_listener?(l) }.first.url[/:(\d+)\z/, 1].to_i
  end

  def test_a_drain_says_drain_and_what_the_agent_sends_is_ignored
    with_server(HELLO, agent_bind: "tcp://127.0.0.1:0") do |_, _, server|
      ap = agent_port(server)
      wait_for_line(ap, "up ready 100% maxconn:5\n")
      server.drain(60)
      assert_equal "drain\n", agent_line(ap)
      sock = TCPSocket.new(*ap)
      sock.write("hello from haproxy\n")
      assert_equal "drain\n", read_all(sock, timeout: 2)
    ensure
      sock&.close
    end
  end

  # A cluster worker's engine answers for the board: the ready workers' threads, their busy
  # cells; "down" once no worker is ready and none drains; "drain" when the cluster drains.
  def test_a_workers_agent_answers_for_the_board
    skip_on_jruby "no cluster: JRuby has no fork (Native::IdleBoard is the cluster's shared memory)"
    board = Margay::Native::IdleBoard.new(3)
    server, thread = start_worker_server(board, 1, agent_bind: "tcp://127.0.0.1:0", max_threads: 3)
    ap = agent_port(server)
    assert_equal "up ready 100% maxconn:3\n", agent_line(ap), "one ready worker of three slots"
    board.clear(1) # as if this worker were gone: none ready, none draining
    assert_equal "down\n", agent_line(ap)
    board.drain!
    assert_equal "drain\n", agent_line(ap)
  ensure
    server&.stop
    thread&.join(10)
  end
end
