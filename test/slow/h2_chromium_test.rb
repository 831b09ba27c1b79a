# frozen_string_literal: true

require "test_helper"
require "json"
require "open3"
require "openssl"
require "set"
require "timeout"
require "tmpdir"
require "margay/native"
require "support/tls_certs"

# Headless Chromium loads a page with 50 assets (scripts, stylesheets, images) from an ssl://
# bind with http2=true: it picks h2 by ALPN, fetches every asset as a stream of one HTTP/2
# connection, and the page's load handler counts what arrived. The app records the protocol of
# each request; Chromium's net log (--log-net-log) shows its side: the sessions it opened and the
# status of every response. With extended_connect=true the page's WebSocket goes over the same
# HTTP/2 connection (RFC 8441), echoed by a streaming body reading the tunnel.
class H2ChromiumTest < Minitest::Test
  include Margay::TestHelper

  CERTS = Margay::TLSCerts
  BROWSERS = %w[chromium chromium-browser google-chrome].freeze
  CLIENT = { "LD_PRELOAD" => nil }.freeze # no ASan runtime in the browser (rake test:asan preloads it)
  SCRIPTS = 20
  STYLES = 15
  IMAGES = 15
  ASSETS = ([*1..SCRIPTS].map { |i| "/a/s#{i}.js" } + [*1..STYLES].map { |i| "/a/c#{i}.css" } +
            [*1..IMAGES].map { |i| "/a/i#{i}.gif" }).freeze
  GIF = "GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00," \
        "\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;".b.freeze
  # 70 KB a script: 1.4 MB of DATA frames in all.
  PADDING = "/* #{'.' * 70_000} */\n"

  def setup
    skip "built without libnghttp2" unless Margay::Native::H2
    skip "built without OpenSSL" unless Margay::Native::TLS
    skip "no openssl command" unless CERTS.cli?
    @browser = BROWSERS.find { |b| system("which", b, out: File::NULL, err: File::NULL) }
    skip "no chromium binary on PATH (#{BROWSERS.join(', ')}): apt-get install chromium" unless @browser
  end

  def page
    scripts = [*1..SCRIPTS].map { |i| %(<script src="/a/s#{i}.js"></script>) }
    styles = [*1..STYLES].map { |i| %(<link rel="stylesheet" href="/a/c#{i}.css">) }
    images = [*1..IMAGES].map { |i| %(<img src="/a/i#{i}.gif" width="1" height="1">) }
    <<~HTML
      <!doctype html>
      <html><head><title>fifty</title><link rel="icon" href="data:,">#{styles.join}</head>
      <body><div id="probe"></div>#{images.join}#{scripts.join}
      <pre id="report">pending</pre>
      <script>
        window.addEventListener("load", function () {
          var imgs = Array.prototype.filter.call(document.images, function (i) { return i.complete && i.naturalWidth === 1; });
          var css = Array.prototype.filter.call(document.styleSheets, function (s) { return s.cssRules.length === 1; });
          document.getElementById("report").textContent =
            "scripts=" + (window.assetScripts || 0) + " styles=" + css.length + " images=" + imgs.length +
            " probe=" + getComputedStyle(document.getElementById("probe")).width;
        });
      </script></body></html>
    HTML
  end

  # The page and its assets; every request's path and SERVER_PROTOCOL go to +seen+.
  def app(seen)
    lambda do |env|
      path = env["PATH_INFO"]
      seen << [path, env["SERVER_PROTOCOL"]]
      headers = { "cache-control" => "no-store" }
      case path
      when "/" then [200, headers.merge("content-type" => "text/html"), [page]]
      when %r{\A/a/s\d+\.js\z} then [200, headers.merge("content-type" => "text/javascript"),
                                     [PADDING, "window.assetScripts = (window.assetScripts || 0) + 1;\n"]]
      when %r{\A/a/c(\d+)\.css\z} then [200, headers.merge("content-type" => "text/css"),
                                        ["#probe { width: #{Regexp.last_match(1)}px; }\n"]]
      when %r{\A/a/i\d+\.gif\z} then [200, headers.merge("content-type" => "image/gif"), [GIF]]
      else [404, headers.merge("content-type" => "text/plain"), ["not found"]]
      end
    end
  end

  # The base64 SHA-256 of +pem+'s public key (what --ignore-certificate-errors-spki-list wants):
  # the browser trusts the test server's certificate and nothing else.
  def spki_hash(pem)
    key = OpenSSL::X509::Certificate.new(File.read(pem)).public_key.to_der
    [OpenSSL::Digest::SHA256.digest(key)].pack("m0")
  end

  # Runs the browser on +url+ with a fresh profile: [the DOM after the load event, the net log].
  def browse(url, dir)
    log = File.join(dir, "netlog.json")
    args = [@browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-extensions", "--disable-sync", "--user-data-dir=#{File.join(dir, 'profile')}",
            "--ignore-certificate-errors-spki-list=#{spki_hash(CERTS.path('rsa.pem'))}",
            "--log-net-log=#{log}", "--timeout=20000", "--dump-dom", url]
    out, err, status = run_bounded(args, 60)
    assert status&.success?, "#{@browser} failed (#{status.inspect}):\n#{err}"
    [out, JSON.parse(File.read(log))]
  end

  # +args+ in a process group of its own, killed whole when it outlives +limit+ seconds (the
  # browser's helper processes with it): [stdout, stderr, status or nil].
  def run_bounded(args, limit)
    Open3.popen3(CLIENT, *args, pgroup: true) do |stdin, out, err, wait|
      stdin.close
      reader = Thread.new { out.read }
      errors = Thread.new { err.read }
      unless wait.join(limit)
        Process.kill("KILL", -wait.pid)
        flunk "#{@browser} still running after #{limit} s:\n#{errors.value}"
      end
      [reader.value, errors.value, wait.value]
    end
  end

  # From the net log: the HTTP/2 sessions to +port+ and the :status of every response they carried.
  def h2_sessions(netlog, port)
    types = netlog.dig("constants", "logEventTypes").invert
    sessions = Set.new
    statuses = []
    netlog["events"].each do |e|
      case types[e["type"]]
      when "HTTP2_SESSION_INITIALIZED", "HTTP2_SESSION"
        host = e.dig("params", "host").to_s
        sessions << e.dig("source", "id") if host.end_with?(":#{port}")
      when "HTTP2_SESSION_RECV_HEADERS"
        next unless sessions.include?(e.dig("source", "id"))

        status = Array(e.dig("params", "headers")).grep(/\A:status: /).first
        statuses << status.split(": ").last if status
      end
    end
    [sessions, statuses]
  end

  WS_PAGE = <<~HTML
    <!doctype html>
    <html><head><title>ws</title><link rel="icon" href="data:,"></head>
    <body><pre id="ws">pending</pre><img src="/hold.gif" width="1" height="1">
    <script>
      function done(text) {
        document.getElementById("ws").textContent = text;
        var img = new Image(); img.src = "/done.gif"; document.body.appendChild(img);
      }
      var ws = new WebSocket("wss://" + location.host + "/ws");
      ws.onopen = function () { ws.send("hello over h2"); };
      ws.onmessage = function (m) { done("echo=" + m.data); ws.close(); };
      ws.onerror = function () { done("error"); };
    </script></body></html>
  HTML

  # One WebSocket message of the client (masked, up to 125 bytes here) read from +io+, or nil at
  # its end: [opcode, payload].
  def ws_read(io)
    head = io.read(2) or return nil
    opcode = head.getbyte(0) & 0x0f
    length = head.getbyte(1) & 0x7f
    raise "long frame" if length > 125

    mask = io.read(4).bytes
    payload = io.read(length).bytes.each_with_index.map { |b, i| b ^ mask[i % 4] }.pack("C*")
    [opcode, payload]
  end

  # An echo WebSocket over an HTTP/2 extended CONNECT (a streaming body reading the tunnel; RFC
  # 8441: no Sec-WebSocket-Key/Accept, the 200 is the handshake). /hold.gif holds the page's
  # load event until /done.gif is asked for, after the echo came (or the socket failed).
  def ws_app(seen, done)
    lambda do |env|
      seen << [env["PATH_INFO"], env["REQUEST_METHOD"], env["SERVER_PROTOCOL"], env["rack.protocol"]]
      case env["PATH_INFO"]
      when "/" then [200, { "content-type" => "text/html" }, [WS_PAGE]]
      when "/hold.gif" then Timeout.timeout(20) { done.pop } && [200, { "content-type" => "image/gif" }, [GIF]]
      when "/done.gif" then done << true && [200, { "content-type" => "image/gif" }, [GIF]]
      when "/ws"
        body = lambda do |stream|
          while (frame = ws_read(stream))
            opcode, payload = frame
            seen << [:message, opcode, payload]
            break stream.write([0x88, 0].pack("C*")) if opcode == 8 # close, answered

            stream.write([0x81, payload.bytesize].pack("C*") + payload) if opcode == 1
          end
        end
        [200, {}, body]
      else [404, { "content-type" => "text/plain" }, ["not found"]]
      end
    end
  end

  # With extended_connect=true Chromium opens its WebSocket as a CONNECT stream (:protocol
  # websocket) on the page's HTTP/2 connection; the app echoes a message through the tunnel.
  def test_a_websocket_over_http2_extended_connect
    seen = Queue.new
    bind = "ssl://127.0.0.1:0?cert=#{CERTS.path('rsa.pem')}&key=#{CERTS.path('rsa.key')}&http2=true&extended_connect=true"
    Dir.mktmpdir("margay-chromium") do |dir|
      with_server(ws_app(seen, Queue.new), binds: [bind], lint: false) do |_host, port|
        dom, netlog = browse("https://127.0.0.1:#{port}/", dir)
        assert_includes dom, "echo=hello over h2", "the echo came back: #{dom}"
        events = []
        events << seen.pop until seen.empty?
        assert_includes events, ["/ws", "CONNECT", "HTTP/2", ["websocket"]]
        assert_includes events, [:message, 1, "hello over h2"]
        sessions, = h2_sessions(netlog, port)
        assert_equal 1, sessions.size, "the page and its WebSocket shared one HTTP/2 connection"
      end
    end
  end

  def test_fifty_assets_over_one_h2_connection
    seen = Queue.new
    bind = "ssl://127.0.0.1:0?cert=#{CERTS.path('rsa.pem')}&key=#{CERTS.path('rsa.key')}&http2=true"
    Dir.mktmpdir("margay-chromium") do |dir|
      with_server(app(seen), binds: [bind]) do |_host, port|
        dom, netlog = browse("https://127.0.0.1:#{port}/", dir)
        assert_includes dom, "<title>fifty</title>", "the page loaded"
        assert_includes dom, "scripts=#{SCRIPTS} styles=#{STYLES} images=#{IMAGES} probe=#{STYLES}px",
                        "every asset arrived and was used (the last stylesheet's rule wins)"
        requests = []
        requests << seen.pop until seen.empty?
        paths = requests.map(&:first)
        assert_equal ["/", *ASSETS].sort, paths.sort, "each asset asked for once: #{paths.inspect}"
        assert_equal ["HTTP/2"], requests.map(&:last).uniq, "every request came over HTTP/2"
        sessions, statuses = h2_sessions(netlog, port)
        assert_equal 1, sessions.size, "one HTTP/2 connection carried the page and its assets"
        assert_equal ["200"] * (1 + ASSETS.size), statuses, "the browser saw 51 responses of 200 over h2"
      end
    end
  end
end
