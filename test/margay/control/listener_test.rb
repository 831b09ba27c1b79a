# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "timeout"
require "margay/control/listener"
require "margay/control/app" # App::AFTER_RESPONSE, the key the listener reads after an answer

# The control app's listener (Margay::Control::Listener) over real TCP and
# unix sockets.
class ControlListenerTest < Minitest::Test
  # Answers every path with its name; /act queues an action for after the answer.
  class EchoApp
    def initialize(queue)
      @queue = queue
    end

    def call(env)
      env[Margay::Control::App::AFTER_RESPONSE] = -> { @queue << :after } if env["PATH_INFO"] == "/act"
      body = "#{env['PATH_INFO']}?#{env['QUERY_STRING']}"
      [200, { "content-type" => "text/plain" }, [body]]
    end
  end

  def setup
    @log_io = StringIO.new
    @log = Margay::Log.new(out: @log_io, err: @log_io)
    @queue = Queue.new
    @dir = Dir.mktmpdir("margay-control-")
  end

  def teardown
    @listener&.stop
    FileUtils.remove_entry(@dir)
  end

  def start(url)
    @listener = Margay::Control::Listener.new(url, log: @log).start(EchoApp.new(@queue))
  end

  def exchange(raw)
    url = @listener.url
    sock = url.start_with?("unix://") ? UNIXSocket.new(url.delete_prefix("unix://")) : TCPSocket.new("127.0.0.1", url[/\d+\z/].to_i)
    sock.write(raw)
    read_all(sock)
  ensure
    sock&.close
  end

  include Margay::TestHelper

  def test_tcp_a_pumactl_request_gets_an_http_answer_then_the_close
    start("tcp://127.0.0.1:0")
    assert_match %r{\Atcp://127\.0\.0\.1:\d+\z}, @listener.url
    refute_equal "tcp://127.0.0.1:0", @listener.url, "port 0 is resolved"
    response = exchange("GET /stats?token=t HTTP/1.0\r\n\r\n")
    assert_match %r{\AHTTP/1\.0 200 OK\r\n}, response
    assert_includes response, "content-length: 14\r\n"
    assert_equal "/stats?token=t", response.split("\r\n").last, "pumactl prints the last line"
  end

  # accept(2) without a descriptor to give (EMFILE: a flood, or the app
  # holding them) used to end the control thread for good, silently, while
  # the socket stayed open: pumactl then hung. It says so once, tries again,
  # and answers once a descriptor is free.
  def test_accept_without_a_free_descriptor_is_retried
    skip_on_jruby("the JVM opens descriptors of its own at any moment (class loading, JIT): with none left it fails " \
                  "elsewhere first, and the control thread's accept may never be the one to see EMFILE")
    start("tcp://127.0.0.1:0")
    client = Socket.new(:INET, :STREAM)
    address = Socket.sockaddr_in(@listener.url[/\d+\z/].to_i, "127.0.0.1")
    soft, hard = Process.getrlimit(:NOFILE)
    held = []
    Process.setrlimit(:NOFILE, Dir.children("/proc/self/fd").size + 16, hard)
    begin
      loop { held << File.open(File::NULL) }
    rescue Errno::EMFILE
      nil
    end
    client.connect(address)
    client.write("GET /after-emfile HTTP/1.0\r\n\r\n")
    Timeout.timeout(20) { sleep 0.02 until @log_io.string.include?("accept failed") }
    held.each(&:close)
    held.clear
    assert_equal "/after-emfile?", read_all(client).split("\r\n").last
    assert_equal 1, @log_io.string.scan("accept failed").size, "said once"
  ensure
    held&.each(&:close)
    Process.setrlimit(:NOFILE, soft, hard) if soft
    client&.close
  end

  def test_unix_socket_and_its_file_removed_at_stop
    path = File.join(@dir, "ctl.sock")
    start("unix://#{path}")
    assert_equal "/gc-stats?", exchange("GET /gc-stats HTTP/1.1\r\nHost: x\r\n\r\n").split("\r\n").last
    @listener.stop
    refute File.exist?(path)
    @listener = nil
  end

  def test_a_stale_socket_file_is_replaced_and_a_live_one_refused
    path = File.join(@dir, "ctl.sock")
    UNIXServer.new(path).close # the file stays, nobody listens
    start("unix://#{path}")
    assert_equal "/x?", exchange("GET /x HTTP/1.0\r\n\r\n").split("\r\n").last
    error = assert_raises(Margay::ConfigError) { Margay::Control::Listener.new("unix://#{path}", log: @log) }
    assert_match(/in use/, error.message)
  end

  def test_garbage_and_other_methods_are_refused
    start("tcp://127.0.0.1:0")
    assert_match %r{\AHTTP/1\.0 400 }, exchange("HELLO\r\n\r\n")
    assert_match %r{\AHTTP/1\.0 400 }, exchange("GET /x HTTP/2.0\r\n\r\n")
    assert_match %r{\AHTTP/1\.0 405 }, exchange("POST /stop HTTP/1.0\r\n\r\n")
    assert_match %r{\AHTTP/1\.0 400 }, exchange("GET /#{'a' * 9000} HTTP/1.0\r\n"), "a head over 8 KiB"
    assert_match %r{\AHTTP/1\.0 200 }, exchange("GET /still-serving HTTP/1.0\r\n\r\n")
  end

  def test_an_action_runs_after_the_answer_was_written
    start("tcp://127.0.0.1:0")
    assert_match %r{\AHTTP/1\.0 200 }, exchange("GET /act HTTP/1.0\r\n\r\n")
    assert_equal :after, pop_within(@queue)
  end

  def test_bad_urls_and_busy_ports_are_config_errors
    assert_raises(Margay::ConfigError) { Margay::Control::Listener.new("http://127.0.0.1:1", log: @log) }
    start("tcp://127.0.0.1:0")
    error = assert_raises(Margay::ConfigError) { Margay::Control::Listener.new(@listener.url, log: @log) }
    assert_match(/cannot open the control app/, error.message)
  end

  def test_a_forked_child_closes_its_copy_of_the_socket
    skip_on_jruby "no fork"
    start("tcp://127.0.0.1:0")
    r, w = IO.pipe
    pid = fork do
      r.close
      w.write(Margay::Control::Listener.listeners.empty? ? "closed" : "open")
      exit!(0)
    end
    w.close
    assert_equal "closed", r.read
    Process.wait(pid)
    assert_includes Margay::Control::Listener.listeners, @listener, "the parent keeps serving"
  end

  # A worker forked while the control thread holds a connection must not
  # keep it open: pumactl reads until the close.
  def test_a_child_forked_during_a_request_does_not_hold_its_connection_open
    skip_on_jruby "no fork"
    start("tcp://127.0.0.1:0")
    sock = TCPSocket.new("127.0.0.1", @listener.url[/\d+\z/].to_i)
    Timeout.timeout(5) { sleep 0.01 until @listener.instance_variable_get(:@client) }
    child = fork { sleep 30 }
    sock.write("GET /act HTTP/1.0\r\n\r\n")
    assert sock.wait_readable(5)
    response = +""
    Timeout.timeout(5) { response << sock.readpartial(4096) while true }
  rescue EOFError
    assert_match %r{\AHTTP/1\.0 200 }, response
    assert_equal :after, pop_within(@queue), "the action runs after the close"
  ensure
    sock&.close
    if child
      Process.kill(:KILL, child)
      Process.wait(child)
    end
  end
end
