# frozen_string_literal: true

require "uri"
require_relative "../errors"

module Margay
  # Internal: the TLS side of a bind. Reads Puma's ssl:// query options (ssl_bind writes them)
  # and makes the listener's Native::TLSContext, once, in the process that binds (a cluster's
  # master, before it forks: every worker shares the context and its session-ticket keys). The
  # handshake and the records are the engine's (ext/margay/core/tls.c), without the GVL.
  module TLS
    # Puma 8's ssl_bind options, and how each value is read. no_tlsv1 and no_tlsv1_1 are taken
    # and change nothing: TLS 1.2 is the minimum anyway.
    OPTIONS = {
      "cert" => :text, "key" => :text, "cert_pem" => :text, "key_pem" => :text,
      "key_password_command" => :text, "ca" => :text, "verify_mode" => :verify,
      "verification_flags" => :flags, "ssl_cipher_filter" => :text, "ssl_ciphersuites" => :text,
      "reuse" => :reuse, "no_tlsv1" => :boolean, "no_tlsv1_1" => :boolean,
      "low_latency" => :boolean, "backlog" => :positive, "http2" => :boolean,
      "extended_connect" => :boolean
    }.freeze

    VERIFY_MODES = { "none" => 0, "peer" => 1, "force_peer" => 2 }.freeze

    # Puma's names for OpenSSL's X509_V_FLAG_* values (MiniSSL::VERIFICATION_FLAGS).
    VERIFICATION_FLAGS = {
      "USE_CHECK_TIME" => 0x2, "CRL_CHECK" => 0x4, "CRL_CHECK_ALL" => 0x8, "IGNORE_CRITICAL" => 0x10,
      "X509_STRICT" => 0x20, "ALLOW_PROXY_CERTS" => 0x40, "POLICY_CHECK" => 0x80, "EXPLICIT_POLICY" => 0x100,
      "INHIBIT_ANY" => 0x200, "INHIBIT_MAP" => 0x400, "NOTIFY_POLICY" => 0x800, "EXTENDED_CRL_SUPPORT" => 0x1000,
      "USE_DELTAS" => 0x2000, "CHECK_SS_SIGNATURE" => 0x4000, "TRUSTED_FIRST" => 0x8000,
      "PARTIAL_CHAIN" => 0x80000, "NO_ALT_CHAINS" => 0x100000, "NO_CHECK_TIME" => 0x200000
    }.freeze

    # A cert or key given as PEM text to ssl_bind is kept out of the URL (which is logged and
    # handed to a re-executed master in its environment): the URL says store:N, the Nth of the
    # ssl_pems setting, as Puma's DSL does with its options[:store].
    STORE = /\Astore:(\d+)\z/

    # More certificates on one listener, chosen by the client's SNI name (Puma has none):
    # ssl_bind's sni: { "api.example.com" => { cert:, key: }, "*.example.org" => { cert_pem:,
    # key_pem: } }, in the URL sni[api.example.com][cert]=FILE&sni[api.example.com][key]=FILE.
    SNI_OPTION = /\Asni\[([^\[\]]+)\]\[(cert|key)\]\z/
    SNI_HOST = /\A(?:\*\.)?[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*\z/i

    module_function

    # The ssl:// URL ssl_bind makes (Puma 8's DSL.ssl_bind_str, the same query for the same
    # options): paths and the password command escaped as Puma escapes them.
    # @param host [String] @param port [Integer, String] @param opts [Hash] ssl_bind's options
    def bind_url(host, port, opts)
      verify = opts.fetch(:verify_mode, "none").to_s
      query = []
      query << "cert=#{escape(opts[:cert])}" if opts[:cert]
      query << "key=#{escape(opts[:key])}" if opts[:key]
      query << "key_password_command=#{escape(opts[:key_password_command])}" if opts[:key_password_command]
      # Escaped, unlike Puma's: a "+" in a cipher string would be read back as a space.
      query << "ssl_cipher_filter=#{escape(opts[:ssl_cipher_filter])}" if opts[:ssl_cipher_filter]
      query << "ssl_ciphersuites=#{escape(opts[:ssl_ciphersuites])}" if opts[:ssl_ciphersuites]
      reuse = reuse_query(opts[:reuse])
      query << "reuse=#{reuse}" if reuse
      query << "verify_mode=#{verify}"
      if opts[:no_tlsv1_1] then query << "no_tlsv1_1=true"
      elsif opts[:no_tlsv1] then query << "no_tlsv1=true"
      end
      query << "ca=#{escape(opts[:ca])}" if %w[peer force_peer].include?(verify)
      query << "verification_flags=#{Array(opts[:verification_flags]).join(',')}" if opts[:verification_flags]
      query << "backlog=#{Integer(opts[:backlog])}" if opts[:backlog]
      query << "low_latency=#{opts[:low_latency]}" if opts.key?(:low_latency)
      query << "http2=true" if opts[:http2] # Margay's own: ALPN h2 (Puma has no HTTP/2)
      query << "extended_connect=true" if opts[:extended_connect] # Margay's own: RFC 8441 on h2
      sni_query(opts[:sni]).each { |pair| query << pair }
      "ssl://#{host}:#{port}?#{query.join('&')}"
    end

    def escape(text) = URI.encode_www_form_component(text.to_s)

    # sni: { host => { cert:, key: } } as query pairs (cert_pem/key_pem were made store:N by
    # ssl_bind). A bad shape raises ConfigError here, where the config names it.
    def sni_query(sni)
      return [] if sni.nil?
      raise ConfigError, "ssl_bind sni: must be a Hash of host name => { cert:, key: }, got #{sni.class}" unless sni.is_a?(Hash)

      sni.flat_map do |host, files|
        raise ConfigError, "ssl_bind sni: #{host.inspect} => must be a Hash with cert: and key:" unless files.is_a?(Hash)

        files = files.transform_keys(&:to_sym)
        %i[cert key].map { |name| "sni[#{escape(host)}][#{name}]=#{escape(files[name])}" }
      end
    end

    # reuse: true (OpenSSL's cache size and timeout), or {size:, timeout:} as Puma reads it.
    def reuse_query(reuse)
      return "dflt" if reuse == true
      return nil unless reuse.is_a?(Hash)

      value = +""
      value << reuse[:size].to_s if reuse[:size].is_a?(Integer)
      value << ",#{reuse[:timeout]}" if reuse[:timeout].is_a?(Integer)
      value.empty? ? nil : value
    end

    # The query of an ssl:// URL as Puma reads it (Puma::Util.parse_query): pairs split at "&"
    # and ";", names and values URL-decoded. Strict: an unknown or repeated option, or a bad
    # value, raises ConfigError with one line.
    # @return [Hash{Symbol => Object}]
    def parse_query(url, query)
      (query || "").split(/[&;] */).each_with_object({}) do |pair, options|
        next if pair.empty?

        name, value = pair.split("=", 2).map { |part| URI.decode_www_form_component(part) }
        next add_sni(url, options, name, value) if name.match?(SNI_OPTION)

        kind = OPTIONS[name]
        raise ConfigError, "invalid bind #{url.inspect}: unknown TLS option #{name.inspect} (known: #{OPTIONS.keys.join(', ')})" unless kind
        raise ConfigError, "invalid bind #{url.inspect}: option #{name} given twice" if options.key?(name.to_sym)

        options[name.to_sym] = value_of(url, name, value, kind)
      end.tap { |options| check(url, options) }
    end

    def add_sni(url, options, name, value)
      host, part = name.match(SNI_OPTION).captures
      raise ConfigError, "invalid bind #{url.inspect}: #{host.inspect} is not a host name for sni" unless host.match?(SNI_HOST)

      entry = ((options[:sni] ||= {})[host.downcase] ||= {})
      raise ConfigError, "invalid bind #{url.inspect}: option #{name} given twice" if entry.key?(part.to_sym)

      entry[part.to_sym] = value_of(url, name, value, :text)
    end

    def value_of(url, name, value, kind)
      case kind
      when :text then return value if value && !value.empty?
      when :boolean then return value == "true" if %w[true false].include?(value)
      when :positive then return Integer(value, 10) if value&.match?(/\A\d{1,9}\z/) && Integer(value, 10).positive?
      when :verify then return value if VERIFY_MODES.key?(value)
      when :flags
        names = value.to_s.split(",")
        unknown = names - VERIFICATION_FLAGS.keys
        return names.sum { |flag| VERIFICATION_FLAGS.fetch(flag) } if unknown.empty? && !names.empty?

        raise ConfigError, "invalid bind #{url.inspect}: unknown verification flag #{unknown.first.inspect}"
      when :reuse then return value if value&.match?(/\A(?:off|dflt|\d+|\d+,\d+|,\d+)\z/)
      end
      raise ConfigError, "invalid bind #{url.inspect}: bad value #{value.inspect} for #{name}"
    end

    def check(url, options)
      (options[:sni] || {}).each do |host, entry|
        next if entry[:cert] && entry[:key]

        raise ConfigError, "invalid bind #{url.inspect}: sni[#{host}] needs both cert and key"
      end
      unless (options[:cert] || options[:cert_pem]) && (options[:key] || options[:key_pem])
        return if options.values_at(:cert, :key, :cert_pem, :key_pem).none? && localhost_authority?

        raise ConfigError, "invalid bind #{url.inspect}: cert and key are needed (or, for development, the " \
                           "localhost gem loaded by the config file: require \"localhost\")"
      end
      return unless %w[peer force_peer].include?(options[:verify_mode]) && !options[:ca]

      raise ConfigError, "invalid bind #{url.inspect}: verify_mode=#{options[:verify_mode]} needs ca=FILE"
    end
    # As Puma: an ssl:// bind without cert and key uses the localhost gem's self-signed
    # certificate for "localhost" (made in its state directory the first time) when the gem is
    # loaded (`require "localhost"` in the config file; Margay does not load it). Not on JRuby.
    def localhost_authority? = defined?(::Localhost::Authority) && RUBY_ENGINE != "jruby" ? true : false

    # [certificate file, key file] of the localhost gem's authority for "localhost".
    def localhost_files
      authority = ::Localhost::Authority.fetch
      [authority.certificate_path, authority.key_path]
    end
    private_class_method :add_sni, :value_of, :check, :localhost_files

    # The listener's context from its parsed options (+pems+: the ssl_pems setting, for store:N).
    # Files are read and the key password command run now; any failure is a ConfigError.
    # @return [Native::TLSContext]
    def context(url, options, pems)
      require_relative "../native" # here, not at load: the CLI says once what to do when it is not built
      raise ConfigError, "bind #{url}: Margay was built without OpenSSL (install libssl-dev and reinstall margay)" unless Native::TLS

      require "openssl" if options[:verify_mode].to_s.end_with?("peer") # puma.peercert is an OpenSSL::X509::Certificate
      Native::TLSContext.new(context_options(url, options, pems))
    rescue ArgumentError => e
      raise ConfigError, "bind #{url}: #{e.message}"
    end

    # Read the certificates and keys of each TLS listener again (the same files; PEM text and
    # the key password as they were): new handshakes use them, open connections keep theirs.
    # One that cannot be used is logged with one line and the listener keeps its certificates.
    # @param listeners [Array<Binder::Listener>] @param who [String] the log line's prefix
    # @return [Integer] how many listeners took new certificates
    def reload(listeners, log, who = "")
      listeners.count do |listener|
        next false unless listener.tls

        listener.tls.reload
        log.info("#{who}TLS certificates of #{listener.url} reloaded")
        true
      rescue ArgumentError, SystemCallError => e
        log.error("#{who}TLS certificates of #{listener.url} not reloaded (the old ones stay in use): #{e.message}")
        false
      end
    end

    def context_options(url, options, pems)
      cert = pem_or_file(url, options, :cert, pems)
      key = pem_or_file(url, options, :key, pems)
      if cert.values.none? && key.values.none? # check let it through: the localhost gem's
        cert[:file], key[:file] = localhost_files
      end
      size, timeout = reuse_cache(options[:reuse])
      {
        "cert" => cert[:file], "cert_pem" => cert[:pem], "key" => key[:file], "key_pem" => key[:pem],
        "sni" => sni_identities(url, options[:sni], pems),
        "key_password" => (password(url, options[:key_password_command]) if options[:key_password_command]),
        "ca" => options[:ca], "verify" => VERIFY_MODES.fetch(options[:verify_mode] || "none"),
        "verification_flags" => options[:verification_flags], "ssl_cipher_filter" => options[:ssl_cipher_filter],
        "ssl_ciphersuites" => options[:ssl_ciphersuites], "cache_size" => size, "cache_timeout" => timeout,
        "http2" => options[:http2] == true
      }
    end

    # [[host, cert, key, cert_pem, key_pem], ...] for Native::TLSContext, or nil.
    def sni_identities(url, sni, pems)
      sni&.map do |host, entry|
        cert = pem_or_file(url, entry, :cert, pems)
        key = pem_or_file(url, entry, :key, pems)
        [host, cert[:file], key[:file], cert[:pem], key[:pem]]
      end
    end

    def pem_or_file(url, options, name, pems)
      pem = options[:"#{name}_pem"]
      value = options[name]
      if (m = value&.match(STORE))
        pem = pems[Integer(m[1], 10)] or raise ConfigError, "bind #{url}: #{name}=#{value} names no PEM given to ssl_bind"
        value = nil
      end
      { file: value, pem: pem }
    end

    # [size, timeout] of the server's session cache: size -1 is off (Puma's default), 0 and
    # timeout 0 leave OpenSSL's own (20,480 sessions, 300 s).
    def reuse_cache(reuse)
      return [-1, 0] if reuse.nil? || reuse == "off"
      return [0, 0] if reuse == "dflt"

      size, timeout = reuse.split(",", 2)
      [size.to_s.empty? ? 0 : Integer(size, 10), timeout.to_s.empty? ? 0 : Integer(timeout, 10)]
    end

    # The key's password: the command's output, its last newline dropped (as Puma runs it).
    def password(url, command)
      require "open3"
      out, err, status = Open3.capture3(command)
      return out.chomp if status.success?

      raise ConfigError, "bind #{url}: key_password_command failed (#{status.exitstatus}): #{err.strip}"
    rescue SystemCallError => e
      raise ConfigError, "bind #{url}: key_password_command: #{e.message}"
    end
    private_class_method :context_options, :sni_identities, :pem_or_file, :reuse_cache, :password
  end
end
