# frozen_string_literal: true

module Margay
  # Test support (internal): a child process a test starts (a server executable, Puma,
  # a script), its stdout and stderr collected by a reader thread: wait for a line of
  # its output, wait for its exit, kill it.
  class TestProcess
    attr_reader :pid, :status

    # Wait up to +timeout+ seconds for the child +pid+ to exit: its Process::Status,
    # nil when it still runs.
    def self.reap(pid, timeout:)
      deadline = Margay::Clock.now + timeout
      loop do
        _, status = Process.wait2(pid, Process::WNOHANG)
        return status if status
        return nil if Margay::Clock.now >= deadline

        sleep 0.05
      end
    end

    # +options+ go to Process.spawn (pgroup:, unsetenv_others:, in:, err: File::NULL).
    def initialize(env, *command, chdir:, **options)
      @env = env
      @command = command
      @chdir = chdir
      @options = options
      @output = +""
      @lock = Mutex.new
      @status = nil
    end

    # Spawn the child; returns self.
    def start
      out_r, out_w = IO.pipe
      @pid = Process.spawn(@env, *@command, { chdir: @chdir, out: out_w, err: out_w }.merge(@options))
      out_w.close
      @reader = Thread.new do
        out_r.each_line { |line| @lock.synchronize { @output << line } }
      rescue IOError
        nil
      ensure
        out_r.close
      end
      self
    end

    # The command line, for messages.
    def label = @command.join(" ")

    # Everything the child printed so far.
    def output = @lock.synchronize { @output.dup }

    # Wait until the output matches +pattern+ (count times); false on timeout or exit.
    def wait_for(pattern, count: 1, timeout: 30)
      deadline = Margay::Clock.now + timeout
      loop do
        return true if output.scan(pattern).size >= count
        return false if Margay::Clock.now > deadline || exited?

        sleep 0.05
      end
    end

    # The child's exit status once it exited (its output then read to the end), nil while it runs.
    def exited? = wait_exit(timeout: 0)

    def alive? = !exited?

    # Wait up to +timeout+ seconds for the exit; the status, or nil if still running.
    def wait_exit(timeout: 30)
      return @status if @status

      @status = self.class.reap(@pid, timeout: timeout)
      @reader.join(5) if @status
      @status
    end

    # Send +signal+ to the child, or with group: true to its process group (started with
    # pgroup: true; workers that outlived their master too), and wait up to +timeout+ seconds
    # for its exit: the status, nil when it still runs or was gone.
    def kill(signal = :KILL, group: false, timeout: 10)
      return @status if @status && !group

      Process.kill(signal, group ? -@pid : @pid)
      wait_exit(timeout: timeout)
    rescue Errno::ESRCH, Errno::EPERM
      nil
    end
  end
end
