# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require "margay/process/binder"

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
    skip_on_jruby "JRuby's sockets do not say close_on_exec (it never execs them)"
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
    skip_on_jruby "JRuby cannot take a listener over from a descriptor number"
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

  # extended_connect=true (RFC 8441 on HTTP/2): only beside http2=true.
  def test_extended_connect_option
    assert_equal({ http2: true, extended_connect: true },
                 Margay::Binder.parse("tcp://127.0.0.1:1?http2=true&extended_connect=true").options)
    assert Margay::Binder.extended_connect?("tcp://127.0.0.1:1", { http2: true, extended_connect: true })
    refute Margay::Binder.extended_connect?("tcp://127.0.0.1:1", { http2: true })
    error = assert_raises(Margay::ConfigError) do
      Margay::Binder.extended_connect?("tcp://127.0.0.1:1", { extended_connect: true })
    end
    assert_equal "bind tcp://127.0.0.1:1: extended_connect=true needs http2=true", error.message
  end

  # http2=true on tcp:// and ssl:// binds; built without libnghttp2 (Native::H2 false) it
  # refuses to start with one line.
  def test_http2_option
    assert_equal({ http2: true }, Margay::Binder.parse("tcp://127.0.0.1:1?http2=true").options)
    assert_includes Margay::Binder.parse("ssl://127.0.0.1:1?cert=c&key=k&http2=true").options, :http2
    if RUBY_ENGINE == "jruby"
      error = assert_raises(Margay::ConfigError) { Margay::Binder.http2?("tcp://127.0.0.1:1", { http2: true }) }
      assert_equal "bind tcp://127.0.0.1:1: http2=true, not on jruby yet (its pure-Ruby engine has no HTTP/2)", error.message
      return
    end
    require "margay/native"
    native = Margay::Native
    saved = native::H2
    native.send(:remove_const, :H2)
    native.const_set(:H2, false)
    error = assert_raises(Margay::ConfigError) { Margay::Binder.http2?("tcp://127.0.0.1:1", { http2: true }) }
    assert_equal "bind tcp://127.0.0.1:1: http2=true, but Margay was built without libnghttp2 " \
                 "(install libnghttp2-dev and reinstall margay)", error.message
    refute Margay::Binder.http2?("tcp://127.0.0.1:1", {})
  ensure
    unless saved.nil?
      native.send(:remove_const, :H2)
      native.const_set(:H2, saved)
    end
  end

  # Puma's query options are parsed strictly: one line for anything unknown.
  def test_parse_bind_options
    url = Binder.parse("tcp://127.0.0.1:0?backlog=2048&low_latency=true&reuse_port=true")
    assert_equal [:tcp, "127.0.0.1", 0, { backlog: 2048, low_latency: true, reuse_port: true }],
                 [url.scheme, url.host, url.port, url.options]
    url = Binder.parse("unix:///tmp/u.sock?umask=0111&mode=0666&backlog=5")
    assert_equal [:unix, "/tmp/u.sock", { umask: 0o111, mode: 0o666, backlog: 5 }], [url.scheme, url.path, url.options]
    assert_equal "::1", Binder.parse("tcp://[::1]:80").host
    {
      "tcp://127.0.0.1:1?umask=0111" => /unknown option "umask" \(known: backlog, low_latency, reuse_port, http2, extended_connect\)/,
      "unix:///tmp/u.sock?reuse_port=true" => /unknown option "reuse_port"/,
      "tcp://127.0.0.1:1?backlog=0" => /backlog must be a positive integer, got "0"/,
      "tcp://127.0.0.1:1?backlog" => /backlog must be a positive integer, got nil/,
      "tcp://127.0.0.1:1?low_latency=yes" => /low_latency must be true or false/,
      "unix:///tmp/u.sock?mode=999" => /mode must be an octal mode/,
      "tcp://127.0.0.1:1?backlog=1&backlog=2" => /backlog given twice/,
      "tcp://127.0.0.1:65536" => /port 65536 is not in 0\.\.65535/,
      "ssl://127.0.0.1:1?cert=c" => /cert and key are needed/,
      "ssl://127.0.0.1:1?key=k&cert=c&keystore=x" => /unknown TLS option "keystore"/,
      "ssl://127.0.0.1:1?key=k&cert=c&verify_mode=peer" => /verify_mode=peer needs ca=FILE/,
      "ssl://127.0.0.1:1?key=k&cert=c&verify_mode=always" => /bad value "always" for verify_mode/,
      "ssl://127.0.0.1:1?key=k&cert=c&verification_flags=NOPE" => /unknown verification flag "NOPE"/,
      "http://127.0.0.1:1" => %r{expected tcp://HOST:PORT, ssl://HOST:PORT\?cert=\.\.\.&key=\.\.\. or unix://PATH}
    }.each do |bind, pattern|
      error = assert_raises(Margay::ConfigError, bind) { Binder.parse(bind) }
      assert_match pattern, error.message
      assert_equal 1, error.message.lines.size
    end
  end

  def test_inherited_ssl_binds_keep_the_commas_of_their_query
    ssl = "ssl://127.0.0.1:1?cert=c&key=k&verification_flags=PARTIAL_CHAIN,X509_STRICT&reuse=100,60"
    assert_equal({ ssl => 7, "tcp://127.0.0.1:2" => 8, "unix:/tmp/a,b.sock" => 9 },
                 Binder.parse_inherited("#{ssl}=7,tcp://127.0.0.1:2=8,unix:/tmp/a,b.sock=9"))
  end

  def test_unix_urls_as_puma_reads_them
    assert_equal "/tmp/a b.sock", Binder.parse("unix:///tmp/a%20b.sock").path
    assert_equal "/srv/app/puma.sock", Binder.parse("unix:/srv/app/puma.sock").path, "File.join(\"unix://\", dir) collapses the slashes"
    assert_equal "tmp/puma.sock", Binder.parse("unix://tmp/puma.sock").path, "relative to the directory"
    assert_raises(Margay::ConfigError) { Binder.parse("unix:tmp/puma.sock") }
  end

  def test_unix_umask_mode_and_backlog
    Dir.mktmpdir do |dir|
      masked = File.join(dir, "masked.sock")
      moded = File.join(dir, "moded.sock")
      before = File.umask
      a, b = open(["unix://#{masked}?umask=0077&backlog=8", "unix://#{moded}?mode=0666"])
      assert_equal before, File.umask, "the umask is restored"
      assert_equal 0o700, File.stat(masked).mode & 0o777
      assert_equal 0o666, File.stat(moded).mode & 0o777
      assert_equal ["unix://#{masked}", "unix://#{masked}?umask=0077&backlog=8"], [a.url, a.bind]
      refute File.exist?("#{masked}?umask=0077&backlog=8"), "the query is not part of the file name"
      UNIXSocket.new(moded).close
      assert b.io
      plain, = open(["unix://#{File.join(dir, 'plain.sock')}"])
      assert_equal 0o777, File.stat(File.join(dir, "plain.sock")).mode & 0o777, "umask 0 by default, as in Puma"
      assert plain.io
    end
  end

  def test_tcp_reuse_port_lets_two_listeners_share_a_port
    skip_on_jruby "binds' reuse_port is ignored (JRuby listens through TCPServer)"
    first, = open(["tcp://127.0.0.1:0?reuse_port=true"])
    port = first.io.local_address.ip_port
    assert first.io.getsockopt(Socket::SOL_SOCKET, Socket::SO_REUSEPORT).bool
    second, = open(["tcp://127.0.0.1:#{port}?reuse_port=true&backlog=4"])
    assert_equal port, second.io.local_address.ip_port
    error = assert_raises(Margay::ConfigError) { open(["tcp://127.0.0.1:#{port}"]) }
    assert_match(/in use/i, error.message)
  end

  def test_low_latency_false_warns_that_nodelay_is_always_on
    _, err = capture_io { open(["tcp://127.0.0.1:0?low_latency=false"]) }
    assert_match(/\Amargay: bind 127\.0\.0\.1:0: low_latency=false ignored \(Margay sets TCP_NODELAY/, err)
    _, err = capture_io { open(["tcp://127.0.0.1:0?low_latency=true"]) }
    assert_equal "", err
  end

  # "::" is one dual-stack socket: IPv4 clients reach it too.
  def test_the_unspecified_ipv6_host_is_dual_stack
    skip_on_jruby "JRuby's Socket has no IPV6_V6ONLY"
    skip "no IPv6 on this machine" unless Socket.ip_address_list.any?(&:ipv6?)
    listener, = open(["tcp://[::]:0"])
    assert_equal 0, listener.io.getsockopt(Socket::IPPROTO_IPV6, Socket::IPV6_V6ONLY).int
    assert_equal "localhost", listener.server_name
    TCPSocket.new("127.0.0.1", listener.io.local_address.ip_port).close
    TCPSocket.new("::1", listener.io.local_address.ip_port).close
  end

  # Puma binds "localhost" to every loopback address (127.0.0.1 and ::1).
  def test_localhost_listens_on_every_loopback_address
    listeners = open(["tcp://localhost:0"])
    loopbacks = Socket.ip_address_list.select { |a| a.ipv4_loopback? || a.ipv6_loopback? }.map(&:ip_address).uniq
    assert_equal loopbacks.sort, listeners.map { |l| l.io.local_address.ip_address }.sort
    assert_equal 1, listeners.map { |l| l.io.local_address.ip_port }.uniq.size, "one port for all of them"
    assert_equal listeners.map(&:bind).uniq.size, listeners.size, "distinct binds: each can be handed over on restart"
  end
end
