# frozen_string_literal: true

module Margay
  # Raised inside a pool thread whose app call ran past config.request_timeout.
  # An Exception, not a StandardError, so that an app's `rescue => e` does not
  # swallow it; RequestHandler turns it into a 503 (or a closed connection).
  class RequestTimeout < Exception; end # rubocop:disable Lint/InheritException

  # Internal: enforces config.request_timeout. Pool threads mark when their
  # app call starts; the server's supervisor calls #check every few ticks.
  # A late thread is interrupted with RequestTimeout (after logging its path
  # and backtrace); a thread that still has not let go after +grace+ seconds
  # is reported through +on_stuck+ (a cluster worker then replaces itself).
  class Deadline
    KEY = :margay_request

    def initialize(timeout, log:, grace: 5, on_stuck: nil)
      @timeout = timeout
      @grace = grace
      @log = log
      @on_stuck = on_stuck
      @lock = Mutex.new
    end

    # Around one app call in a pool thread. Pool threads defer RequestTimeout
    # (Server#serve); only the app call itself takes it at once. The check in
    # #check and the end of tracking share a lock, so an interrupt can only
    # be aimed at a request still running; one that arrives as the call
    # returns is drained here instead of hitting the next request.
    def track(env)
      Thread.current[KEY] = [now, env, false]
      Thread.handle_interrupt(RequestTimeout => :immediate) { yield }
    ensure
      @lock.synchronize { Thread.current[KEY] = nil }
      drain_pending
    end

    # From the supervisor: interrupt threads past the deadline.
    def check(threads)
      t = now
      threads.each do |thread|
        started, env, interrupted = thread[KEY]
        next unless started && t - started >= @timeout

        if !interrupted
          interrupt(thread, t - started)
        elsif t - started > @timeout + @grace
          @log.error("request_timeout: #{describe(env)} ignores its interrupt for #{@grace}s: capacity lost")
          thread[KEY] = [started, env, :reported] if thread[KEY]
          @on_stuck&.call
        end
      end
    end

    private

    def interrupt(thread, elapsed)
      entry = nil
      @lock.synchronize do
        entry = thread[KEY]
        next unless entry

        thread[KEY] = [entry[0], entry[1], true]
        thread.raise(RequestTimeout, "request ran past request_timeout (#{@timeout}s)")
      end
      return unless entry

      trace = (thread.backtrace || []).first(20).map { |l| "    #{l}" }.join("\n")
      @log.error("request_timeout: #{describe(entry[1])} ran #{elapsed.round(1)}s (limit #{@timeout}s)\n#{trace}")
    end

    def drain_pending
      return unless Thread.pending_interrupt?(RequestTimeout)

      Thread.handle_interrupt(RequestTimeout => :immediate) { Thread.pass }
    rescue RequestTimeout
      nil
    end

    def describe(env)
      "#{env['REQUEST_METHOD']} #{env['PATH_INFO']}"
    end

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end
end
