# frozen_string_literal: true

require_relative "../errors"
require_relative "../clock"
require_relative "../log"

module Margay
  class Server
    # Internal: enforces config.request_timeout. Pool threads mark when their
    # app call starts; the supervisor calls #check every few ticks. A late
    # thread is interrupted with RequestTimeout (after logging its path and
    # backtrace); a thread that still has not let go after +grace+ seconds is
    # reported, once, through +on_stuck+ (a cluster worker then replaces itself).
    class Deadline
      # The thread-local under which a tracked thread keeps [started, env, state].
      KEY = :margay_request

      # @param timeout [Numeric] seconds an app call may run (config.request_timeout)
      # @param log [Log]
      # @param grace [Numeric] seconds an interrupted call has to let go before +on_stuck+
      # @param on_stuck [#call, nil] called once per call that ignores its interrupt
      def initialize(timeout, log:, grace: 5, on_stuck: nil)
        @timeout = timeout
        @grace = grace
        @log = log
        @on_stuck = on_stuck
        @lock = Mutex.new
      end

      # Run the block (one app call in a pool thread) under the deadline.
      # Pool threads defer RequestTimeout (RequestHandler#serve); only the app
      # call itself takes it at once. The check in #check and the end of
      # tracking share a lock, so an interrupt can only be aimed at a request
      # still running; one that arrives as the call returns is drained here
      # instead of hitting the next request.
      def track(env)
        Thread.current[KEY] = [Clock.now, env, false]
        Thread.handle_interrupt(RequestTimeout => :immediate) { yield }
      ensure
        @lock.synchronize { Thread.current[KEY] = nil }
        drain_pending
      end

      # From the supervisor: interrupt the +threads+ whose call is past the
      # deadline; report those still running +grace+ seconds after that.
      def check(threads)
        t = Clock.now
        threads.each do |thread|
          started, env, state = thread[KEY] # state: false, true (interrupted), :reported
          next unless started && t - started >= @timeout

          if !state
            interrupt(thread, t - started)
          elsif state == true && t - started > @timeout + @grace
            @log.error("request_timeout: #{Log.request(env)} ignores its interrupt for #{@grace}s: capacity lost")
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
        @log.error("request_timeout: #{Log.request(entry[1])} ran #{elapsed.round(1)}s (limit #{@timeout}s)\n#{trace}")
      end

      def drain_pending
        return unless Thread.pending_interrupt?(RequestTimeout)

        Thread.handle_interrupt(RequestTimeout => :immediate) { Thread.pass }
      rescue RequestTimeout
        nil
      end
    end
  end
end
