# frozen_string_literal: true

module Margay
  # Test support (internal): no test may hang the suite. A test still running
  # after MARGAY_TEST_TIMEOUT seconds (default 240) has every Ruby thread's
  # backtrace printed, its child processes (servers it spawned) killed, and the
  # test process exits with status 3, so CI fails with the culprit named
  # instead of being killed at its own time limit with nothing to show.
  module TestWatchdog
    LIMIT = Float(ENV.fetch("MARGAY_TEST_TIMEOUT", "240"))

    def run
      test_name = "#{self.class}##{name}"
      watchdog = Thread.new do
        sleep LIMIT
        TestWatchdog.bark(test_name)
      end
      super
    ensure
      watchdog&.kill
    end

    def self.bark(test_name)
      $stderr.puts "\n*** #{test_name} still running after #{LIMIT} s: backtraces of every thread"
      Thread.list.each do |t|
        next if t == Thread.current

        $stderr.puts "--- #{t.inspect}", *(t.backtrace || []).map { |line| "    #{line}" }
      end
      descendants(Process.pid).each do |pid|
        $stderr.puts "--- killing child process #{pid}: #{File.read("/proc/#{pid}/cmdline").tr("\0", " ")}"
        Process.kill(:KILL, pid)
      rescue SystemCallError
        nil
      end
      $stderr.flush
      exit!(3)
    end

    # A `ps` listing of +root+ and every process below it (state, kernel wait
    # channel, command), for failure messages about servers that would not stop.
    def self.process_report(root)
      pids = [root, *descendants(root)].join(",")
      `ps -o pid,ppid,stat,wchan:24,etime,args -p #{pids} 2>&1`
    rescue SystemCallError => e
      "ps failed: #{e.message}"
    end

    # Every process below +root+, children first discovered first (Linux /proc).
    def self.descendants(root)
      parents = Dir["/proc/[0-9]*/stat"].to_h do |path|
        fields = File.read(path).sub(/\A.*\) /m, "").split
        [path[%r{/proc/(\d+)/}, 1].to_i, fields[1].to_i]
      rescue SystemCallError
        [0, 0]
      end
      found = []
      frontier = [root]
      until frontier.empty?
        children = parents.select { |_, ppid| frontier.include?(ppid) }.keys
        found.concat(children)
        frontier = children
      end
      found
    end
  end
end

Minitest::Test.prepend(Margay::TestWatchdog)
