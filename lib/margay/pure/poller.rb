# frozen_string_literal: true

module Margay
  module Pure
    # The reactor's readiness wait over the IOs it watches (listeners, connections), and the
    # one way for another thread to wake it. Two backends with one interface (#add, #remove,
    # #release, #wait, #wakeup, #close); only the reactor thread calls #add, #remove, #release and #wait.
    module Poller
      # nio4r's selector when nio4r loads (on JRuby its Java backend: one java.nio Selector that
      # keeps the registrations), else IO.select.
      def self.new
        Nio.new
      rescue LoadError
        Select.new
      end

      # IO.select over every IO at each wait, a pipe to wake it. On JRuby each call builds a
      # java.nio Selector and registers every channel: the cost grows with the connections.
      class Select
        def name = "select"

        def initialize
          @ios = {}
          @wake_r, @wake_w = IO.pipe
        end

        def add(io)
          @ios[io] = true
        end

        def remove(io)
          @ios.delete(io)
        end

        def release(io) = remove(io)

        # -> the watched IOs that are readable (empty on timeout); +timeout+ in seconds, nil: none.
        # Raises IOError when a watched IO was closed before or during the wait.
        def wait(timeout)
          ready, = IO.select([@wake_r, *@ios.keys], nil, nil, timeout)
          return [] unless ready

          ready.reject { |io| io == @wake_r && @wake_r.read_nonblock(4096, exception: false) }
        end

        def wakeup
          @wake_w.write_nonblock(".", exception: false)
        rescue IOError
          nil
        end

        def close
          [@wake_r, @wake_w].each(&:close)
        end
      end

      # nio4r: the IOs stay registered between waits, and while the reactor does not watch one
      # (a pool thread holds its connection) it keeps its registration with no interest: watching
      # it again changes the interest, where a new registration (a Monitor each time) cost about
      # 2.5 times as much on JRuby. Registrations of IOs closed meanwhile are let go once a second.
      class Nio
        def name = "nio4r"

        def initialize
          require "nio"
          @selector = NIO::Selector.new
          @monitors = {} # io => its Monitor
          @ready = []
          @pruned = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        end

        def add(io)
          monitor = @monitors[io]
          if monitor && !monitor.closed?
            monitor.interests = :r unless monitor.interests == :r
          else
            @monitors[io] = @selector.register(io, :r)
          end
        end

        def remove(io)
          monitor = @monitors[io]
          if io.closed?
            @monitors.delete(io)
          elsif monitor && !monitor.closed?
            monitor.interests = nil
          end
        end

        # Let go of +io+'s registration (a listener when the reactor stops): java.nio closes a
        # registered channel's socket only once its selector deregistered it, at a wait. The
        # server may close the listener meanwhile; nio4r then raises a Java NullPointerException
        # (a StandardError on JRuby) instead of IOError, and the wait that follows lets it go.
        def release(io)
          @monitors.delete(io)
          @selector.deregister(io) unless io.closed?
        rescue StandardError
          nil
        end

        def wait(timeout)
          prune
          @ready.clear
          @selector.select(timeout) { |monitor| @ready << monitor.io }
          @ready
        end

        def wakeup
          @selector.wakeup
        rescue IOError
          nil
        end

        def close
          @selector.close
        end

        private

        def prune
          t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          return if t - @pruned < 1

          @pruned = t
          @monitors.delete_if { |io, _| io.closed? }
        end
      end
    end
  end
end
