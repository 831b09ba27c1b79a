# frozen_string_literal: true

require_relative "../support/cluster_process"

# A worker killed (SIGKILL) while the cluster drains loses only the request it was running:
# every other request its clients had sent is answered by another worker. Two workers of one
# thread each, drain_delay 8; after "draining", 8 clients each send a 1 s request on a new
# connection, and 0.5 s later the worker holding the most of their connections is killed.
# A worker that cannot start a request at once must not hold its connection: while draining
# it accepts one client per free thread, and hands a connection whose request waits unread to
# the master, which holds it until a worker has a thread waiting.
class ClusterDrainKillTest < Minitest::Test
  include ClusterProcess

  CLIENTS = 8

  # Each client connects and sends at once (the usual client).
  def test_a_killed_worker_loses_only_its_running_request
    4.times { |run| drain_kill_run(run, connect_first: false) }
  end

  # Every client connects before any sends: the connections are accepted (by threads still
  # free) before their requests arrive, and wait idle in the workers' engines.
  def test_connections_accepted_before_their_request_are_not_lost_either
    2.times { |run| drain_kill_run(run, connect_first: true) }
  end

  # A worker replaced by a phased restart drains alone while the other serves; killed then, it
  # loses only its running request too (it hands what it holds unread to the master).
  def test_a_worker_killed_in_its_own_drain_loses_only_its_running_request
    2.times { |run| drain_kill_run(run, connect_first: true, replaced: true) }
  end

  private

  def drain_kill_run(run, connect_first:, replaced: false)
    start_cluster(2, min_threads: 1, max_threads: 1, drain_delay: 8)
    workers = worker_pids
    if replaced
      Process.kill(:USR1, @master)
      wait_for_log(/master: worker \d+ \(pid \d+\) draining for 8s/)
      victim = log_text[/master: worker \d+ \(pid (\d+)\) draining for 8s/, 1].to_i
    else
      Process.kill(:TERM, @master)
      wait_for_log(/master: draining for 8s/)
    end
    clients = Array.new(CLIENTS) { connect_first ? TCPSocket.new("127.0.0.1", @port) : nil }
    answers = Array.new(CLIENTS) { |i| Thread.new { exchange(clients, i) } }
    sleep 0.5
    holders = holders_of(clients, workers)
    victim ||= workers.max_by { |pid| holders.count(pid) }
    Process.kill(:KILL, victim)
    results = answers.map(&:value)
    lost = (0...CLIENTS).reject { |i| results[i].start_with?("HTTP/1.1 200") }
    running = log_text.scan(/second (\d+) in #{victim}$/).flatten.map(&:to_i)
    assert_operator running.size, :<=, 1, "one thread: one request at a time"
    assert_empty lost - running,
                 "run #{run}: requests lost besides the one running in the killed worker #{victim} (#{running.inspect}): " \
                 "#{(lost - running).to_h { |i| [i, results[i]] }.inspect}; its clients' holders at the kill " \
                 "#{holders.inspect} (workers #{workers.inspect})\n#{log_text}"
  ensure
    clients&.each { |sock| sock&.close }
    kill_cluster
    FileUtils.rm_rf(@dir) if @dir
    @process = @dir = nil
  end

  # Client +i+'s exchange: the response it read, or what went wrong.
  def exchange(clients, index)
    sock = clients[index] ||= TCPSocket.new("127.0.0.1", @port)
    sock.write("GET /second?#{index} HTTP/1.1\r\nHost: t\r\n\r\n")
    response = read_all(sock, timeout: 20)
    response.empty? ? "nothing (reset or closed)" : response
  rescue SystemCallError, IOError => e
    e.class.name
  end

  # The pid among +pids+ holding the server side of each client's connection (nil: in the
  # listen backlog, or held by the master on its way to a worker).
  def holders_of(clients, pids)
    sleep 0.01 until clients.all?
    by_inode = {}
    pids.each do |pid|
      Dir.glob("/proc/#{pid}/fd/*").each do |fd|
        inode = File.readlink(fd)[/\Asocket:\[(\d+)\]\z/, 1]
        by_inode[inode] = pid if inode
      rescue SystemCallError
        nil
      end
    end
    table = File.readlines("/proc/net/tcp").drop(1).map(&:split)
    clients.map do |sock|
      local = format(":%04X", @port)
      remote = format(":%04X", sock.local_address.ip_port)
      line = table.find { |f| f[1].end_with?(local) && f[2].end_with?(remote) && f[9] != "0" }
      line && by_inode[line[9]]
    end
  end
end
