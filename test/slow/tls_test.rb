# frozen_string_literal: true

require_relative "support/side_by_side"
require "margay/native"
require "margay/process/tls"
require "support/tls_certs"
require "fileutils"
require "openssl"

# TLS through the real executables from bench/Gemfile: a Puma config with ssl_bind under
# Margay (single and -w 2) and beside Puma 8; ssl_bind's URL and the query's reading against
# Puma's own code.
class TLSSlowTest < Minitest::Test
  include SideBySide
  include SideBySide::Case
  include Margay::TLSClient

  CERTS = Margay::TLSCerts
  DIFFERENCES = {}.freeze

  def setup
    super
    skip "built without OpenSSL" unless Margay::Native::TLS
    skip "no openssl command" unless CERTS.cli?
    skip "no curl" unless system("curl", "--version", out: File::NULL, err: File::NULL)
  end

  def config(extra = "")
    <<~RUBY
      ssl_bind "127.0.0.1", 0, cert: #{CERTS.path('rsa.pem').inspect}, key: #{CERTS.path('rsa.key').inspect}
      #{extra}
    RUBY
  end

  def start(server, args, dir:)
    run = Run.new(server, args, dir: dir).start
    @runs << run
    assert run.wait_for(/Use Ctrl-C to stop/, timeout: 40), "#{server} did not start:\n#{run.output}"
    run
  end

  # The port the process tree listens on (from /proc).
  def port_of(run)
    listener = nil
    Timeout.timeout(10) { sleep 0.05 until (listener = run.listeners.first) }
    listener.port
  end

  # curl over TLS, the CA checked: "CODE BODY".
  def curl(port, path = "/")
    out, = Open3.capture2("curl", "-s", "--max-time", "10", "--cacert", CERTS.path("ca.pem"), "-w", " %{http_code}",
                          "--resolve", "localhost:#{port}:127.0.0.1", "https://localhost:#{port}#{path}")
    out
  end

  def test_margay_serves_ssl_bind_single_and_cluster
    @runs = []
    dir = SideBySide.app_dir
    (@dirs ||= []) << dir
    File.write(File.join(dir, "puma.rb"), config)
    [[], %w[-w 2]].each do |args|
      run = start(:margay, ["-C", "puma.rb", *args], dir: dir)
      port = port_of(run)
      assert_match(/\Aok \d+ 200\z/, curl(port), "#{args.inspect}: #{run.output}")
      assert_includes run.output, "Listening on ssl://127.0.0.1:#{port}"
      resumed_across_workers(port) if args.any?
      assert_equal 0, run.stop&.exitstatus
    end
  end

  # ssl_bind's http2: true (Margay's own) through the real executable, single and -w 2: curl
  # picks h2 by ALPN and is answered over HTTP/2; --http1.1 on the same port still works.
  def test_ssl_bind_with_http2
    skip "built without libnghttp2" unless Margay::Native::H2
    @runs = []
    dir = SideBySide.app_dir
    (@dirs ||= []) << dir
    File.write(File.join(dir, "puma.rb"), config.sub("key: ", "http2: true, key: "))
    [[], %w[-w 2]].each do |args|
      run = start(:margay, ["-C", "puma.rb", *args], dir: dir)
      port = port_of(run)
      out, err, = Open3.capture3("curl", "-sS", "-v", "--http2", "--max-time", "10", "--cacert", CERTS.path("ca.pem"),
                                 "--resolve", "localhost:#{port}:127.0.0.1", "https://localhost:#{port}/")
      assert_includes err, "ALPN: server accepted h2", run.output
      assert_match(%r{^< HTTP/2 200}, err)
      assert_match(/\Aok \d+\z/, out)
      out, err, = Open3.capture3("curl", "-sS", "-v", "--http1.1", "--max-time", "10", "--cacert", CERTS.path("ca.pem"),
                                 "--resolve", "localhost:#{port}:127.0.0.1", "https://localhost:#{port}/")
      assert_includes err, "ALPN: server accepted http/1.1", "HTTP/1.1 on the same port"
      assert_match(/\Aok \d+\z/, out)
      assert_equal 0, run.stop&.exitstatus
    end
  end

  # h2load's 64 connections connect at once, and the first ones through their handshake keep the
  # threads busy with their streams. A handshake whose event a thread took while holding the GVL
  # went back to the tail of the ready list, over and over: the slowest request of such a run
  # took 8-10 s (its connection's Finished not read yet), where now it takes about 0.5 s.
  def test_http2_streams_do_not_starve_the_handshakes_of_new_connections
    skip "built without libnghttp2" unless Margay::Native::H2
    skip "no h2load" unless system("h2load", "--version", out: File::NULL, err: File::NULL)
    @runs = []
    dir = SideBySide.app_dir
    (@dirs ||= []) << dir
    File.write(File.join(dir, "puma.rb"), config("max_keep_alive 100_000_000").sub("key: ", "http2: true, key: "))
    run = start(:margay, ["-C", "puma.rb"], dir: dir)
    port = port_of(run)
    out, status = Open3.capture2e("timeout", "60", "h2load", "-t2", "-c64", "-m100", "-n200000", "https://127.0.0.1:#{port}/")
    assert status.success?, out
    assert_match(/ 200000 succeeded/, out)
    value, unit = out.match(/^time for request:\s+\S+\s+([\d.]+)(us|ms|s)\b/)&.captures
    assert value, out
    slowest = value.to_f * { "us" => 1e-6, "ms" => 1e-3, "s" => 1.0 }.fetch(unit)
    assert_operator slowest, :<, 2, "the slowest request took #{slowest} s:\n#{out}"
    assert_equal 0, run.stop&.exitstatus
  end

  # A hot restart (USR2: exec with the listeners inherited) keeps the TLS port and serves HTTPS
  # again with a new context made from the same bind, flags with commas in its query included.
  def test_usr2_keeps_the_tls_listener
    @runs = []
    dir = SideBySide.app_dir
    (@dirs ||= []) << dir
    File.write(File.join(dir, "puma.rb"), config.sub("key: ", "verification_flags: %w[PARTIAL_CHAIN X509_STRICT], reuse: { size: 10, timeout: 60 }, key: "))
    run = start(:margay, ["-C", "puma.rb"], dir: dir)
    port = port_of(run)
    pid = curl(port)[/\Aok (\d+) 200\z/, 1]
    assert pid, run.output
    Process.kill(:USR2, run.pid)
    assert run.wait_for(/Use Ctrl-C to stop/, count: 2, timeout: 40), run.output
    assert_equal "ok #{pid} 200", curl(port), "the same process, the same port, HTTPS again"
    assert_equal 0, run.stop&.exitstatus
  end

  # ALRM reads the certificate files again, single and -w 2 (the master passes it to each
  # worker): a keep-alive connection made before serves on, every new handshake (whichever
  # worker takes it) gets the new certificate. In a cluster a phased restart (USR1) reads them
  # too: its new workers start with what is on disk.
  def test_alrm_and_phased_restart_reload_the_certificates
    @runs = []
    dir = SideBySide.app_dir
    (@dirs ||= []) << dir
    install = ->(name) { %w[pem key].each { |ext| FileUtils.cp(CERTS.path("#{name}.#{ext}"), File.join(dir, "server.#{ext}")) } }
    install.call("rsa")
    File.write(File.join(dir, "puma.rb"), %(ssl_bind "127.0.0.1", 0, cert: "server.pem", key: "server.key"\n))
    serial = ->(name) { OpenSSL::X509::Certificate.new(File.read(CERTS.path("#{name}.pem"))).serial }
    [[[], 1], [%w[-w 2], 3]].each do |args, lines|
      install.call("rsa")
      run = start(:margay, ["-C", "puma.rb", *args], dir: dir)
      port = port_of(run)
      assert run.wait_for(/master: worker \S+( \S+)* booted/, count: 2, timeout: 40), run.output unless args.empty?
      kept = tls_socket(port)
      assert_match(/\Aok \d+\z/, tls_get(kept).last, run.output)
      install.call("ecdsa")
      Process.kill(:ALRM, run.pid)
      assert run.wait_for(/TLS certificates of ssl:\S+ reloaded/, count: lines, timeout: 20), run.output
      assert_match(/\Aok \d+\z/, tls_get(kept).last, "the connection made before the reload")
      assert_equal serial.call("rsa"), kept.peer_cert.serial
      pids = {}
      40.times do # until both workers answered a new handshake
        ssl = tls_socket(port)
        assert_equal serial.call("ecdsa"), ssl.peer_cert.serial, run.output
        pids[tls_get(ssl).last[/\d+/]] = true
        ssl.close
        break if pids.size == (args.empty? ? 1 : 2)
      end
      assert_equal args.empty? ? 1 : 2, pids.size, "every worker took the new certificate"
      kept.close
      unless args.empty?
        install.call("rsa")
        Process.kill(:USR1, run.pid)
        assert run.wait_for(/master: worker \S+( \S+)* booted/, count: 4, timeout: 60), run.output
        ssl = tls_socket(port)
        assert_equal serial.call("rsa"), ssl.peer_cert.serial, run.output
        ssl.close
      end
      assert_equal 0, run.stop&.exitstatus
    end
  end


  # As Puma: an ssl_bind without cert and key, the localhost gem loaded by the config file, serves
  # with the gem's self-signed certificate for localhost (made in XDG_STATE_HOME). Without the
  # gem loaded the start is refused with one line.
  def test_localhost_gem_development_certificate
    @runs = []
    dir = SideBySide.app_dir
    (@dirs ||= []) << dir
    state = File.join(dir, "state")
    File.write(File.join(dir, "puma.rb"), %(require "localhost"\nssl_bind "127.0.0.1", 0\n))
    run = Run.new(:margay, ["-C", "puma.rb"], dir: dir, env: { "XDG_STATE_HOME" => state }).start
    @runs << run
    assert run.wait_for(/Use Ctrl-C to stop/, timeout: 40), run.output
    port = port_of(run)
    crt = File.join(state, "localhost.rb", "localhost.crt")
    assert File.exist?(crt), "the gem made its certificate in #{state}: #{Dir.glob("#{state}/**/*")}"
    out, = Open3.capture2("curl", "-s", "--max-time", "10", "--cacert", crt, "--resolve", "localhost:#{port}:127.0.0.1",
                          "https://localhost:#{port}/")
    assert_match(/\Aok \d+\z/, out, run.output)
    assert_equal 0, run.stop&.exitstatus
    File.write(File.join(dir, "puma.rb"), %(ssl_bind "127.0.0.1", 0\n))
    refused = Run.new(:margay, ["-C", "puma.rb"], dir: dir).start
    @runs << refused
    assert refused.wait_for(/cert and key are needed \(or, for development, the localhost gem/, timeout: 40), refused.output
  end

  # testssl.sh (its own sockets: it offers what the client's OpenSSL no longer has) against an
  # RSA and an ECDSA listener: no SSL 2/3, TLS 1.0/1.1, NULL, anonymous, export, low, 3DES/IDEA
  # or "average" (CBC, no forward secrecy) suite offered; TLS 1.2 and 1.3 and strong suites are.
  def test_testssl_finds_no_weak_protocol_or_cipher
    skip "no testssl.sh (apt-get install testssl.sh)" unless system("testssl", "--version", out: File::NULL, err: File::NULL)
    %w[rsa ecdsa].each do |kind|
      bind = "ssl://127.0.0.1:0?cert=#{CERTS.path("#{kind}.pem")}&key=#{CERTS.path("#{kind}.key")}"
      config = Margay::Configuration.new(binds: [bind], silent: true)
      server = Margay::Server.new(->(_env) { [200, {}, ["ok"]] }, config, log: Margay::Log.new(out: StringIO.new, err: StringIO.new))
      server.bind
      thread = Thread.new { server.run }
      findings = testssl(server.addresses.first[%r{//(.*)\z}, 1])
      %w[SSLv2 SSLv3 TLS1 TLS1_1 cipherlist_NULL cipherlist_aNULL cipherlist_EXPORT cipherlist_LOW cipherlist_3DES_IDEA
         cipherlist_AVERAGE].each { |id| assert_equal "not offered", findings[id], "#{kind}: #{id}" }
      %w[TLS1_2 TLS1_3 cipherlist_STRONG].each { |id| assert_match(/\Aoffered/, findings[id].to_s, "#{kind}: #{id}") }
    ensure
      server&.stop
      thread&.join(10)
    end
  end

  # testssl.sh's protocol and cipher-category findings for HOST:PORT: id => finding.
  def testssl(address)
    Dir.mktmpdir do |dir|
      json = File.join(dir, "testssl.json")
      out, = Open3.capture2e("testssl", "--quiet", "--color", "0", "--warnings", "batch", "--protocols", "--std",
                             "--jsonfile", json, address)
      assert File.exist?(json), out
      JSON.parse(File.read(json)).to_h { |f| [f["id"], f["finding"]] }
    end
  end

  # Every worker has the master's context: a session from one worker resumes on the other.
  def resumed_across_workers(port)
    sess = File.join(@dirs.last, "session.pem")
    s_client(port, "-sess_out", sess)
    pids = {}
    40.times do
      out = s_client(port, "-sess_in", sess)
      assert_match(/^Reused, TLSv1\.2/, out, "a ticket of the master's context resumes on every worker")
      pids[out[/^ok (\d+)/, 1]] = true
      break if pids.size == 2
    end
    assert_equal 2, pids.size, "both workers answered (and resumed the session)"
  end

  def s_client(port, *args)
    out, = Open3.capture2e("openssl", "s_client", "-connect", "127.0.0.1:#{port}", "-tls1_2", "-CAfile", CERTS.path("ca.pem"),
                           "-ign_eof", *args, stdin_data: "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    out
  end

  def test_side_by_side_with_puma
    observed = side_by_side do |server, dir|
      File.write(File.join(dir, "puma.rb"), config)
      run = Run.new(server, ["-C", "puma.rb"], dir: dir).start
      @runs << run
      run.wait_for(/Use Ctrl-C to stop/, timeout: 40)
      port = port_of(run)
      seen = curl(port).sub(/\Aok \d+/, "ok PID")
      run.stop
      { seen: seen, output: run.output }
    end
    assert_same observed, "curl over TLS"
    assert_equal "ok PID 200", observed[:margay][:seen]
  end

  # ssl_bind's URL and the query's reading, against Puma 8's own DSL.ssl_bind_str and
  # Util.parse_query (run in the bench bundle).
  CASES = [
    { cert: "/etc/ssl/my cert.pem", key: "/k+ey%.pem" },
    { cert: "/c.pem", key: "/k.pem", verify_mode: "force_peer", ca: "/path/to ca.pem", no_tlsv1: true,
      verification_flags: %w[PARTIAL_CHAIN X509_STRICT], backlog: 64, low_latency: false },
    { cert: "/c.pem", key: "/k.pem", key_password_command: "/bin/echo 'x&y'", reuse: { size: 100, timeout: 60 },
      ssl_ciphersuites: "TLS_AES_128_GCM_SHA256", verify_mode: "peer", ca: "/ca.pem", no_tlsv1_1: true },
    { cert: "/c.pem", key: "/k.pem", reuse: true }
  ].freeze

  def test_bind_url_and_query_as_puma_writes_and_reads_them
    script = <<~RUBY
      require "json"; require "puma"; require "puma/dsl"; require "puma/util"
      cases = JSON.parse(STDIN.read, symbolize_names: true)
      out = cases.map do |opts|
        opts[:reuse] = true if opts[:reuse] == "true"
        url = Puma::DSL.ssl_bind_str("0.0.0.0", 9443, opts)
        [url, Puma::Util.parse_query(url.split("?", 2)[1])]
      end
      puts JSON.generate(out)
    RUBY
    json = JSON.generate(CASES.map { |c| c[:reuse] == true ? c.merge(reuse: "true") : c })
    out, status = Open3.capture2(SideBySide.child_env, "bundle", "exec", "ruby", "-e", script, stdin_data: json,
                                 chdir: SideBySide::ROOT, unsetenv_others: true)
    assert status.success?, out
    JSON.parse(out).zip(CASES).each do |(puma_url, puma_params), opts|
      url = Margay::TLS.bind_url("0.0.0.0", 9443, opts)
      assert_equal puma_url, url, "ssl_bind #{opts.inspect}"
      ours = Margay::TLS.parse_query(url, url.split("?", 2)[1])
      puma_params.each do |name, value|
        assert_equal typed(name, value), ours.fetch(name.to_sym), "#{name} of #{url}"
      end
    end
  end

  # Puma's text value as Margay::TLS.parse_query types it.
  def typed(name, value)
    case name
    when "verification_flags" then value.split(",").sum { |flag| Margay::TLS::VERIFICATION_FLAGS.fetch(flag) }
    when "backlog" then Integer(value, 10)
    when "no_tlsv1", "no_tlsv1_1", "low_latency" then value == "true"
    else value
    end
  end
end
