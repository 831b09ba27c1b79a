# frozen_string_literal: true

require_relative "../clock"
require_relative "../process/systemd"
require_relative "../control/operations"

module Margay
  # Cluster mode's restarts, the master's side: USR1 replaces the workers one at a time,
  # USR2 drains (drain_delay), stops them and re-executes the master.
  class Cluster
    private

    # USR1: replace workers one at a time. The mold goes too, so that new
    # workers load the app anew (unless it is preloaded in the master).
    def phased_restart
      return if @stopping || @drain_until

      @log.info("master: phased restart of #{@workers.serving.size} workers")
      reload_tls("master: ") # the new workers start with the certificates on disk now
      Systemd.notify("RELOADING=1")
      @phase += 1
      @ready = false
      @auto_reforked = false
      @workers.each { |w| w.mold? ? retire(w) : w.retire_later! }
    end

    # USR2: stop the workers gracefully, then re-execute the master with the
    # listening sockets inherited, so no connection is refused: they wait in
    # the listen backlog until the new workers accept them.
    def hot_restart
      return if @stopping || @drain_until
      return @log.warn("master: USR2 ignored: no command line to re-execute") unless @restart_argv

      @log.info("master: hot restart")
      Operations.fire(:before_restart) # plugins' event (Puma fires it on a hot restart only)
      Systemd.notify("RELOADING=1")
      return abandon_hot_restart unless drain_before_restart

      signal_workers(:TERM)
      deadline = Clock.now + grace_period + 5
      until @workers.empty?
        force_stop if Clock.now > deadline
        return abandon_hot_restart unless restart_turn
      end
      @exits.report(flush: true)
      hook(:before_restart, @launcher) # Puma's moment: the workers are gone, the exec is next
      reexec
    end

    # drain_delay: the whole cluster drains before a hot restart, as before a stop (the
    # balancer takes this instance out until the new workers are ready). False: a stop came.
    def drain_before_restart
      return true unless @config.drain_delay.positive?

      @log.info("master: draining for #{@config.drain_delay}s (not ready, connection: close) before restarting")
      @board.drain!
      deadline = Clock.now + @config.drain_delay
      while Clock.now < deadline
        return false unless restart_turn(deadline - Clock.now)
      end
      true
    end

    # One turn of the master while a hot restart waits (for the drain's end, then for the old
    # workers to exit): events for up to +within+ seconds, exits, the watchdog. False once a
    # stop is queued.
    def restart_turn(within = nil)
      wait_for_events(within)
      @exits.reap(stopping: @stopping)
      watchdog_ping
      !@signals.stop_queued?
    end

    # Replace this process by a new master that inherits the listeners (and
    # the connections the Forwarder holds). If
    # that fails (the Ruby binary or the script was removed, say), the master
    # carries on: the supervision loop starts new workers.
    def reexec
      held_env, held_fds = @forwarder.exec_handover # connections handed over as the workers stopped
      Systemd.notify("WATCHDOG=1")
      super(@restart_argv, env: held_env, fds: held_fds)
    rescue SystemCallError => e
      @log.error("master: hot restart failed: cannot re-execute (#{e.message}); starting workers again")
      @ready = false
    end

    # A stop asked for while the old workers were finishing: stop instead of
    # re-executing (the new process would not know it was asked to stop).
    def abandon_hot_restart
      @log.info("master: stop requested during the hot restart: stopping instead")
      begin_stop
    end

    # One retiring worker at a time, and only while every other worker is up.
    def step_phased_restart
      return if @workers.serving.any? { |w| !w.booted? }
      return if @workers.any? { |w| w.retiring? && w.stopping? }

      old = @workers.serving.find(&:retiring?)
      retire(old) if old
    end
  end
end
