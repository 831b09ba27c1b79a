# frozen_string_literal: true

require_relative "process/binder"
require_relative "log"
require_relative "runner"
require_relative "process/systemd"

module Margay
  # Internal: single mode, one process serving with one Server (Cluster is the
  # other mode). Its lifecycle: trap the signals, load the app, bind, serve
  # until stopped, then exit or restart in place; and its signals, as Puma's
  # (docs/SIGNALS.md). The Launcher runs it and does what both modes share
  # (the app, the pidfile, the banner, the control app).
  class Single
    # The Server once #run made it (nil before).
    attr_reader :server

    # @param launcher [Launcher] the steps both modes share
    # @param config [Configuration]
    # @param log [Log]
    # @param restart_argv [Array<String>, nil] the command line a restart in
    #   place re-executes; nil: a restart is refused
    def initialize(launcher, config, log:, restart_argv:)
      @launcher = launcher
      @config = config
      @log = log
      @restart_argv = restart_argv
      @server = nil
      @restart = nil
      @stop_requested = false
      @draining = false
    end

    # Serve until TERM or INT. Yields the bound server before serving when a
    # block is given. Returns the exit status.
    def run
      previous = trap_signals # before the app loads, as Puma: a signal during boot is not fatal
      close_inherited_connections
      warn_cluster_hooks
      app, description = @launcher.load_app
      require_relative "server"
      @server = Server.new(app, @config, log: @log)
      @server.stop if @stop_requested # TERM/INT/HUP arrived while the app loaded
      @server.bind
      @launcher.write_pidfile
      ops = @launcher.announce(@server, description)
      yield @server if block_given?
      ops.booted # plugins' after_booted
      @server.run { @config.run_hook(:after_booted, log: @log) }
      return restart! if @restart

      @launcher.stopped
    ensure
      @launcher.stop_operations
      previous&.each { |signal, handler| Signal.trap(signal, handler || "DEFAULT") }
      @launcher.remove_pidfile unless @restart
    end

    # Hot restart, trap-safe: finish the requests in flight, then re-execute
    # in place (same pid) with the listeners inherited. Returns false when
    # there is no command line to re-execute, nothing runs yet, or a stop
    # came first.
    def restart
      return false unless @restart_argv && @server
      return false if @stop_requested # a stop wins over a restart, whichever came first

      @restart = true
      @server.keep_listeners_on_stop!
      if @config.drain_delay.positive?
        # unready and connection: close first, as before a stop: the balancer takes this
        # instance out and its kept-alive connections close after a response, none cut while
        # idle. A TERM meanwhile stops at once, as a second TERM does after a drain's.
        @draining = true
        @server.drain(@config.drain_delay)
      else
        @server.stop
      end
      true
    end

    # Graceful stop, trap-safe.
    def stop
      @server&.stop
      nil
    end

    private

    # The requests in flight are done and the listeners still open: become
    # the new process. If exec fails the listeners are closed and the process
    # exits 1 (it has stopped serving).
    def restart!
      @log.info("Margay restarting in place (pid #{Process.pid})")
      Systemd.notify("RELOADING=1")
      Operations.fire(:before_restart) # plugins' event, whoever asked for the restart
      @config.run_hook(:before_restart, @launcher, log: @log)
      @server.reexec(@restart_argv)
    rescue SystemCallError => e
      @log.error("restart failed: cannot re-execute (#{e.message}); stopping")
      @server.listeners.each { |l| l.io.close unless l.io.closed? }
      @launcher.remove_pidfile
      1
    end

    # Puma prints the same: these hooks run only in cluster mode.
    def warn_cluster_hooks
      @config.cluster_only_hooks.each do |name|
        @log.warn("the #{name} hook only runs in cluster mode (workers > 0): it will not run in this single process")
      end
    end

    # A hot restart from cluster mode into single mode: the connections the old
    # master held for its workers have nobody to serve them here.
    def close_inherited_connections
      return unless ENV.key?(Binder::INHERIT_CONNECTIONS_ENV)

      require_relative "cluster/balancer"
      Cluster::Balancer::Forwarder.close_inherited
    end

    # TERM and INT stop gracefully (a second INT exits at once); USR2 and USR1
    # restart in place; HUP reopens the redirected stdout/stderr, or stops
    # gracefully when nothing is redirected; ALRM reloads the TLS certificates. Returns the previous handlers so
    # that #run can put them back.
    def trap_signals
      interrupted = false
      previous = {}
      previous["TERM"] = Signal.trap("TERM") { graceful_stop("TERM") }
      previous["INT"] = Signal.trap("INT") do
        force_exit if interrupted
        interrupted = true
        graceful_stop("INT")
      end
      previous["USR2"] = Signal.trap("USR2") { restart_signal("USR2") }
      previous["USR1"] = Signal.trap("USR1") { restart_signal("USR1") }
      previous["HUP"] = Signal.trap("HUP") { hangup }
      unless RUBY_ENGINE == "jruby" # no TLS there (and the JVM keeps some signals)
        previous[Runner::TLS_RELOAD_SIGNAL] = Signal.trap(Runner::TLS_RELOAD_SIGNAL) { in_thread { @server&.reload_tls } }
      end
      if (sig = Runner::BACKTRACE_SIGNAL) # logging takes locks a trap may not: a thread does it
        previous[sig] = Signal.trap(sig) { in_thread { @log.thread_backtraces } }
      end
      previous
    end

    # Logging takes locks a trap may not: a thread does the trap's work.
    def in_thread(&)
      Thread.new(&)
    rescue ThreadError # no thread to be had (a pids limit): not this time
      nil
    end

    def restart_signal(signal)
      phased = " (no phased restart in single mode: restarting)" if signal == "USR1"
      return say("SIG#{signal} ignored: no command line to re-execute") unless @restart_argv

      drain = " draining for #{@config.drain_delay}s (not ready, connection: close)," if @config.drain_delay.positive?
      say("SIG#{signal} received#{phased}:#{drain} finishing requests in flight, then restarting in place")
      restart
    end

    # Reopening files takes locks a trap may not: a thread does it.
    def hangup
      return graceful_stop("HUP") unless @config.redirect_stdout || @config.redirect_stderr

      Log.reopen_later(@config, @log, "")
    end

    # Trap context: no mutexes. Server#stop and #drain are trap-safe; the log line is best effort.
    # TERM with drain_delay drains first (a second TERM, or INT, stops at once).
    def graceful_stop(signal)
      return drain if signal == "TERM" && @config.drain_delay.positive? && !@draining && @server

      @stop_requested = true
      restarting = @restart
      @restart = false # a restart under way becomes a stop (as in a cluster)
      return say("SIG#{signal} received while booting: stopping once booted") unless @server

      say("SIG#{signal} received: stopping gracefully (up to #{@server.grace_period}s for requests in flight" \
          "#{'; Ctrl-C again to force' if signal == 'INT'})")
      @server.close_listeners_on_stop! if restarting # they were to stay open for the new process
      @server.stop
    end

    def drain
      @draining = @stop_requested = true
      @server.close_listeners_on_stop! if @restart # they were to stay open for the new process
      @restart = false
      say("SIGTERM received: draining for #{@config.drain_delay}s (not ready, connection: close), then stopping " \
          "gracefully; TERM again to stop now")
      @server.drain(@config.drain_delay)
    end

    def force_exit
      say("Second SIGINT: exiting without waiting")
      @launcher.remove_pidfile
      Process.exit!(Launcher::FORCED_EXIT_STATUS)
    end

    def say(message)
      @log.info(message)
    rescue ThreadError
      nil # the log stream's lock was held by the interrupted code; the stop matters more
    end
  end
end
