# frozen_string_literal: true

require "socket"
require_relative "../errors"
require_relative "../stats"

module Margay
  class Cluster
    # Internal: the master<->worker protocol, every message of it. A Channel is
    # one side's ends of the three links between the master and one worker
    # (or the mold):
    #
    # - beat, a pipe, worker to master: one byte per report (REPORTS), each
    #   followed by the worker's status (STATUS_KEYS: Stats::COUNTERS, its
    #   memory, Stats::Memory::KEYS, Stats::OWN_COUNTERS, then its histograms,
    #   Stats::HISTOGRAM_KEYS) in one frame: "S" + the values
    #   joined by "," + "\n". Every message is one write
    #   of less than PIPE_BUF bytes, so it arrives whole or not at all. EOF
    #   tells the master the worker is gone; a broken pipe tells the worker
    #   the master is gone.
    # - ctl, a stream socket, master to worker: one line per command
    #   (become the mold; to the mold: fork worker N, serve again). The mold answers a
    #   fork order on it with one message: the new worker's pid, with the
    #   master's ends of that worker's three links attached (SCM_RIGHTS).
    # - handoff, a datagram socket, both ways: idle keep-alive connections
    #   moving between workers through the master, one per datagram (its
    #   descriptor and one byte: kept alive or new).
    #
    # Nothing outside this file spells the bytes of a message.
    class Channel
      # Heartbeat reports, worker to master. booted: the first beat of a
      # serving worker; alive: every beat after it (and the mold's);
      # refork_due: it served refork_after requests and may become the mold;
      # mold_ready: it is the mold, ready to fork workers.
      REPORTS = { booted: "r", alive: ".", refork_due: "R", mold_ready: "M" }.freeze
      # A status frame: STATUS, the values in STATUS_KEYS order, a newline.
      STATUS = "S"
      STATUS_KEYS = (Stats::COUNTERS + Stats::Memory::KEYS + Stats::OWN_COUNTERS + Stats::HISTOGRAM_KEYS).freeze
      STATUS_FRAME = /#{STATUS}(\d+(?:,\d+)*)\n/
      READ_SIZE = 65_536
      HANDOFF_CONTROL_LEN = 64 # bytes of control data a hand-over is read with: room for a few descriptors
      MAX_FRAME = 2048
      BECOME_MOLD = "mold"
      DRAIN = "drain"
      SERVE = "serve"
      FORK = "fork "
      FORK_LINE = /\A#{FORK}(\d+)/
      # How long the master waits for the mold's answer to a fork order.
      ANSWER_TIMEOUT = 5
      # Whether a handed-over connection served a request before (kept alive)
      # or is new: its new worker runs the header timeout on a new one, not
      # the keep-alive timeout.
      KEPT_ALIVE = { true => "k", false => "n" }.freeze
      NOTHING_ASKED = [].freeze

      # Three new links for one worker: [the master's side, the worker's side].
      def self.pair
        ios = []
        ios.concat(IO.pipe)
        ios.concat(UNIXSocket.pair)
        ios.concat(UNIXSocket.pair(:DGRAM))
        beat_r, beat_w, ctl, child_ctl, handoff, child_handoff = ios
        [new(beat_r, ctl, handoff), new(beat_w, child_ctl, child_handoff)]
      rescue SystemCallError # EMFILE: close the links already made
        ios.each(&:close)
        raise
      end

      attr_reader :beat, :ctl, :handoff

      # @param beat [IO] the heartbeat pipe's end (read: master; write: worker)
      # @param ctl [UNIXSocket] this side of the control socket
      # @param handoff [UNIXSocket] this side of the hand-over datagram socket
      def initialize(beat, ctl, handoff)
        @beat = beat
        @ctl = ctl
        @handoff = handoff
        @peeked = String.new(capacity: 1) # connection_waiting?'s and asked's buffers: a look allocates nothing
        @asked = String.new(capacity: 64)
        @partial = +""
        @last_status = nil
        @last_checkin = nil
      end

      # Master: the last status the worker sent (a Hash of STATUS_KEYS;
      # nil before the first) and when it arrived (a Time; nil before).
      attr_reader :last_status, :last_checkin

      # The three descriptors, in the order the mold sends them.
      def ios
        [@beat, @ctl, @handoff]
      end

      # Close this side's ends (those still open).
      def close
        ios.each { |io| io.close unless io.closed? }
      end

      # ---- heartbeat: worker to master ----

      # Worker: send +report+ (a key of REPORTS), with +status+ (a Hash with
      # the STATUS_KEYS) when given, without blocking; a full pipe
      # drops it (the next beat follows). Raises Errno::EPIPE once the master is gone.
      def report(report, status = nil)
        message = REPORTS.fetch(report)
        message += "#{STATUS}#{status.values_at(*STATUS_KEYS).map { |v| Integer(v) }.join(',')}\n" if status
        @beat.write_nonblock(message, exception: false)
      end

      # Mold: send +report+, waiting while the pipe is full (it must arrive).
      def report!(report)
        @beat.write(REPORTS.fetch(report))
      end

      # Master: the reports waiting in the pipe, as names (never blocks);
      # the last status among them is kept (#last_status, #last_checkin).
      # nil at EOF (the worker is gone); false when nothing was there.
      def read_reports
        data = @beat.read_nonblock(READ_SIZE, exception: false)
        return nil if data.nil?
        return false unless data.is_a?(String)

        data = take_statuses(@partial + data)
        REPORTS.filter_map { |name, byte| name if data.include?(byte) }
      end

      # ---- control: master to worker and mold ----

      # Master: ask the worker to stop serving and become the mold.
      def ask_to_become_mold
        @ctl.write("#{BECOME_MOLD}\n")
      end

      # Master: ask the worker to drain, then stop (it is replaced: drain_delay).
      def ask_to_drain
        @ctl.write("#{DRAIN}\n")
      end

      # Worker: what the master asked since the last look (never blocks): :mold (stop serving
      # and become the mold), :drain (drain, then stop).
      def asked
        command = @ctl.read_nonblock(64, @asked, exception: false)
        return NOTHING_ASKED unless command.is_a?(String)

        { BECOME_MOLD => :mold, DRAIN => :drain }.filter_map { |word, ask| ask if command.include?(word) }
      end

      # Master: order the mold to fork worker +index+.
      def order_fork(index)
        @ctl.write("#{FORK}#{index}\n")
      end

      # Mold: whether an order arrived within +timeout+ seconds.
      def order_waiting?(timeout)
        ready, = IO.select([@ctl], nil, nil, timeout)
        !ready.nil?
      end

      # Master: tell the mold that the workers are re-forked: it serves again.
      def ask_to_serve
        @ctl.write("#{SERVE}\n")
      end

      # Mold: read the next order (blocks): the index of the worker to fork,
      # :serve (serve again), or nil for any other line. Raises EOFError once
      # the master is gone.
      def next_order
        line = @ctl.gets
        raise EOFError, "the master is gone" if line.nil?
        return :serve if line.chomp == SERVE

        Integer(line[FORK_LINE, 1]) if line.start_with?(FORK)
      end

      # Mold: answer a fork order in one message, the new worker's +pid+ with
      # the master's ends of its links (+master_side+, a Channel) attached, so
      # the master gets all of it or nothing, never half.
      def answer_order(pid, master_side)
        @ctl.sendmsg("#{pid}\n", 0, nil, Socket::AncillaryData.unix_rights(*master_side.ios))
      end

      # Master: wait for the mold's answer to a fork order: [pid, Channel].
      # Raises MoldAnswerError (and closes what arrived) when it does not come within
      # ANSWER_TIMEOUT or is not a pid with three descriptors.
      def receive_answer
        raise IOError, "the mold did not answer" unless @ctl.wait_readable(ANSWER_TIMEOUT)

        data, _, _, rights = @ctl.recvmsg(64, 0, 64, scm_rights: true)
        ios = rights&.unix_rights || []
        pid = Integer(data.to_s.chomp, 10)
        raise IOError, "the mold sent #{ios.size} descriptors" unless ios.size == 3

        beat, ctl, handoff = ios
        [pid, Channel.new(beat, socket(ctl), socket(handoff))]
      rescue StandardError => e # the mold died (EOF), or answered nonsense
        ios&.each { |io| io.close unless io.closed? }
        raise MoldAnswerError.new(e.message, pid)
      end

      # ---- hand-over: idle connections, both ways ----

      # Send connection +io+ (it stays open here: close it) without blocking;
      # false when the peer's queue is full or it is gone.
      def send_connection_nonblock(io, kept_alive)
        rights = Socket::AncillaryData.unix_rights(io)
        @handoff.sendmsg_nonblock(KEPT_ALIVE.fetch(kept_alive), 0, nil, rights, exception: false) != :wait_writable
      rescue SystemCallError, IOError
        false
      end

      # Whether a handed-over connection waits to be received (never blocks).
      # A peek, not a poll: Ruby 3.1's wait_readable(0) returned nil now and
      # then with a datagram queued (a thread interrupt ends the zero wait).
      # recv into a kept buffer, not recvmsg: a worker asks every tick (5 ms),
      # and recvmsg's 4 KiB control buffer, garbage until the next GC, was
      # malloc'd each time among the heap its template shares with it: each
      # such block copies the pages it lands on (MiBs per worker after a refork).
      def connection_waiting?
        @handoff.recv_nonblock(1, Socket::MSG_PEEK, @peeked, exception: false) != :wait_readable
      rescue IOError, SystemCallError
        false
      end

      # Receive one connection sent by send_connection_nonblock: [io, kept_alive].
      # Raises SocketError for a datagram that lost its descriptor (EMFILE).
      def recv_connection
        # A control buffer for a few descriptors (one is sent), not recvmsg's
        # default 4 KiB: the master and the workers receive one per hand-over
        # under load, and each 4 KiB of garbage lands among shared pages.
        data, _addr, _flags, *controls = @handoff.recvmsg(1, 0, HANDOFF_CONTROL_LEN, scm_rights: true)
        ios = controls.select { |c| c.cmsg_is?(:SOCKET, :RIGHTS) }.flat_map(&:unix_rights)
        ios.drop(1).each(&:close)
        raise SocketError, "a hand-over datagram without its descriptor" if ios.empty?

        [ios.first, data != KEPT_ALIVE[false]]
      end

      private

      # Record the last whole status frame of +data+, keep an unfinished one
      # for the next read, and return the report bytes.
      def take_statuses(data)
        start = data.rindex(STATUS)
        @partial = start && !data.index("\n", start) ? data.slice!(start..) : +""
        @partial = +"" if @partial.bytesize > MAX_FRAME # never from a worker: do not let it grow
        last = nil
        data = data.gsub(STATUS_FRAME) do
          last = Regexp.last_match(1)
          ""
        end
        if last
          @last_status = STATUS_KEYS.zip(last.split(",").map(&:to_i)).to_h
          @last_checkin = Time.now
        end
        data
      end

      # A UNIXSocket for a descriptor received as a plain IO.
      def socket(io)
        UNIXSocket.for_fd(io.fileno).tap { io.autoclose = false }
      end
    end
  end
end
