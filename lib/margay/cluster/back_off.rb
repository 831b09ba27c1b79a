# frozen_string_literal: true

require_relative "../clock"

module Margay
  class Cluster
    # Internal: the master's back-off after workers fail to boot. Each
    # failure (a worker that exited before it served, or a fork that could
    # not be made) delays the next start instead of fork-looping: 1, 2,
    # 4 ... MAX seconds; a worker that boots ends the streak. It owns the
    # count of failures in a row and the moment the next start may come.
    class BackOff
      # The longest delay, in seconds.
      MAX = 30

      # @param log [Log] where each failure and its delay are logged
      # @param clock [#now] Margay::Clock (a test gives its own)
      def initialize(log:, clock: Clock)
        @log = log
        @clock = clock
        @failures = 0
        @next_at = 0
      end

      # Failures in a row since the last worker booted.
      attr_reader :failures

      # A worker failed to boot: delay the next start (logged).
      def failed!
        @failures += 1
        delay = [2**(@failures - 1), MAX].min
        @next_at = @clock.now + delay
        @log.warn("master: worker boot failed #{@failures} time(s); next attempt in #{delay}s")
      end

      # A worker booted: the next failure waits 1 s again.
      def booted!
        @failures = 0
      end

      # True while the next start must wait.
      def waiting?
        @clock.now < @next_at
      end
    end
  end
end
