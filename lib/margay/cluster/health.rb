# frozen_string_literal: true

require_relative "../clock"

module Margay
  class Cluster
    # Internal: the master's periodic checks on its workers, from what they
    # report with their heartbeats. A worker silent for longer than it may
    # be is killed (#check_heartbeats; one told to stop gets its grace
    # period), a worker over worker_memory_limit is handed back to be
    # replaced (#check_memory), and Puma's idle_timeout is decided here
    # (#idle_too_long?). It owns the state those checks keep between rounds:
    # the workers' activity last seen and since when, and the next memory check.
    class Health
      # @param config [Configuration] worker_timeout, worker_boot_timeout,
      #   worker_memory_limit, idle_timeout
      # @param log [Log]
      # @param clock [#now] Margay::Clock (a test gives its own)
      def initialize(config:, log:, clock: Clock)
        @config = config
        @log = log
        @clock = clock
        @idle_activity = nil # idle_timeout: the workers' request and busy counts last seen, and since when
        @active_at = @clock.now
        @next_memory_check = 0
      end

      # Puma's idle_timeout in a cluster: true once no worker of +roster+ has
      # answered a request, or had one running, for idle_timeout seconds
      # (from the counters each worker sends with its heartbeat, so to within
      # a second).
      def idle_too_long?(roster)
        return false unless @config.idle_timeout

        statuses = roster.serving.map { |w| w.channel.last_status || {} }
        activity = [statuses.sum { |s| s[:requests_count].to_i }, statuses.sum { |s| s[:busy_threads].to_i }]
        now = @clock.now
        if activity != @idle_activity || activity.last.positive?
          @idle_activity = activity
          @active_at = now
          return false
        end
        return false if now - @active_at < @config.idle_timeout

        @log.info("master: no request for #{@config.idle_timeout}s (idle_timeout): stopping")
        true
      end

      # A worker of +roster+ that stopped reporting is killed, unless it was
      # told to stop: while it finishes its requests it does not report, and
      # it has +grace+ + 5 s for that, however short worker_timeout is.
      def check_heartbeats(roster, grace:)
        roster.each do |w|
          if w.stop_at
            next if @clock.now - w.stop_at < grace + 5

            @log.error("master: #{w} still stopping after #{grace + 5}s: killing it")
            w.stop_at = @clock.now # one kill per grace period
          else
            limit = w.heartbeat_timeout(@config)
            next if @clock.now - w.last_beat < limit

            @log.error("master: #{w} silent for #{limit}s: killing it")
            w.last_beat = @clock.now # one kill per timeout
          end
          w.kill(:KILL)
        end
      end

      # worker_memory_limit: yields each booted serving worker of +roster+
      # over it (logged), to finish its requests and be replaced. At most
      # once a second.
      def check_memory(roster)
        limit = @config.worker_memory_limit
        return unless limit && @clock.now >= @next_memory_check

        @next_memory_check = @clock.now + 1
        roster.serving.select(&:booted?).each do |w|
          rss = w.rss_bytes
          next unless rss && rss > limit

          @log.warn("master: #{w} RSS #{rss / 1024 / 1024} MiB over the limit of " \
                    "#{limit / 1024 / 1024} MiB: replacing it")
          yield w
        end
      end
    end
  end
end
