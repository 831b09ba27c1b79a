# frozen_string_literal: true

module MargayBench
  # Self-signed certificates for 127.0.0.1 made with the openssl CLI, one per key type, for
  # the TLS benchmarks (tls.rb, h2.rb).
  module Certificates
    KEYS = {
      "rsa" => %w[-newkey rsa:2048],
      "ecdsa" => %w[-newkey ec -pkeyopt ec_paramgen_curve:P-256]
    }.freeze

    module_function

    # A certificate with a +key+ key ("rsa" or "ecdsa") written under +dir+: [cert path, key
    # path]. Aborts the run, naming +who+, if openssl cannot make it.
    def make(dir, key, who:)
      cert = File.join(dir, "#{key}.crt")
      pem = File.join(dir, "#{key}.key")
      ok = system("openssl", "req", "-x509", *KEYS.fetch(key), "-nodes", "-keyout", pem, "-out", cert, "-days", "2",
                  "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", %i[out err] => File::NULL)
      abort "#{who}: openssl could not make the #{key} certificate" unless ok
      [cert, pem]
    end
  end
end
