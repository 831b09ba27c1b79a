# frozen_string_literal: true

require_relative "../support/cluster_process"

# Keep-alive balancing end to end (lib/margay/cluster/balancer.rb): an idle
# connection pinned to a saturated worker is handed to a worker with a free
# thread.
class ClusterBalancerTest < Minitest::Test
  include ClusterProcess

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
    # New connections, silent so far, until one worker holds two: one of them then carries the
    # 5 s request that makes that worker busy, the others must move. Which worker the kernel
    # wakes for each is its choice (under load it can be the same one every time), so the busy
    # request goes on a connection known to be held by its worker rather than on a new one: a
    # worker holding silent connections takes one client per listener event, and the other
    # worker can win every one of them.
    # A connection still in the listen backlog has no owner yet (nil), nor one the master holds
    # on its way between workers: wait for it rather than count it.
    fresh = [TCPSocket.new("127.0.0.1", @port)]
    owners = nil
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
    loop do
      owners = fresh.map { |sock| owner(sock, pids) }
      break if owners.none?(&:nil?) && owners.tally.values.max >= 2
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        flunk "a new connection has no worker after 30 s: owners #{fresh.map { |s| owner(s, pids + [@master]) }.inspect} " \
              "(workers #{pids.inspect}, master #{@master})\n#{`ss -tanoie '( sport = :#{@port} )' 2>&1`}\n#{log_text}"
      end
      fresh << TCPSocket.new("127.0.0.1", @port) if owners.none?(&:nil?)
      sleep 0.05 # accepted
    end
    target = owners.tally.max_by { |_, count| count }.first
    other = (pids - [target]).first
    busy = fresh.delete_at(owners.index(target))
    assert slow_in(busy, target), "the busy request answered at once"
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
  # The line is the one whose both ends match: /proc/net/tcp also lists the
  # TIME_WAIT sockets of earlier tests' servers (inode 0), and one of those may
  # have had a client on the same port.
  def owner(sock, pids)
    ends = [@port, sock.local_address.ip_port].map { |port| format("%04X", port) }
    inode = File.readlines("/proc/net/tcp").map(&:split).find { |f| f[1, 2].map { |a| a[/\h+\z/] } == ends && f[9] != "0" }&.fetch(9)
    pids.find do |pid|
      Dir.glob("/proc/#{pid}/fd/*").any? { |fd| File.readlink(fd) == "socket:[#{inode}]" rescue false } # rubocop:disable Style/RescueModifier
    end
  end

  # Occupy the only thread of the worker +pid+ with a 5 s request; returns its
  # socket. Requests that land on the other worker answer at once and are retried
  # (for 15 s: the kernel picks the worker, and may pick the other many times running).
  def occupy(pid)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 15
    while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      sock = TCPSocket.new("127.0.0.1", @port)
      return sock if slow_in(sock, pid)

      sock.close
    end
    flunk "could not occupy worker #{pid}"
  end

  # Sends on +sock+ a request that takes 5 s in the worker +pid+ (at once in any
  # other); true if no answer came within 0.3 s, i.e. that worker is running it.
  def slow_in(sock, pid)
    sock.write("GET /slow_in?#{pid} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    !sock.wait_readable(0.3)
  end
end
