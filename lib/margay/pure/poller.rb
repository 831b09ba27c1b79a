# frozen_string_literal: true

module Margay
  module Pure
    # The reactor's readiness wait over the IOs it watches (listeners, connections), and the
    # one way for another thread to wake it. Two backends with one interface (#add, #remove,
    # #wait, #wakeup, #close); only the reactor thread calls #add, #remove and #wait.
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

      # nio4r: the IOs stay registered between waits.
      class Nio
        def name = "nio4r"

        def initialize
          require "nio"
          @selector = NIO::Selector.new
          @ready = []
        end

        def add(io)
          @selector.register(io, :r) unless @selector.registered?(io)
        end

        def remove(io)
          @selector.deregister(io)
        end

        def wait(timeout)
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
      end
    end
  end
end
