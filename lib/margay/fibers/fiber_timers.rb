# frozen_string_literal: true

require_relative "../clock"

module Margay
  class Server
    # Internal: the timers of one fiber-mode pool thread, for its FiberScheduler (sleep,
    # Timeout.timeout, the timeouts of io_wait and block, request_timeout): a binary heap of
    # entries [at, seq, target, value], earliest first (then in the order they were added). A
    # target is what the scheduler acts on when the entry is due (a Wait to finish with value,
    # or a Proc to call); #fire hands it back. A cancelled entry stays in the heap (finding it
    # there would cost a search) until it is due, or until cancelled entries are most of the
    # heap: then it is rebuilt without them (request_timeout and read timeouts are mostly
    # cancelled long before they are due). Only its thread touches it.
    class FiberTimers
      # @param clock [#now] Margay::Clock (a test gives its own)
      def initialize(clock: Clock)
        @clock = clock
        @heap = [] # binary heap of [at, seq, target, value]; seq nil once out of the heap
        @seq = 0
        @dead = 0 # cancelled entries still in @heap
      end

      # Entries in the heap, cancelled ones included.
      def size
        @heap.size
      end

      # A timer +duration+ seconds from now for +target+ (a Wait to finish with +value+, or a
      # Proc to call). Returns its entry (for #cancel).
      def add(duration, target, value = nil)
        @seq += 1
        entry = [@clock.now + duration, @seq, target, value]
        push(entry)
        entry
      end

      # Cancel +entry+ (nothing if it fired or was cancelled already).
      def cancel(entry)
        return if entry[2].nil?

        entry[2] = nil
        return unless entry[1] # popped already: not in the heap

        @dead += 1
        compact if @dead > 64 && @dead * 2 > @heap.size
      end

      # Milliseconds until the next timer (nil: none), 0 when one is due.
      def next_timeout_ms(now)
        top = @heap.first
        top = pop while top && top[2].nil?
        return nil unless top

        ms = ((top[0] - now) * 1000).ceil
        ms.positive? ? ms : 0
      end

      # Yield the target and value of each timer due at +now+, in order (a timer the block
      # adds or cancels counts at once).
      def fire(now)
        while (top = @heap.first) && top[0] <= now
          pop
          next if top[2].nil?

          yield top[2], top[3]
        end
      end

      private

      def compact
        @heap.reject! { |e| e[2].nil? }
        @heap.sort_by! { |e| [e[0], e[1]] } # a sorted array is a heap
        @dead = 0
      end

      def push(entry)
        h = @heap
        h << entry
        i = h.size - 1
        while i.positive?
          parent = (i - 1) / 2
          break if earlier?(h[parent], entry)

          h[i] = h[parent]
          i = parent
        end
        h[i] = entry
      end

      # Take the first entry out of the heap; returns the new first (nil: empty).
      def pop
        h = @heap
        root = h.first
        if root
          @dead -= 1 if root[2].nil?
          root[1] = nil # out of the heap (#cancel)
        end
        last = h.pop
        return h.first if h.empty?

        h[0] = last
        i = 0
        n = h.size
        loop do
          l = (2 * i) + 1
          break if l >= n

          r = l + 1
          c = r < n && earlier?(h[r], h[l]) ? r : l
          break if earlier?(last, h[c])

          h[i] = h[c]
          i = c
        end
        h[i] = last
        h.first
      end

      def earlier?(a, b)
        a[0] < b[0] || (a[0] == b[0] && a[1] < b[1])
      end
    end
  end
end
