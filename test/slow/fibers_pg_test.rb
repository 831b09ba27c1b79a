# frozen_string_literal: true

require "test_helper"
require "fileutils"
require "etc"

begin
  require "pg"
rescue LoadError
  nil
end

# Fiber mode with a real PostgreSQL (issue 13): pg's async API waits through the fiber
# scheduler, so two requests each running pg_sleep(0.2) on ONE thread overlap. The cluster is
# made here with initdb/pg_ctl in a temp dir, on a unix socket only, and removed afterwards.
class FibersPgTest < Minitest::Test
  include Margay::TestHelper

  BINDIR = Dir["/usr/lib/postgresql/*/bin"].max_by { |d| d[%r{/(\d+)/bin\z}, 1].to_i }

  def setup
    skip "the pg gem is not installed" unless defined?(PG)
    initdb = BINDIR && File.join(BINDIR, "initdb")
    skip "PostgreSQL is not installed (no initdb under /usr/lib/postgresql/*/bin): apt install postgresql" unless initdb && File.executable?(initdb)
    @dir = Dir.mktmpdir("margay-pg-")
    # initdb refuses to run as root: the cluster then belongs to nobody.
    @as = Process.uid.zero? ? ["runuser", "-u", "nobody", "--"] : []
    FileUtils.chown("nobody", nil, @dir) if Process.uid.zero?
    pg!(File.join(BINDIR, "initdb"), "-D", "#{@dir}/data", "-A", "trust", "-U", "margay", "--no-sync")
    pg!(File.join(BINDIR, "pg_ctl"), "-D", "#{@dir}/data", "-l", "#{@dir}/log", "-w", "-t", "60",
        "-o", "-k #{@dir} -c listen_addresses='' -c fsync=off", "start")
    @started = true
  end

  def teardown
    pg!(File.join(BINDIR, "pg_ctl"), "-D", "#{@dir}/data", "-m", "immediate", "-w", "stop") if @started
  ensure
    FileUtils.rm_rf(@dir) if @dir
  end

  def pg!(*cmd)
    out = IO.popen([*@as, *cmd, { err: %i[child out] }], &:read)
    assert $CHILD_STATUS.success?, "#{cmd.join(' ')} failed:\n#{out}\n#{File.exist?("#{@dir}/log") ? File.read("#{@dir}/log") : ''}"
  end

  def connect
    PG.connect(host: @dir, dbname: "postgres", user: "margay")
  end

  def test_two_pg_sleep_queries_overlap_on_one_thread
    now = 0
    max = 0
    app = lambda do |env|
      conn = connect
      begin
        now += 1
        max = now if now > max
        value = conn.exec(env["PATH_INFO"] == "/sleep" ? "SELECT pg_sleep(0.2), 40 + 2 AS v" : "SELECT 7 AS v").first["v"]
      ensure
        now -= 1
        conn.close
      end
      [200, { "content-type" => "text/plain" }, [value]]
    end
    with_server(app, fiber_scheduler: true, event_backend: :auto, min_threads: 1, max_threads: 1) do |_host, port|
      socks = Array.new(2) do
        s = TCPSocket.new("127.0.0.1", port)
        s.write("GET /sleep HTTP/1.1\r\nHost: x\r\n\r\n")
        s
      end
      assert_equal [[200, "42"]], socks.map { |s| read_response(s, timeout: 20).values_at(0, 2) }.uniq
      socks.each(&:close)
      sock = TCPSocket.new("127.0.0.1", port)
      sock.write("GET /quick HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      assert_equal [200, "7"], read_response(sock).values_at(0, 2)
      sock.close
    end
    assert_equal 2, max, "both queries were in flight at once on the one thread"
  end
end
