# frozen_string_literal: true

require "rbconfig"

module Margay
  # The `lean_heap` setting: Ruby's GC keeps less free room in its object heap. After each GC
  # Ruby grows the heap until at least RUBY_GC_HEAP_FREE_SLOTS_MIN_RATIO of its slots are free
  # (0.20 by default), to GOAL_RATIO (0.40). A cluster worker fills those free slots with its
  # requests' objects between two GCs, and each 16 KiB page it writes to is a page it copies
  # from the process it was forked from: with half the room (0.10 and 0.20) each reforked worker
  # of the Rails bench app copied about 4 MiB less of its Ruby heap pages and kept 1 MiB less in
  # its threads' malloc arenas (bench/results/memory4-20261127). The price is more GCs.
  #
  # Ruby reads these variables once, as it starts; so the process puts them in its environment
  # (where they are not there already: the operator's own values win) and executes itself
  # again at once, before it binds or loads anything (the same pid and arguments). A jemalloc
  # or prune_bundler re-execution that comes first carries them, and then none of its own is
  # needed. Workers, molds, hot restarts and the app's child processes inherit them.
  module LeanHeap
    RATIOS = { "RUBY_GC_HEAP_FREE_SLOTS_MIN_RATIO" => "0.10", "RUBY_GC_HEAP_FREE_SLOTS_GOAL_RATIO" => "0.20" }.freeze

    module_function

    # Called by the launcher first. With the setting on, sets in ENV the ratios it does not
    # hold yet; :reexec when it set one (this Ruby started without it: #reexec must follow,
    # after the other re-executions, which carry it). Otherwise nil, or the warning to log.
    def prepare(setting)
      return nil unless setting
      return "lean_heap ignored on #{RUBY_ENGINE} (its GC does not read RUBY_GC_HEAP_FREE_SLOTS_*)" unless RUBY_ENGINE == "ruby"

      missing = RATIOS.reject { |name, _| ENV.key?(name) }
      missing.each { |name, value| ENV[name] = value }
      missing.empty? ? nil : :reexec
    end

    # Replaces the process with +argv+ (the script and its arguments, nil when not started by
    # the margay command) run by this Ruby, which then reads the ratios. Returns the warning to
    # log when there is no command line to re-execute.
    def reexec(argv)
      unless argv
        return "lean_heap needs the margay command to re-execute itself; set " \
               "#{RATIOS.map { |name, value| "#{name}=#{value}" }.join(' ')} in its environment yourself"
      end

      Kernel.exec(RbConfig.ruby, *argv, close_others: false)
    end
  end
end
