# frozen_string_literal: true

require_relative "../stats"

module Margay
  class Cluster
    # Internal: the master's record of one worker process, or of the mold (a
    # worker that stopped serving to fork the others). A worker moves through
    # booting -> booted, may be marked retiring (to be replaced, one at a
    # time), and ends stopping (told to stop: it gets its grace period + 5 s
    # from stop_at). A mold is pending (draining its connections) until it
    # reports ready; from then on it forks the new workers.
    class WorkerRecord
      # index: the worker's slot (0...workers); pid; channel: the master's
      # side of its links (Channel).
      attr_reader :index, :pid, :channel
      # last_beat: when it last reported; stop_at: when it was told to stop
      # (nil until then). Monotonic seconds (Clock.now).
      attr_accessor :last_beat, :stop_at
      # When the master started it (a Time: Puma's stats show it).
      attr_reader :started_at

      # @param now [Float] Clock.now: a new worker has its boot timeout from now
      def initialize(index:, pid:, channel:, now:)
        @index = index
        @pid = pid
        @channel = channel
        @last_beat = now
        @stop_at = nil
        @booted = false
        @retiring = false
        @stopping = false
        @mold = nil
        @started_at = Time.now
      end

      # It reported that it serves.
      def booted?
        @booted
      end

      # Record its first report.
      def booted!
        @booted = true
      end

      # Marked to be replaced (phased restart, or reforking from the mold).
      def retiring?
        @retiring
      end

      # Mark it to be replaced once the others are up.
      def retire_later!
        @retiring = true
      end

      # It was told to stop.
      def stopping?
        @stopping
      end

      # Record that it was told to stop at +now+ (the first time counts).
      def stopping!(now)
        @stopping = true
        @stop_at ||= now
      end

      # It is the mold, pending or ready.
      def mold?
        !@mold.nil?
      end

      # It was asked to become the mold and is draining its connections.
      def pending_mold?
        @mold == :pending
      end

      # It is the mold and forks workers.
      def ready_mold?
        @mold == :ready
      end

      # Record that it was asked to become the mold.
      def mold_pending!
        @mold = :pending
      end

      # Record that it is the mold, ready to fork.
      def mold_ready!
        @mold = :ready
      end

      # Record that the mold was told to serve again (at +now+): a worker
      # again, booting until its first report.
      def serves_again!(now)
        @mold = nil
        @booted = false
        @last_beat = now
      end

      # A worker that serves, or will: neither the mold nor told to stop.
      def serving?
        !mold? && !stopping?
      end

      # How long it may stay silent: a booted worker and the mold
      # worker_timeout, one still booting worker_boot_timeout.
      def heartbeat_timeout(config)
        booted? || mold? ? config.worker_timeout : config.worker_boot_timeout
      end

      # Send signal +sig+ to the process; nil when it is gone (ESRCH) or the
      # pid now belongs to someone else's process (EPERM: a worker gone unseen).
      def kill(sig)
        Process.kill(sig, @pid)
      rescue Errno::ESRCH, Errno::EPERM
        nil
      end

      # Its resident memory in bytes (nil when unknown).
      def rss_bytes
        File.read("/proc/#{@pid}/status")[/^VmRSS:\s+(\d+) kB/, 1].to_i * 1024
      rescue SystemCallError
        ps_rss_bytes
      end

      # Its entry in the cluster's stats (Puma's worker_status shape). A
      # worker marked to be replaced belongs to the phase before +phase+ (the
      # master's count of phased restarts); last_status is {} until its first
      # status arrives (Channel#last_status), and has Puma's keys only
      # (+all+: every key of the status, Margay's own counters too: Metrics).
      def to_stats(phase, all: false)
        status = @channel.last_status || {}
        { started_at: Stats.iso8601(@started_at), pid: @pid, index: @index, phase: retiring? ? phase - 1 : phase,
          booted: booted?, last_checkin: Stats.iso8601(@channel.last_checkin || @started_at),
          last_status: all ? all_status(status) : status.slice(*Stats::COUNTERS) }
      end

      # Its entry in the cluster's memory report (Stats.memory_report): a
      # worker's from its last status (zeros before the first), the mold's
      # (which sends none) read from /proc by the master.
      def to_memory
        memory = if mold?
                   proc_memory
                 else
                   Stats::Memory::KEYS.to_h { |k| [k, (@channel.last_status || {})[k].to_i] }
                 end
        { index: @index, pid: @pid, mold: mold?, memory: memory }
      end

      # The mold's memory from /proc/PID/smaps_rollup (zeros when unreadable).
      def proc_memory
        rollup = File.read("/proc/#{@pid}/smaps_rollup")
        rss = rollup[/^Rss:\s+(\d+)/, 1].to_i
        pss = rollup[/^Pss:\s+(\d+)/, 1].to_i
        { rss_kib: rss, pss_kib: pss, boot_rss_kib: rss, boot_pss_kib: pss }
      rescue SystemCallError
        Stats::Memory::KEYS.to_h { |k| [k, 0] }
      end

      # How the master's log names it: "worker 2 (pid 4711)".
      def to_s
        "worker #{@index} (pid #{@pid})"
      end

      private

      # Every figure of +status+ for Metrics: the counters, and the histograms rebuilt.
      def all_status(status)
        status.except(*Stats::Memory::KEYS, *Stats::HISTOGRAM_KEYS).merge(Stats.histograms_from(status))
      end

      # Where /proc cannot be read: ps's answer, nil without one (no ps, or no
      # descriptor or process to run it).
      def ps_rss_bytes
        kb = `ps -o rss= -p #{Integer(@pid)}`.strip
        kb.empty? ? nil : kb.to_i * 1024
      rescue SystemCallError
        nil
      end
    end
  end
end
