# frozen_string_literal: true

require "socket"

module Margay
  class Cluster
    # What the control app's GET /queue answers in a cluster: how the waiting work is spread,
    # read live by the master. Per serving worker (the board's counters, which each worker's
    # engine keeps as it accepts, adopts, hands over and closes connections): its connections,
    # the clients among them it took in and no thread reached yet (unread: a worker that takes
    # only for its free threads keeps this near 0), its app threads in a request and its
    # threads waiting for work, and (as of its last look, at most 100 ms old) its requests
    # waiting for a thread and the longest wait among them; and per TCP listener the clients waiting in its backlog,
    # accepted by no worker yet (Linux reports a listening socket's accept queue in TCP_INFO).
    module QueueReport
      # tcpi_unacked's offset in struct tcp_info (linux/tcp.h): eight one-byte fields, then
      # rto, ato, snd_mss and rcv_mss.
      UNACKED_OFFSET = 24

      # @param workers [Array<WorkerRecord>] the serving workers (the mold excluded)
      # @param board [Native::IdleBoard] the cluster's counters
      # @param listeners [Array<Binder::Listener>]
      def self.report(workers:, board:, listeners:)
        { listen_queue: listeners.map { |l| { bind: l.url, queued: listen_queue(l.io) } },
          workers: workers.map { |w| worker(w, board) } }
      end

      def self.worker(record, board)
        inside = record.index < board.size
        return { index: record.index, pid: record.pid } unless inside

        i = record.index
        { index: i, pid: record.pid, connections: board.connections(i), unread: board.unread(i),
          busy_threads: board.busy(i), waiting_threads: board[i], waiting_requests: board.backlog(i),
          oldest_wait_ms: board.oldest_wait_ms(i) }
      end

      # Clients in +io+'s accept queue; nil where the system does not say (unix sockets, not Linux).
      def self.listen_queue(io)
        return nil unless io.is_a?(TCPServer) && defined?(Socket::TCP_INFO)

        io.getsockopt(Socket::IPPROTO_TCP, Socket::TCP_INFO).data.unpack1("L", offset: UNACKED_OFFSET)
      rescue SystemCallError, IOError, ArgumentError
        nil
      end
    end
  end
end
