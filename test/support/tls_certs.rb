# frozen_string_literal: true

require "fileutils"
require "open3"
require "tmpdir"

module Margay
  # Test support (internal): certificates made with the openssl CLI in a temp dir, once per
  # process: a test CA, server certificates for localhost/127.0.0.1 signed by it (RSA-2048 and
  # ECDSA P-256), a client certificate signed by it, an encrypted copy of the RSA key, and two
  # certificates for SNI: api.example.test (RSA) and *.example.org (ECDSA).
  module TLSCerts
    PASSWORD = "margay-test"

    module_function

    # Whether the openssl command is on PATH (the tests that need it skip without it).
    def cli?
      system("openssl", "version", out: File::NULL, err: File::NULL) == true
    end

    LOCK = Mutex.new

    # Made once; tests that run in parallel threads (side_by_side) share it.
    def dir
      LOCK.synchronize { @dir ||= make }
    end

    def path(name) = File.join(dir, name)

    # Runs in the certificates' dir through spawn's chdir: a Dir.chdir block would raise in a test
    # thread while another thread holds one.
    def openssl(dir, *args)
      out, status = Open3.capture2e("openssl", *args, chdir: dir)
      raise "openssl #{args.join(' ')} failed: #{out}" unless status.success?

      out
    end

    def make
      dir = Dir.mktmpdir("margay-tls")
      owner = Process.pid
      at_exit { FileUtils.rm_rf(dir) if Process.pid == owner } # not a forked child's exit (a test's fork)
      openssl(dir, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
              "-days", "2", "-subj", "/CN=Margay Test CA")
      File.write(File.join(dir, "server.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
      File.write(File.join(dir, "client.ext"), "extendedKeyUsage=clientAuth\n")
      sign(dir, "rsa", ["-newkey", "rsa:2048"], "/CN=localhost", "server.ext")
      sign(dir, "ecdsa", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"], "/CN=localhost", "server.ext")
      sign(dir, "client", ["-newkey", "rsa:2048"], "/CN=Margay Test Client", "client.ext")
      File.write(File.join(dir, "api.ext"), "subjectAltName=DNS:api.example.test\nextendedKeyUsage=serverAuth\n")
      File.write(File.join(dir, "wild.ext"), "subjectAltName=DNS:*.example.org\nextendedKeyUsage=serverAuth\n")
      sign(dir, "api", ["-newkey", "rsa:2048"], "/CN=api.example.test", "api.ext")
      sign(dir, "wild", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"], "/CN=*.example.org", "wild.ext")
      openssl(dir, "pkey", "-in", "rsa.key", "-out", "rsa-encrypted.key", "-aes256", "-passout", "pass:#{PASSWORD}")
      dir
    end

    def sign(dir, name, key_args, subject, ext)
      openssl(dir, "req", *key_args, "-nodes", "-keyout", "#{name}.key", "-out", "#{name}.csr", "-subj", subject)
      openssl(dir, "x509", "-req", "-in", "#{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
              "-out", "#{name}.pem", "-days", "2", "-extfile", ext)
    end
  end

  # A TLS test's client side: a socket verifying the test CA's certificates, and one response
  # read from it.
  module TLSClient
    # A connected TLS socket to 127.0.0.1:+port+ for +host+ (SNI and the name checked), the test
    # CA trusted; +params+ go to SSLContext#set_params.
    def tls_socket(port, host = "localhost", **params)
      ctx = OpenSSL::SSL::SSLContext.new
      ctx.set_params({ ca_file: TLSCerts.path("ca.pem"), verify_mode: OpenSSL::SSL::VERIFY_PEER }.merge(params))
      ssl = OpenSSL::SSL::SSLSocket.new(TCPSocket.new("127.0.0.1", port), ctx)
      ssl.sync_close = true
      ssl.hostname = host
      ssl.connect
      ssl
    end

    # One response with a content-length from +ssl+: [status line, headers, body].
    def read_tls_response(ssl)
      head = +""
      head << ssl.readpartial(1) until head.end_with?("\r\n\r\n")
      length = head[/^content-length: (\d+)/i, 1].to_i
      body = +""
      body << ssl.readpartial(length - body.bytesize) while body.bytesize < length
      [head.lines.first.strip, head, body]
    end

    # GET / on the kept-alive +ssl+: [status line, headers, body].
    def tls_get(ssl)
      ssl.write("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
      read_tls_response(ssl)
    end
  end
end
