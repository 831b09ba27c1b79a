# frozen_string_literal: true

require_relative "../stats"

module Margay
  module Pure
    # The pure engine's shared state between its threads: the ready list (complete requests
    # the reactor, or a thread done with a connection's previous request, hands to the pool
    # threads, oldest first), the requests held by token, and counters. Two implementations
    # with one interface: on JRuby java.util.concurrent (a lock-free queue and map, atomic
    # counters: the pool threads and the reactor share no Mutex, on which they convoy when
    # the CPU is short); elsewhere a Ruby Array, Hash and Mutex (the GVL runs one thread at a
    # time there anyway).
    module Handoff
      STOP = Object.new.freeze # taken once the engine stopped: every #take answers nil after it
      SLICE_MS = 1000 # a #take without deadline polls in slices this long

      def self.ready = RUBY_ENGINE == "jruby" ? Concurrent.new : Locked.new
      def self.held = RUBY_ENGINE == "jruby" ? ConcurrentHeld.new : LockedHeld.new
      def self.counter = RUBY_ENGINE == "jruby" ? java.util.concurrent.atomic.AtomicLong.new : LockedCounter.new
      def self.histogram = Histogram.new

      def self.now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

      # The ready list under a Mutex and ConditionVariable.
      class Locked
        attr_reader :saturated_since

        def initialize
          @ready = []
          @lock = Mutex.new
          @work = ConditionVariable.new
          @waiting = 0
          @closed = false
          @saturated_since = Handoff.now # no thread waits for work yet
        end

        # How many threads wait in #take.
        attr_reader :waiting

        # +conn+ has a complete request; +conn.queued+: no waiting thread takes it at once.
        def push(conn)
          @lock.synchronize { add(conn, @waiting <= @ready.size) }
        end

        # A pipelined request goes behind the ones already waiting, if any (no hogging a
        # thread): true when it went there.
        def push_behind(conn)
          @lock.synchronize { @ready.empty? ? false : add(conn, true) }
        end

        # -> a connection, :timeout once +deadline+ (monotonic seconds, nil: none) passed, nil
        # once #close was called and nothing is left.
        def take(deadline)
          @lock.synchronize do
            @waiting += 1
            @saturated_since = nil
            begin
              while @ready.empty?
                return nil if @closed

                wait = deadline && deadline - Handoff.now
                return :timeout if wait && wait <= 0

                @work.wait(@lock, wait && [wait, 0.001].max)
              end
              @ready.shift
            ensure
              @saturated_since = Handoff.now if (@waiting -= 1).zero?
            end
          end
        end

        def size = @ready.size

        def empty? = @ready.empty?

        # The arrival times of the waiting requests.
        def arrivals = @lock.synchronize { @ready.filter_map(&:arrival) }

        def close
          @lock.synchronize do
            @closed = true
            @work.broadcast
          end
        end

        # Removes and returns what waits (the engine closes it).
        def drain = @lock.synchronize { @ready.slice!(0..) }

        private

        def add(conn, queued)
          conn.queued = queued
          @ready << conn
          @work.signal
          true
        end
      end

      # The ready list as a java.util.concurrent.LinkedBlockingQueue (JRuby).
      class Concurrent
        attr_reader :saturated_since

        def initialize
          @queue = java.util.concurrent.LinkedBlockingQueue.new
          @waiting = java.util.concurrent.atomic.AtomicInteger.new
          @saturated_since = Handoff.now
        end

        def waiting = @waiting.get

        def push(conn)
          conn.queued = @waiting.get <= @queue.size
          @queue.offer(conn)
          true
        end

        def push_behind(conn)
          return false if @queue.isEmpty

          conn.queued = true
          @queue.offer(conn)
          true
        end

        def take(deadline)
          @waiting.incrementAndGet
          @saturated_since = nil
          begin
            loop do
              wait = deadline ? ((deadline - Handoff.now) * 1000).ceil : SLICE_MS
              return :timeout if wait <= 0

              conn = @queue.poll(wait, java.util.concurrent.TimeUnit::MILLISECONDS)
              next unless conn
              return conn unless STOP.equal?(conn)

              @queue.offer(STOP) # for the next thread
              return nil
            end
          ensure
            @saturated_since = Handoff.now if @waiting.decrementAndGet.zero?
          end
        end

        def size = @queue.size

        def empty? = @queue.isEmpty

        def arrivals = @queue.toArray.to_a.filter_map { |conn| conn.arrival unless STOP.equal?(conn) }

        def close = @queue.offer(STOP)

        def drain
          list = java.util.ArrayList.new
          @queue.drainTo(list)
          list.to_a.reject { |conn| STOP.equal?(conn) }
        end
      end

      # Token => connection: read by every engine call of a request. A Hash, each of whose
      # operations the GVL makes atomic.
      class LockedHeld
        def initialize
          @map = {}
        end

        def get(token) = @map[token]

        def put(token, conn) = @map[token] = conn

        def take(token) = @map.delete(token)

        def conns = @map.values

        def size = @map.size
      end

      # Token => connection in a java.util.concurrent.ConcurrentHashMap (a Ruby Hash on JRuby
      # is not safe to change from several threads).
      class ConcurrentHeld
        def initialize
          @map = java.util.concurrent.ConcurrentHashMap.new
        end

        def get(token) = @map.get(token)

        def put(token, conn) = @map.put(token, conn)

        def take(token) = @map.remove(token)

        def conns = @map.values.to_a

        def size = @map.size
      end

      # AtomicLong's methods the engine uses, under a Mutex.
      class LockedCounter
        def initialize
          @value = 0
          @lock = Mutex.new
        end

        def incrementAndGet = @lock.synchronize { @value += 1 } # rubocop:disable Naming/MethodName -- AtomicLong's

        def decrementAndGet = @lock.synchronize { @value -= 1 } # rubocop:disable Naming/MethodName -- AtomicLong's

        def addAndGet(delta) = @lock.synchronize { @value += delta } # rubocop:disable Naming/MethodName -- AtomicLong's

        def get = @value
      end

      # A latency histogram over Stats::HISTOGRAM_BOUNDS (a value falls in the first bucket whose
      # bound it does not pass, as Prometheus's le), counted with the counters above: threads
      # observe without a shared lock on JRuby.
      class Histogram
        def initialize
          @counts = Stats::HISTOGRAM_BOUNDS.map { Handoff.counter }
          @sum_us = Handoff.counter
        end

        def observe(seconds)
          seconds = 0.0 if seconds.negative?
          @counts[Stats::HISTOGRAM_BOUNDS.index { |bound| seconds <= bound }].incrementAndGet
          @sum_us.addAndGet((seconds * 1_000_000).round)
        end

        # Server#stats' form: {buckets: {bound => cumulative count}, sum: seconds, count:}.
        def to_h
          total = 0
          buckets = Stats::HISTOGRAM_BOUNDS.each_with_index.to_h { |bound, i| [bound, total += @counts[i].get] }
          { buckets: buckets, sum: @sum_us.get / 1_000_000.0, count: total }
        end
      end
    end
  end
end
