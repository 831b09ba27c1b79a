# frozen_string_literal: true

module Margay
  class Cluster < Runner
    # Internal: a worker's recent request rate, for keep-alive balancing. A saturated worker's
    # clients wait about (its connections) / (its rate) (Little's law); two workers on one
    # machine need not serve at one rate (another process on their core, a heavier request mix,
    # a collection), so the balancer evens out those waits, not the connection counts
    # (core/board.c). Requests per second, measured over SAMPLE seconds at least and smoothed
    # over about TAU seconds (an exponentially weighted mean), so that a worker that slows down
    # for a second sheds clients within that second, but one slow request does not.
    class RateMeter
      SAMPLE = 0.05
      TAU = 0.5

      # Requests per second (nil until two samples were taken).
      attr_reader :rate

      def initialize
        @at = nil
        @count = nil
        @rate = nil
      end

      # At +now+ (Clock.now): when a sample is due, yields for the worker's request count so
      # far and returns the new rate; nil otherwise.
      def sample(now)
        if @at.nil?
          @at = now
          @count = yield
          return nil
        end
        elapsed = now - @at
        return nil if elapsed < SAMPLE

        count = yield
        current = (count - @count) / elapsed
        @rate = @rate ? @rate + ([elapsed / TAU, 1.0].min * (current - @rate)) : current
        @at = now
        @count = count
        @rate
      end
    end
  end
end
