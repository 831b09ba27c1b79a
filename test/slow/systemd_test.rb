# frozen_string_literal: true

require "test_helper"
require_relative "../support/processes"
require "tmpdir"
require "rbconfig"

# systemd integration with the real executable: socket activation through
# systemd-socket-activate (Debian's systemd package) and sd_notify messages.
class SystemdTest < Minitest::Test
  include Margay::TestHelper

  ROOT = File.expand_path("../..", __dir__)
  EXE = File.join(ROOT, "exe", "margay")

  def setup
    @dir = Dir.mktmpdir("margay-systemd-")
    File.write(File.join(@dir, "config.ru"), "run ->(env) { [200, {}, ['activated ' + env['SERVER_PORT']]] }\n")
  end

  def teardown
    Process.kill(:KILL, @pid) if @pid && alive?(@pid)
    Process.wait(@pid) if @pid
  rescue Errno::ECHILD, Errno::ESRCH
    nil
  ensure
    FileUtils.rm_rf(@dir)
  end

  def test_socket_activation
    activate = `which systemd-socket-activate`.strip
    skip "systemd-socket-activate is not installed (apt-get install systemd)" if activate.empty?

    port = free_port
    @pid = spawn(activate, "-l", "127.0.0.1:#{port}", RbConfig.ruby, "-I#{ROOT}/lib", EXE, "-q",
                 chdir: @dir, out: File.join(@dir, "out.log"), err: File.join(@dir, "err.log"))
    response = with_retries { raw_exchange(port, "GET / HTTP/1.1\r\nHost: a:#{port}\r\nConnection: close\r\n\r\n") }
    assert_match(/activated #{port}\z/, response, File.read(File.join(@dir, "err.log")))
    Process.kill(:TERM, @pid)
    wait_exit
  end

  def test_socket_activation_in_cluster_mode
    activate = `which systemd-socket-activate`.strip
    skip "systemd-socket-activate is not installed (apt-get install systemd)" if activate.empty?

    port = free_port
    @pid = spawn(activate, "-l", "127.0.0.1:#{port}", RbConfig.ruby, "-I#{ROOT}/lib", EXE, "-q", "-w", "2",
                 chdir: @dir, out: File.join(@dir, "out.log"), err: File.join(@dir, "err.log"))
    3.times do
      response = with_retries { raw_exchange(port, "GET / HTTP/1.1\r\nHost: a:#{port}\r\nConnection: close\r\n\r\n") }
      assert_match(/activated #{port}\z/, response, File.read(File.join(@dir, "err.log")))
    end
    Process.kill(:TERM, @pid)
    wait_exit
  end

  def test_sd_notify_ready_and_stopping
    path = File.join(@dir, "notify.sock")
    notify = Socket.new(:UNIX, :DGRAM)
    notify.bind(Socket.pack_sockaddr_un(path))
    @pid = spawn({ "NOTIFY_SOCKET" => path }, RbConfig.ruby, "-I#{ROOT}/lib", EXE, "-q", "-b", "tcp://127.0.0.1:0",
                 chdir: @dir, out: File::NULL, err: File::NULL)
    assert_equal "READY=1", receive(notify)
    Process.kill(:TERM, @pid)
    assert_equal "STOPPING=1", receive(notify)
    wait_exit
  ensure
    notify&.close
  end

  def test_sd_notify_in_cluster_mode_with_watchdog
    path = File.join(@dir, "notify.sock")
    notify = Socket.new(:UNIX, :DGRAM)
    notify.bind(Socket.pack_sockaddr_un(path))
    env = { "NOTIFY_SOCKET" => path, "WATCHDOG_USEC" => "400000" }
    @pid = spawn(env, RbConfig.ruby, "-I#{ROOT}/lib", EXE, "-q", "-w", "2", "-b", "tcp://127.0.0.1:0",
                 chdir: @dir, out: File::NULL, err: File::NULL)
    messages = Array.new(3) { receive(notify) }
    assert_includes messages, "READY=1", "READY once both workers serve"
    assert_includes messages, "WATCHDOG=1", "pinged every WATCHDOG_USEC / 2"
    Process.kill(:USR1, @pid)
    assert_equal "RELOADING=1", receive_skipping_watchdog(notify)
    assert_equal "READY=1", receive_skipping_watchdog(notify), "READY again once the new workers serve"
    Process.kill(:TERM, @pid)
    assert_equal "STOPPING=1", receive_skipping_watchdog(notify)
    wait_exit
  ensure
    notify&.close
  end

  private

  # The next message that is not a watchdog ping; fails after +timeout+ seconds
  # (the pings alone would otherwise keep this loop going forever).
  def receive_skipping_watchdog(sock, timeout: 20)
    deadline = Margay::Clock.now + timeout
    loop do
      left = deadline - Margay::Clock.now
      message = receive(sock, timeout: left)
      return message unless message == "WATCHDOG=1"
    end
  end

  def receive(sock, timeout: 20)
    assert timeout.positive? && sock.wait_readable(timeout), "no sd_notify message within #{timeout.round(1)} s"
    sock.recv(256)
  end

  # Wait for the server under test to exit after TERM (20 s at most).
  def wait_exit(timeout: 20)
    unless Margay::TestProcess.reap(@pid, timeout: timeout)
      flunk "margay (pid #{@pid}) did not exit within #{timeout} s of TERM; processes:\n" \
            "#{Margay::TestWatchdog.process_report(@pid)}"
    end
    @pid = nil
  end

  def with_retries(tries = 50)
    yield
  rescue Errno::ECONNREFUSED
    tries -= 1
    raise if tries.zero?

    sleep 0.1
    retry
  end

  def alive?(pid)
    Process.kill(0, pid)
    true
  rescue Errno::ESRCH
    false
  end
end
