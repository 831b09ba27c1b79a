# frozen_string_literal: true

require_relative "../runner"

module Margay
  class Cluster < Runner
    # Internal, part of Cluster (the master): making workers, by fork or from
    # the mold, the first code a forked worker runs, reforking, and passing
    # idle keep-alive connections between workers.
    module Spawning
      private

      def spawn_worker
        index = free_index
        source = mold
        if source&.mold == :ready
          spawn_from_mold(source, index) # the mold runs before_fork itself: it is the process that forks
        else
          hook(:before_fork, index)
          fork_worker(index)
        end
      rescue SystemCallError => e # fork: EAGAIN (process limit), ENOMEM; pipes: EMFILE
        @log.error("master: cannot start worker #{index}: #{e.message}")
        back_off
      end

      def fork_worker(index)
        ios = [IO.pipe, UNIXSocket.pair, UNIXSocket.pair(:DGRAM)].flatten
        beat_r, beat_w, ctl, child_ctl, handoff, child_handoff = ios
        queued = @signals.size
        pid = fork do
          [beat_r, ctl, handoff, @wake_r, @wake_w].each(&:close)
          worker_main(index, queued, beat: beat_w, ctl: child_ctl, handoff: child_handoff)
        end
        [beat_w, child_ctl, child_handoff].each(&:close)
        add_worker(index, pid, beat_r, ctl, handoff)
      rescue SystemCallError
        ios&.each { |io| io.close unless io.closed? }
        raise
      end

      # The first code of a forked worker; never returns into the master's code.
      # Until the master's traps are replaced, a signal sent to the new worker
      # runs the master's handler in the child, which only records it: the
      # signals recorded after +queued+ are the child's own, and a stop among
      # them ends it at once. Until WorkerProcess installs its own handlers, a
      # stop ends it at once and the other master signals are ignored (HUP goes
      # to the app's own handler, if it has one).
      def worker_main(index, queued, **channels)
        @workers.each_value { |w| [w.beat, w.ctl, w.handoff].each(&:close) }
        STOP_SIGNALS.each { |sig| trap(sig) { exit!(0) } }
        (MASTER_SIGNALS - STOP_SIGNALS).each { |sig| trap(sig, "IGNORE") }
        trap("HUP", @app_traps["HUP"]) if @app_traps["HUP"].is_a?(Proc)
        own = @signals.drop(queued)
        exit!(0) if own.intersect?(STOP_SIGNALS)
        Process.kill(:HUP, Process.pid) if own.include?("HUP") && @app_traps["HUP"].is_a?(Proc)
        app = @app || @app_loader.call
        WorkerProcess.new(index: index, app: app, config: @config, log: @log, listeners: @listeners, board: @board,
                          **channels).run
      rescue Exception => e # rubocop:disable Lint/RescueException -- a child must never return into the master's code
        @log.exception(e.cause || e, "worker #{index} failed to boot")
        exit!(1)
      end

      # Ask the mold for a worker. It answers in one message: the pid, with
      # the heartbeat pipe, the control socket and the hand-over socket
      # attached, so the answer is whole or missing, never half.
      def spawn_from_mold(source, index)
        source.ctl.write("fork #{index}\n")
        raise IOError, "the mold did not answer" unless source.ctl.wait_readable(5)

        data, _, _, rights = source.ctl.recvmsg(64, 0, 64, scm_rights: true)
        ios = rights&.unix_rights || []
        pid = Integer(data.to_s.chomp, 10)
        raise IOError, "the mold sent #{ios.size} descriptors" unless ios.size == 3

        beat, ctl, handoff = ios
        add_worker(index, pid, beat, socket(ctl), socket(handoff))
      rescue StandardError => e # the mold died (EOF), or answered nonsense
        ios&.each { |io| io.close unless io.closed? }
        kill_pid(pid, :KILL) if pid # a child nobody would supervise
        @log.error("master: forking from the mold failed (#{e.message}): dropping the mold")
        retire(source)
      end

      # A UNIXSocket for a descriptor received as a plain IO.
      def socket(io)
        UNIXSocket.for_fd(io.fileno).tap { io.autoclose = false }
      end

      def add_worker(index, pid, beat, ctl, handoff)
        @workers[pid] = WorkerRecord.new(index: index, pid: pid, beat: beat, ctl: ctl, handoff: handoff,
                                         last_beat: now, booted: false, retiring: false, stopping: false,
                                         mold: nil, stop_at: nil)
      end

      def free_index
        ((0..@workers.size + @target).to_a - @workers.values.reject(&:mold).map(&:index)).first
      end

      # ---- reforking ----

      # The warm worker stops serving and becomes the mold; once it is ready,
      # the other workers are replaced by its children one at a time. A worker
      # on its way out (a phased restart replacing old code) never becomes it.
      def promote(worker)
        return if worker.nil? || worker.retiring || worker.stopping || mold || @stopping

        @log.info("master: worker #{worker.index} (pid #{worker.pid}) becomes the mold")
        worker.mold = :pending
        worker.ctl.write("mold\n")
      rescue IOError, SystemCallError
        nil
      end

      def mold_ready(worker)
        return kill(worker, :TERM) if worker.stopping # told to stop while it was draining

        worker.mold = :ready
        @log.info("master: mold ready (pid #{worker.pid}); re-forking the workers from it")
        serving.each { |w| w.retiring = true }
      end

      # ---- keep-alive hand-over ----

      # A saturated worker handed over an idle connection: pass it to the
      # serving worker with the fewest connections (round robin among
      # equals), or back to it if there is no other. Never blocks: a worker
      # that does not take its hand-overs (stuck) must not stall the master,
      # so the connection then goes to the next one, or is closed when none
      # takes it.
      def forward_connection(from)
        io, kept_alive = Cluster.recv_connection(from.handoff)
        others = serving.select(&:booted) - [from]
        others << from if others.empty? && !from.stopping && !from.mold
        others.rotate!((@next_target = (@next_target || 0) + 1) % others.size) unless others.empty?
        others = others.each_with_index.sort_by { |w, i| [connections_of(w), i] }.map(&:first) # fewest first
        taker = others.find { |w| Cluster.send_connection_nonblock(w.handoff, io, kept_alive) }
        @log.warn("master: no worker took a handed-over connection: closed") unless taker
      rescue StandardError => e # SocketError: a datagram without its descriptor (EMFILE)
        @log.warn("master: keep-alive hand-over failed: #{e.message}")
      ensure
        io&.close
      end

      def connections_of(worker)
        worker.index < @board.size ? @board.connections(worker.index) : 0
      end
    end

    # A handed-over connection travels as one datagram: its descriptor, and
    # one byte saying whether it served a request before ("k", kept alive) or
    # is new ("n": its new worker runs the header timeout, not the keep-alive one).
    KEPT_ALIVE = { true => "k", false => "n" }.freeze

    # Send connection +io+ over the datagram socket +sock+ without blocking;
    # false when the peer's queue is full or it is gone.
    def self.send_connection_nonblock(sock, io, kept_alive)
      rights = Socket::AncillaryData.unix_rights(io)
      sock.sendmsg_nonblock(KEPT_ALIVE.fetch(kept_alive), 0, nil, rights, exception: false) != :wait_writable
    rescue SystemCallError, IOError
      false
    end

    # Receive one connection sent by send_connection_nonblock: [io, kept_alive].
    # Raises SocketError for a datagram that lost its descriptor (EMFILE).
    def self.recv_connection(sock)
      data, _addr, _flags, *controls = sock.recvmsg(1, 0, nil, scm_rights: true)
      ios = controls.select { |c| c.cmsg_is?(:SOCKET, :RIGHTS) }.flat_map(&:unix_rights)
      ios.drop(1).each(&:close)
      raise SocketError, "a hand-over datagram without its descriptor" if ios.empty?

      [ios.first, data != KEPT_ALIVE[false]]
    end
  end
end
