# frozen_string_literal: true

require "test_helper"
require_relative "../support/processes"
require "fileutils"
require "socket"
require "tmpdir"

# What an idle kept-alive connection costs a server process (docs/ARCHITECTURE.md, "Who owns
# what"): between requests it holds neither a read buffer, nor a parsed head, nor the memory
# of its last request's body. A Margay child serves 1,500 GETs and 200 POSTs of 32 KiB, each on
# its own connection left open, and its RSS may grow by a few KiB per connection at most.
class IdleMemoryTest < Minitest::Test
  include Margay::TestHelper

  ROOT = File.expand_path("../..", __dir__)
  APP = <<~RUBY
    run lambda { |env| [200, { "content-type" => "text/plain" }, [env["rack.input"].read.bytesize.to_s]] }
  RUBY
  GETS = 1500
  POSTS = 200
  BODY = ("b" * 32_768).freeze
  GET = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
  POST = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: #{BODY.bytesize}\r\n\r\n#{BODY}".freeze
  LIMIT_KIB = 4.0 # a connection's record is under 1 KiB; its buffers, when held, are 4 KiB and up

  def setup
    @sockets = []
    @dir = Dir.mktmpdir("margay-idle-")
    File.write(File.join(@dir, "app.ru"), APP)
    wanted = GETS + POSTS + 512
    soft, hard = Process.getrlimit(:NOFILE)
    skip "RLIMIT_NOFILE hard limit #{hard} < #{wanted}" if hard != Process::RLIM_INFINITY && hard < wanted
    Process.setrlimit(:NOFILE, wanted, hard) if soft < wanted
  end

  def teardown
    @sockets.each { |s| s.close unless s.closed? }
    @server&.kill(:TERM, timeout: 15) || @server&.kill
    FileUtils.remove_entry(@dir)
  end

  def test_idle_kept_alive_connections_hold_no_request_buffers
    port = start_server
    # The same requests on short-lived connections first: the app's garbage (a 32 KiB String per POST)
    # and the Ruby heap reach their size before the measurement.
    2.times { warm(port, GET, GETS) && warm(port, POST, POSTS) }
    before = rss_kib(@server.pid)
    open_and_ask(port, GETS, GET)
    open_and_ask(port, POSTS, POST)
    per = (rss_kib(@server.pid) - before).fdiv(GETS + POSTS)
    assert_operator per, :<, LIMIT_KIB, format("RSS grew %.1f KiB per idle connection", per)
    @sockets.last(10).each do |s| # still kept alive, served again
      s.write(GET)
      assert_equal "0", read_body(s)
    end
    assert_nil @server.exited?, "the server died"
  end

  private

  def start_server
    env = { "BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile"), "RACK_ENV" => "production" }
    @server = Margay::TestProcess.new(env, "bundle", "exec", File.join(ROOT, "exe", "margay"), "-b", "tcp://127.0.0.1:0",
                                      "app.ru", chdir: @dir, rlimit_nofile: GETS + POSTS + 512).start
    banner = %r{Listening on tcp://127\.0\.0\.1:(\d+)}
    flunk "no banner within 30 s:\n#{@server.output}" unless @server.wait_for(banner, timeout: 30)
    @server.output[banner, 1].to_i
  end

  # +count+ new connections, each sent +request+ and read its answer, then left open.
  def open_and_ask(port, count, request)
    Array.new(count) do
      s = TCPSocket.new("127.0.0.1", port)
      @sockets << s
      ask(s, request, 1)
      s
    end
  end

  # +count+ requests, 50 a connection, each connection closed after its 50.
  def warm(port, request, count)
    count.fdiv(50).ceil.times do
      TCPSocket.open("127.0.0.1", port) { |s| ask(s, request, [count, 50].min) }
    end
  end

  def ask(sock, request, times)
    times.times do
      sock.write(request)
      read_body(sock)
    end
  end

  def read_body(sock)
    buf = +""
    buf << sock.readpartial(4096) until (head_end = buf.index("\r\n\r\n"))
    length = buf[/^content-length: (\d+)/i, 1].to_i
    buf << sock.readpartial(4096) while buf.bytesize < head_end + 4 + length
    buf.byteslice(head_end + 4, length)
  end

  def rss_kib(pid)
    File.read("/proc/#{pid}/status")[/^VmRSS:\s+(\d+)/, 1].to_i
  end
end
