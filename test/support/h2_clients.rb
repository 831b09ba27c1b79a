# frozen_string_literal: true

require "json"
require "open3"
require "margay/native"
require_relative "tls_certs"

module Margay
  # What the HTTP/2 wire tests share: the test CA's certificates, Debian's python3 with the
  # raw-frame client (test/support/h2_frames.py), and the skips where the build or the machine
  # lacks a piece.
  module H2Clients
    CERTS = Margay::TLSCerts
    # Debian's python3 (python3-h2 is installed for it), not one a version manager put first on PATH.
    PYTHON = File.executable?("/usr/bin/python3") ? "/usr/bin/python3" : "python3"
    FRAMES = File.expand_path("h2_frames.py", __dir__)
    RAW = File.expand_path("h2_raw.py", __dir__) # reads frames raw: what comes after a GOAWAY too
    # The clients run without the ASan runtime rake test:asan preloads (curl hangs under it).
    CLIENT = { "LD_PRELOAD" => nil }.freeze

    # An ssl:// bind with the test CA's RSA certificate (made when first asked: not at load, where
    # the certificates' at_exit would run before the tests).
    def tls_bind = "ssl://127.0.0.1:0?cert=#{CERTS.path('rsa.pem')}&key=#{CERTS.path('rsa.key')}"

    # HTTP/2 over TLS (ALPN h2) and h2c with prior knowledge.
    def h2_binds = ["#{tls_bind}&http2=true", "tcp://127.0.0.1:0?http2=true"]

    def skip_without_h2
      skip "built without libnghttp2" unless Margay::Native::H2
      skip "built without OpenSSL" unless Margay::Native::TLS
      skip "no openssl command" unless CERTS.cli?
    end

    # Runs +script+ (FRAMES or RAW) against +port+; the JSON of its last line.
    def h2_client(script, port, *args)
      out, err, status = Open3.capture3(CLIENT, PYTHON, script, port.to_s, *args.map(&:to_s))
      assert status.success?, "#{File.basename(script)} #{args.join(' ')}: #{err}"
      JSON.parse(out.lines.last)
    end

    def skip_without_python_h2
      skip "no python3-h2" unless system(CLIENT, PYTHON, "-c", "import h2", out: File::NULL, err: File::NULL)
    end
  end
end
