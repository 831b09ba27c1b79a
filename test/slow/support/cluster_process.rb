# frozen_string_literal: true

require "test_helper"
require_relative "../../support/processes"
require "tmpdir"
require "fileutils"

# Test support (internal): a real cluster, `exe/margay -w N` in a temporary
# directory, its output collected as the log the tests wait on. Every process
# of it is gone at teardown, also when a graceful stop failed.
module ClusterProcess
  include Margay::TestHelper

  ROOT = File.expand_path("../../..", __dir__)
  APP = File.expand_path("cluster_app.ru", __dir__)

  # Start `exe/margay -w WORKERS` serving support/cluster_app.ru with
  # +settings+ written to a config file; returns once every worker booted.
  def start_cluster(workers, **settings)
    @dir = Dir.mktmpdir("margay-cluster-")
    config = File.join(@dir, "margay.rb")
    File.write(config, settings.map { |k, v| "#{k} #{v.inspect}\n" }.join)
    spawn_master("-w", workers.to_s, "-b", "tcp://127.0.0.1:0", "-C", config, APP)
    wait_for_listening
    wait_for_log(/booted/, count: workers)
  end

  # Start exe/margay with +args+ in @dir (made by the caller), without waiting.
  def spawn_master(*args, env: {})
    spawn_process(env, RbConfig.ruby, File.join(ROOT, "exe/margay"), *args)
  end

  # Run +command+ in @dir as the master (@process), its output collected into the log.
  def spawn_process(env, *command)
    @process = Margay::TestProcess.new(env, *command, chdir: @dir, in: File::NULL).start
    @master = @process.pid
  end

  # Wait for the banner; @port is the port it names.
  def wait_for_listening
    wait_for_log(%r{Listening on tcp://127\.0\.0\.1:(\d+)})
    @port = log_text[%r{Listening on tcp://127\.0\.0\.1:(\d+)}, 1].to_i
  end

  # Wait until the file at +path+ holds +pattern+ +count+ times; its text.
  def wait_for_file(path, pattern, count: 1)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 20
    until File.exist?(path) && File.read(path).scan(pattern).size >= count
      flunk "#{pattern.inspect} never in #{path}: #{File.exist?(path) && File.read(path)}\n#{log_text}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.02
    end
    File.read(path)
  end

  # A fresh @dir holding a logs/ directory (a HUP test removes it to make
  # the reopen fail); returns [logs, logs/out.log].
  def make_logs_dir(prefix)
    @dir = Dir.mktmpdir(prefix)
    logs = File.join(@dir, "logs")
    Dir.mkdir(logs)
    [logs, File.join(logs, "out.log")]
  end

  # A HUP reaches each process on its own time: wait until +pid+'s
  # descriptors (path => fd) point at the new files, not the renamed ones.
  def wait_for_reopen(pid, fds)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 20
    until fds.all? { |path, fd| File.exist?(path) && File.readlink("/proc/#{pid}/fd/#{fd}") == File.realpath(path) }
      flunk "pid #{pid} never reopened #{fds.keys.join(", ")}\n#{log_text}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.02
    end
  rescue Errno::ENOENT
    flunk "pid #{pid} is gone before it reopened #{fds.keys.join(", ")}\n#{log_text}"
  end

  # TERM to the master; its exit status.
  def stop_cluster
    return unless @process

    Process.kill(:TERM, @master) if @process.alive?
    master_exit(20, -> { "master did not exit after TERM; processes:\n#{Margay::TestWatchdog.process_report(@master)}" })
  end

  # Wait up to +timeout+ seconds for the master's exit (+message+ when it still runs): its status.
  def master_exit(timeout, message = "master did not exit")
    status = @process.wait_exit(timeout: timeout)
    assert status, message
    status
  end

  # A master that would not stop is killed with its workers, also when the
  # graceful stop's assertion failed (no process outlives its test).
  def teardown
    stop_cluster if @process&.alive?
  ensure
    kill_cluster
    FileUtils.rm_rf(@dir) if @dir
    super
  end

  def kill_cluster
    return unless @process&.alive?

    pids = [@master, *Margay::TestWatchdog.descendants(@master)]
    pids.each do |pid|
      Process.kill(:KILL, pid)
    rescue Errno::ESRCH
      nil
    end
    @process.wait_exit(timeout: 5)
  end

  def log_text = @process.output

  def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # Wait up to +seconds+ for the block to answer true; else fail, saying +what+ and the log.
  def wait_until(seconds, what = nil)
    deadline = now + seconds
    sleep 0.01 until yield || now > deadline
    assert yield, "not within #{seconds}s#{": #{what}" if what}\n#{log_text}"
  end

  def wait_for_log(pattern, count: 1, timeout: 20)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    until log_text.scan(pattern).size >= count
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        flunk "timed out waiting for #{pattern.inspect} x#{count}; log:\n#{log_text}\n" \
              "processes:\n#{Margay::TestWatchdog.process_report(@master)}"
      end
      sleep 0.02
    end
  end

  # Workers that booted and are still running (an exited orphan may linger as
  # a zombie until init reaps it: that counts as gone).
  def worker_pids
    log_text.scan(/worker \d+ \(pid (\d+)\) booted/).flatten.map(&:to_i).select do |pid|
      File.read("/proc/#{pid}/stat")[/\) (\S)/, 1] != "Z"
    rescue Errno::ENOENT, Errno::ESRCH
      false
    end
  end

  def post(body)
    sock = TCPSocket.new("127.0.0.1", @port)
    sock.write("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: #{body.bytesize}\r\nConnection: close\r\n\r\n#{body}")
    read_response(sock, timeout: 30)
  ensure
    sock&.close
  end

  # A request to support/cluster_app.ru's /slow (5 s), in a thread: its value
  # is everything the client read.
  def slow_request
    Thread.new { raw_exchange(@port, "GET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 15) }
  end
end
