# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "margay/binder"

# Listeners from bind URLs, and listeners handed over by a previous master
# (MARGAY_INHERIT_FDS, a hot restart).
class BinderTest < Minitest::Test
  Binder = Margay::Binder

  def setup
    @ios = []
  end

  def teardown
    @ios.each { |io| io.close unless io.closed? }
  end

  def open(binds, env: {})
    Binder.open(binds, backlog: 16, env: env).tap { |listeners| @ios.concat(listeners.map(&:io)) }
  end

  def test_tcp_port_zero_is_resolved
    listener, = open(["tcp://127.0.0.1:0"])
    port = listener.io.local_address.ip_port
    assert_operator port, :>, 0
    assert_equal ["tcp://127.0.0.1:0", "tcp://127.0.0.1:#{port}", false, "127.0.0.1", port.to_s],
                 [listener.bind, listener.url, listener.unix, listener.server_name, listener.server_port]
    assert listener.io.close_on_exec?
    TCPSocket.new("127.0.0.1", port).close # it listens
  end

  def test_a_wildcard_host_is_served_as_localhost
    listener, = open(["tcp://0.0.0.0:0"])
    assert_equal "localhost", listener.server_name
    assert_match %r{\Atcp://0\.0\.0\.0:\d+\z}, listener.url
  end

  def test_unix_socket_path
    Dir.mktmpdir do |dir|
      path = File.join(dir, "app.sock")
      listener, = open(["unix://#{path}"])
      assert_equal ["unix://#{path}", true, "localhost"], [listener.url, listener.unix, listener.server_name]
      assert File.socket?(path)
      UNIXSocket.new(path).close # it listens
    end
  end

  def test_a_stale_unix_socket_file_is_replaced_and_a_live_one_is_not
    Dir.mktmpdir do |dir|
      path = File.join(dir, "app.sock")
      UNIXServer.new(path).close # left behind by a server that died
      listener, = open(["unix://#{path}"])
      UNIXSocket.new(path).close
      error = assert_raises(Margay::ConfigError) { open(["unix://#{path}"]) }
      assert_match(/\Acannot bind: /, error.message)
      assert_equal false, listener.io.closed?
    end
  end

  def test_a_port_in_use_is_a_config_error
    taken = TCPServer.new("127.0.0.1", 0)
    @ios << taken
    error = assert_raises(Margay::ConfigError) { open(["tcp://127.0.0.1:#{taken.local_address.ip_port}"]) }
    assert_match(/\Acannot bind: .*in use/i, error.message)
  end

  # A re-executed master takes over the sockets its predecessor listened on,
  # by bind URL; an inherited socket whose bind is gone is closed.
  def test_inherited_fds_are_taken_over_by_bind
    kept = TCPServer.new("127.0.0.1", 0)
    dropped = TCPServer.new("127.0.0.1", 0)
    [kept, dropped].each { |s| s.autoclose = false } # the listeners own the fds now
    env = { Binder::INHERIT_ENV => "tcp://127.0.0.1:0=#{kept.fileno},tcp://127.0.0.1:1=#{dropped.fileno}" }
    listener, = open(["tcp://127.0.0.1:0"], env: env)
    assert_equal kept.fileno, listener.io.fileno
    assert_equal "tcp://127.0.0.1:#{kept.local_address.ip_port}", listener.url
    assert listener.io.close_on_exec?
    refute env.key?(Binder::INHERIT_ENV), "consumed: not passed on to children"
    assert_raises(Errno::EBADF) { IO.for_fd(dropped.fileno, autoclose: false) }
  end
end
