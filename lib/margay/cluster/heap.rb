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
    # Each step is logged with the process's PSS and RSS after it (MiB).
    module Heap
      PROMOTING_GCS = 4 # one more than the age at which Ruby promotes an object

      module_function

      # Settle this process's heap; +who+ names it in the log line. Returns
      # the steps as [[name, {rss_kib:, pss_kib:}], ...].
      def settle(compact:, log:, who:)
        steps = [["before", Stats::Memory.read]]
        PROMOTING_GCS.times { GC.start(full_mark: true, immediate_sweep: true) }
        steps << ["#{PROMOTING_GCS} full GCs", Stats::Memory.read]
        if compact && compact!
          steps << ["GC.compact", Stats::Memory.read]
        end
        Native.malloc_trim
        steps << ["malloc_trim", Stats::Memory.read]
        log.info("#{who}: heap settled before forking (PSS/RSS MiB): " +
                 steps.map { |name, m| "#{name} #{mib(m[:pss_kib])}/#{mib(m[:rss_kib])}" }.join(", "))
        steps
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
