# frozen_string_literal: true

require "fileutils"
require "open3"
require "tmpdir"

module Margay
  # Test support (internal): certificates made with the openssl CLI in a temp dir, once per
  # process: a test CA, server certificates for localhost/127.0.0.1 signed by it (RSA-2048 and
  # ECDSA P-256), a client certificate signed by it, and an encrypted copy of the RSA key.
  module TLSCerts
    PASSWORD = "margay-test"

    module_function

    # Whether the openssl command is on PATH (the tests that need it skip without it).
    def cli?
      system("openssl", "version", out: File::NULL, err: File::NULL) == true
    end

    def dir
      @dir ||= make
    end

    def path(name) = File.join(dir, name)

    def openssl(*args)
      out, status = Open3.capture2e("openssl", *args)
      raise "openssl #{args.join(' ')} failed: #{out}" unless status.success?

      out
    end

    def make
      dir = Dir.mktmpdir("margay-tls")
      at_exit { FileUtils.rm_rf(dir) }
      Dir.chdir(dir) do
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                "-subj", "/CN=Margay Test CA")
        File.write("server.ext", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        File.write("client.ext", "extendedKeyUsage=clientAuth\n")
        sign("rsa", ["-newkey", "rsa:2048"], "/CN=localhost", "server.ext")
        sign("ecdsa", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"], "/CN=localhost", "server.ext")
        sign("client", ["-newkey", "rsa:2048"], "/CN=Margay Test Client", "client.ext")
        openssl("pkey", "-in", "rsa.key", "-out", "rsa-encrypted.key", "-aes256", "-passout", "pass:#{PASSWORD}")
      end
      dir
    end

    def sign(name, key_args, subject, ext)
      openssl("req", *key_args, "-nodes", "-keyout", "#{name}.key", "-out", "#{name}.csr", "-subj", subject)
      openssl("x509", "-req", "-in", "#{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
              "-out", "#{name}.pem", "-days", "2", "-extfile", ext)
    end
  end
end
