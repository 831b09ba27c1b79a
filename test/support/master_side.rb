# frozen_string_literal: true

require "stringio"
require "margay/cluster"

module Margay
  # Test support (internal): what the unit tests of the cluster master's parts
  # (Cluster::Exits, Cluster::Health) stand on. A log into @out, a Roster in
  # @roster, worker records with real links, child processes killed and
  # reaped after each test, and a clock the test sets (@clock, TestHelper::ManualClock).
  module MasterSide
    def setup
      @out = StringIO.new
      @log = Log.new(out: @out, err: @out)
      @roster = Cluster::Roster.new
      @channels = []
      @pids = []
      @clock = TestHelper::ManualClock.new
    end

    def teardown
      @channels.each(&:close)
      @pids.each do |pid|
        Process.kill(:KILL, pid)
        Process.wait(pid)
      rescue SystemCallError
        nil
      end
    end

    # A child process running +argv+ (Process.spawn), killed and reaped after
    # the test unless it is gone already. Returns its pid.
    def child(*argv, **options)
      Process.spawn(*argv, **options).tap { |pid| @pids << pid }
    end

    # The record of process +pid+ as worker +index+, added to @roster, last
    # heard from at 0.0. Returns [the record, the worker's side of its links].
    def add_worker(index, pid, booted: true)
      master, worker = Cluster::Channel.pair
      @channels << master << worker
      record = Cluster::WorkerRecord.new(index: index, pid: pid, channel: master, now: 0.0)
      record.booted! if booted
      [@roster.add(record), worker]
    end

    # The block's value, with @clock's now at +now+ meanwhile.
    def at(now, &block)
      @clock.at(now, &block)
    end
  end
end
