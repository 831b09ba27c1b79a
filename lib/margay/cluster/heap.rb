# frozen_string_literal: true

require_relative "../native"
require_relative "../stats"

module Margay
  class Cluster
    # Internal: the heap of a process about to become the template of others
    # (the mold before it forks the workers; a preloading master before its
    # first fork), settled so that its children share as much of it as they
    # can and copy as little as they must:
    #
    # 1. full GCs until the survivors are old (an object is promoted after
    #    surviving three): a child's GCs then no longer write the age bits in
    #    each object's header, which would copy every page that holds one;
    # 2. GC.compact (+compact+): the live objects packed together, so a child
    #    allocates into the pages freed at the end, not into holes scattered
    #    over shared pages (each hole it fills copies a 64 KiB page);
    # 3. malloc_trim: free malloc memory returned to the system.
    #
    # With +room+ (heap_room_before_fork, a share between 0 and 1): the
    # object heap grown until that share of its slots is free. A child
    # inherits the template's heap: with little more free room than Ruby's minimum
    # (RUBY_GC_HEAP_FREE_SLOTS_MIN_RATIO, 0.20), a minor GC soon finds too few
    # free slots and Ruby runs a full GC ("nofree") instead of growing the
    # heap, which that full GC then finds no need to do; under load a worker
    # stays on that edge, a full GC every few seconds.
    #
    # Each step is logged with the process's PSS and RSS after it (MiB).
    module Heap
      PROMOTING_GCS = 4 # one more than the age at which Ruby promotes an object

      module_function

      # Settle this process's heap; +who+ names it in the log line. Returns
      # the steps as [[name, {rss_kib:, pss_kib:}], ...].
      def settle(compact:, log:, who:, room: nil)
        steps = [["before", Stats::Memory.read]]
        PROMOTING_GCS.times { GC.start(full_mark: true, immediate_sweep: true) }
        steps << ["#{PROMOTING_GCS} full GCs", Stats::Memory.read]
        if room && (slots = make_room(room))
          steps << ["#{slots} free slots (#{(room * 100).round} %)", Stats::Memory.read]
        end
        if compact && compact!
          steps << ["GC.compact", Stats::Memory.read]
        end
        Native.malloc_trim
        steps << ["malloc_trim", Stats::Memory.read]
        log.info("#{who}: heap settled before forking (PSS/RSS MiB): " +
                 steps.map { |name, m| "#{name} #{mib(m[:pss_kib])}/#{mib(m[:rss_kib])}" }.join(", "))
        steps
      end

      # Grow the object heap (just after full GCs: its live slots are the
      # survivors) until +room+ of its slots are free: objects allocated with
      # the GC off fill the free slots, then new pages; a full GC frees them
      # again. Ruby keeps free pages up to RUBY_GC_HEAP_FREE_SLOTS_MAX_RATIO
      # (0.65) of the heap. Returns the free slots after, or nil where the
      # Ruby does not count its slots (JRuby).
      def make_room(room)
        stat = GC.stat
        live = stat[:heap_live_slots]
        return nil unless live && stat[:heap_available_slots]

        want = (live / (1 - room)).ceil
        if want > stat[:heap_available_slots]
          disabled = GC.disable # the app's own GC.disable is kept
          begin
            # each object garbage at once: an Array of them, still on the stack, could be
            # found by the GC's conservative stack scan and keep them all alive
            (want - live).times { Object.new }
          ensure
            GC.enable unless disabled
          end
          GC.start(full_mark: true, immediate_sweep: true)
        end
        GC.stat(:heap_free_slots)
      end

      # GC.compact where the Ruby has it (false where it does not).
      def compact!
        return false unless GC.respond_to?(:compact)

        GC.compact
        true
      rescue NotImplementedError
        false
      end

      def mib(kib)
        format("%.1f", kib / 1024.0)
      end
    end
  end
end
