# frozen_string_literal: true

module Margay
  class Server
    # Internal: Puma 8's env["puma.mark_as_io_bound"] in thread mode. Wraps the app:
    # each request's env gets the callable; a request that calls it lets the pool grow past
    # max_threads by up to max_io_threads (ThreadPool#mark_io!) while it runs. Apps written
    # for Puma's I/O threads run unchanged. (Fiber mode sets its own: FiberLoop::IO_BOUND.)
    class IoBound
      KEY = "puma.mark_as_io_bound"

      # @param app [#call] the Rack application
      # @param pool [#mark_io!, #unmark_io!] the thread pool (set before the first request)
      def initialize(app)
        @app = app
        @pool = nil
        @mark = -> { @pool.mark_io! }
      end

      attr_writer :pool

      def call(env)
        env[KEY] = @mark
        @app.call(env)
      ensure
        @pool.unmark_io!
      end
    end
  end
end
