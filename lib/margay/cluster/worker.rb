# frozen_string_literal: true

require_relative "../server"
require_relative "../clock"
require_relative "balancer"
require_relative "channel"
require_relative "mold"
require_relative "signals"
require_relative "../stats"
require_relative "../metrics"

module Margay
  class Cluster
    # Internal: the child side of cluster mode. A worker runs a Server on the
    # listeners inherited from the master and reports to it through its
    # Channel: "booted" once serving, "alive" every second (each with its
    # counters and memory), "refork due" once it has served refork_after
    # requests. When the master asks, it stops serving and becomes the mold
    # (Mold), then serves again once the workers are re-forked from it. With
    # balance_keepalive its Balancer moves idle connections to and from the
    # other workers.
    class Worker
      # At most; a quarter of worker_timeout when that is shorter, so that a
      # short timeout never kills a worker whose beat is merely due.
      HEARTBEAT_INTERVAL = 1.0
      # Seconds between looks at the requests waiting for a thread, written on the board (the
      # live figures of GET /queue; a look costs one ioctl per connection while every thread is busy).
      QUEUE_LOOK_INTERVAL = 0.1

      # @param index [Integer] the worker's slot
      # @param app [#call, nil] the Rack app (nil: +app_loader+ loads it, after before_worker_boot as in Puma)
      # @param app_loader [#call, nil] loads the app when +app+ is nil
      # @param config [Configuration]
      # @param log [Log]
      # @param listeners [Array<Binder::Listener>] the master's, inherited
      # @param channel [Channel] the worker's side of its links to the master
      # @param board [Native::IdleBoard, nil] the cluster's count of waiting
      #   threads and connections per worker
      # @param resumed [Boolean] the mold serving again (Puma's worker 0 after
      #   a refork): before_worker_boot ran in this process already
      # @param hook_data [Hash] the per-key hook data of this process so far
      # @param health_listeners [Array<Binder::Listener>] the master's health listeners, inherited
      def initialize(index:, app:, config:, log:, listeners:, channel:, board: nil, app_loader: nil, resumed: false,
                     hook_data: {}, health_listeners: [])
        @index = index
        @app = app
        @app_loader = app_loader
        @config = config
        @log = log
        @listeners = listeners
        @health_listeners = health_listeners
        @channel = channel
        @board = board
        @server = nil
        @balancer = nil
        @mold_requested = false
        @refork_reported = false
        @last_beat = nil
        @last_queue_look = nil
        @orphaned = false
        @terminating = false
        @hook_data = hook_data # Puma's per-key hook data, for this process's life
        @resumed = resumed
        @beat_interval = [HEARTBEAT_INTERVAL, config.worker_timeout / 4.0].min
        @gc_requests = 0 # out_of_band_gc: the request count at the last one
      end

      # Serve until told to stop (or to become the mold); never returns.
      def run
        Process.setproctitle(title("worker #{@index}"))
        Stats.memory_source = nil # the master's, inherited: a worker answers its own
        Stats::Memory.boot!
        hook(:before_worker_boot, @index) unless @resumed
        @app ||= @app_loader.call
        idle_board = [@board, @index] if @board && @index < @board.size
        @server = Server.new(@app, @config, log: @log, listeners: @listeners, on_tick: method(:tick),
                                            on_stuck: -> { @server.stop }, idle_board: idle_board,
                                            health_listeners: @health_listeners)
        @balancer = Balancer.new(server: @server, channel: @channel, log: @log, index: @index)
        Stats.source = Stats::WorkerSource.new(@server, @config.max_threads) # Margay.stats_hash here
        Signals::STOP.each { |sig| trap(sig) { terminate } }
        (Signals::MASTER - Signals::STOP - %w[HUP]).each { |sig| trap(sig, "IGNORE") }
        trap_hup
        trap_tls_reload
        @server.run
        @balancer.return_handed_over
        become_mold if @mold_requested && !@terminating
        hook(:before_worker_shutdown, @index) # connections are drained; the app is still loaded
        exit!(0)
      rescue Exception => e # rubocop:disable Lint/RescueException -- a child must never return into the master's code
        @log.exception(e.is_a?(AppLoadError) && e.cause ? e.cause : e, "worker #{@index} failed#{' to boot' unless @server}")
        exit!(1)
      end

      private

      def hook(name, *args)
        @config.run_hook(name, *args, log: @log, data: @hook_data)
      end

      # "margay: worker 0 [tag]": the tag as in the master's title (Runner.title).
      def title(what)
        tag = @config.tag || File.basename(Dir.pwd)
        "margay: #{what}#{" [#{tag}]" unless tag.to_s.empty?}"
      end

      # The master's ALRM, passed on: this worker's TLS contexts read the certificates again (in
      # a thread: a trap may not take the locks logging takes).
      def trap_tls_reload
        trap(Runner::TLS_RELOAD_SIGNAL) do
          Thread.new { TLS.reload(@listeners, @log, "worker #{@index}: ") }
        rescue ThreadError # no thread to be had (a pids limit): this worker keeps its certificates
          nil
        end
      end

      # HUP never kills a worker: it reopens the redirected stdout/stderr
      # (the master reopened its own), and an app's own handler (reopening
      # its logs) still runs; what that handler raises is logged, not raised
      # into the main thread (which it would end, the requests in flight with it).
      def trap_hup
        app_hup = trap("HUP", "IGNORE")
        app_hup = nil unless app_hup.is_a?(Proc)
        redirected = @config.redirect_stdout || @config.redirect_stderr
        return unless redirected || app_hup

        trap("HUP") do |signo|
          Log.reopen_later(@config, @log, "worker #{@index}: ") if redirected
          call_app_hup(app_hup, signo) if app_hup
        end
      end

      # Trap context: the log line is written by a thread (logging takes locks a trap may not).
      def call_app_hup(handler, signo)
        handler.call(signo)
      rescue StandardError => e
        begin
          Thread.new { @log.exception(e, "worker #{@index}: the app's HUP handler raised (serving on)") }
        rescue ThreadError # no thread to be had: not said
          nil
        end
      end

      # TERM/INT/QUIT: stop serving, and do not become the mold either, if that
      # was asked for (the master is stopping or replacing this worker).
      # +drain+: for that many seconds first (the master replaces this worker: drain_delay).
      def terminate(drain: 0)
        @terminating = true
        @server.close_listeners_on_stop!
        drain.positive? ? @server.drain(drain) : @server.stop
      end

      # From the server's supervisor, about every 5 ms.
      def tick
        now = Clock.now
        if @last_beat.nil? || now - @last_beat >= @beat_interval
          report(@last_beat ? :alive : :booted)
          @last_beat = now
          report_refork_due
        end
        if @last_queue_look.nil? || now - @last_queue_look >= QUEUE_LOOK_INTERVAL
          @server.queue_look # onto the board, for GET /queue
          @last_queue_look = now
        end
        asked = @channel.asked
        terminate(drain: @config.drain_delay) if asked.include?(:drain)
        if asked.include?(:mold)
          @mold_requested = true # before balancing: a mold-to-be takes no more hand-overs
          return @server.stop
        end
        # A worker told to stop (or to become the mold) hands nothing over:
        # the master may have no serving worker left to take it. One replaced
        # with a drain does, until the drain ends: the others serve, and a
        # request it holds unread would be lost if it were killed meanwhile.
        if !@mold_requested && (!@terminating || @server.draining?)
          @balancer.balance(now, keepalive: @config.balance_keepalive)
        end
        out_of_band_gc if @config.out_of_band_gc && !@mold_requested && !@terminating
      end

      # out_of_band_gc N: once N requests were served since the last one and
      # no request runs, a full GC and malloc_trim, here on the main thread,
      # between requests rather than in one (a request arriving meanwhile
      # waits for its end: the GVL is held). Memory freed in this process
      # goes back to the system instead of waiting for a GC under load.
      def out_of_band_gc
        stats = @server.stats(backlog: false)
        return if stats[:requests] - @gc_requests < @config.out_of_band_gc || stats[:busy_threads].positive?

        @gc_requests = stats[:requests]
        GC.start
        Native.malloc_trim
      end

      def report_refork_due
        limit = @config.refork_after
        return if @refork_reported || limit.nil? || @server.stats(backlog: false)[:requests] < limit

        @refork_reported = true
        report(:refork_due)
      end

      # A broken heartbeat pipe means the master is gone (killed, or
      # crashed): nobody supervises this worker any more, so it finishes its
      # requests in flight and exits instead of serving on alone.
      def report(report)
        stats = @server.stats
        @channel.report(report, Stats.counters(stats, @config.max_threads)
                                     .merge(Stats.own_counters(stats), Stats::Memory.current,
                                            Stats.histogram_integers(stats)))
      rescue Errno::EPIPE, IOError
        return if @orphaned

        @orphaned = true
        @log.warn("worker #{@index}: the master is gone: finishing requests in flight, then exiting")
        terminate
      end

      # The master asked for a mold: this warm process stops being a worker
      # (its engine and pool threads are gone: nothing forks while they run)
      # and forks the new workers; once they are all there, it serves again
      # as this worker (a new Server on the same listeners and links). Never returns.
      def become_mold
        Process.setproctitle(title("mold (from worker #{@index})"))
        Signals::STOP.each { |sig| trap(sig) { exit!(0) } }
        exit!(0) if @terminating # told to stop while it was draining
        hook(:before_refork, nil) # Puma's moment: it stopped serving, the re-forks come next
        mold = Mold.new(index: @index, config: @config, log: @log, channel: @channel, beat_interval: @beat_interval,
                        hook_data: @hook_data)
        mold.run do |index, channel|
          Worker.new(index: index, app: @app, config: @config, log: @log, listeners: @listeners, channel: channel,
                     board: @board, health_listeners: @health_listeners).run
        end
        Worker.new(index: @index, app: @app, config: @config, log: @log, listeners: @listeners, channel: @channel,
                   board: @board, resumed: true, hook_data: @hook_data, health_listeners: @health_listeners).run
      end
    end
  end
end
