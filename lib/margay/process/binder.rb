# frozen_string_literal: true

require "socket"
require_relative "../errors"
require_relative "systemd"
require_relative "tls"

module Margay
  # Internal: opens the listening sockets named by the bind URLs, or takes them
  # over from a previous master (hot restart). Listeners live in Ruby, so a
  # master can hand them to workers or to a re-executed binary; the native
  # engine only receives their descriptors.
  class Binder
    # "bind-url=fd,bind-url=fd": listeners a re-executed master inherits.
    INHERIT_ENV = "MARGAY_INHERIT_FDS"
    # JRuby runs the pure-Ruby engine (lib/margay/pure/), which has no HTTP/2.
    NO_C_ENGINE = RUBY_ENGINE == "jruby"
    # "bind-url=fd,...": the health listeners (health_bind, agent_bind) a re-executed process inherits.
    INHERIT_HEALTH_ENV = "MARGAY_INHERIT_HEALTH_FDS"
    # "fd:k,fd:n": client connections a re-executed cluster master inherits
    # (held for its workers during the hot restart; Cluster::Balancer::Forwarder).
    INHERIT_CONNECTIONS_ENV = "MARGAY_INHERIT_CONNECTIONS"

    # bind: the URL as configured; url: as bound (port 0 resolved).
    # activated: handed over by systemd (never unlinked or re-bound by us).
    # tls: the Native::TLSContext of an ssl:// bind (made here, before any fork), else nil.
    # http2: the bind's http2=true (HTTP/2 by ALPN on ssl://, h2c with prior knowledge on tcp://);
    # extended_connect: its extended_connect=true (RFC 8441's CONNECT with :protocol on HTTP/2).
    Listener = Struct.new(:io, :bind, :url, :unix, :server_name, :server_port, :activated, :tls, :http2,
                          :extended_connect, keyword_init: true)

    # A parsed bind URL. options: Puma's query options, typed (:backlog,
    # :low_latency, :reuse_port for tcp; :backlog, :umask, :mode for unix).
    URL = Struct.new(:scheme, :host, :port, :path, :options, keyword_init: true)

    # Query options each scheme takes, and how each value is read.
    OPTIONS = {
      tcp: { "backlog" => :positive, "low_latency" => :boolean, "reuse_port" => :boolean, "http2" => :boolean,
             "extended_connect" => :boolean },
      unix: { "backlog" => :positive, "umask" => :octal, "mode" => :octal }
    }.freeze

    # Parse "tcp://HOST:PORT[?opts]", "ssl://HOST:PORT?opts" (TLS: Puma's ssl_bind options,
    # Margay::TLS) or "unix://PATH[?opts]" (Puma's forms and query options). Strict: an unknown option, a repeated one, a bad value or
    # a port outside 0..65535 raises ConfigError with one line.
    # @return [URL]
    def self.parse(url)
      text = url.to_s
      base, query = text.split("?", 2)
      if (m = base.match(%r{\A(?<scheme>tcp|ssl)://(?:\[(?<v6>[0-9a-fA-F:.]+)\]|(?<host>[^\s/:\[\]?]+)):(?<port>\d{1,5})\z}))
        port = Integer(m[:port], 10)
        # Five digits are not a port: 99999 would bind whatever the kernel makes of it.
        raise ConfigError, "invalid bind #{text.inspect}: port #{m[:port]} is not in 0..65535" if port > 65_535

        scheme = m[:scheme].to_sym
        options = scheme == :ssl ? TLS.parse_query(text, query) : parse_query(text, query, OPTIONS[:tcp])
        URL.new(scheme: scheme, host: m[:v6] || m[:host], port: port, options: options)
      elsif (m = base.match(%r{\Aunix:(?://(?<path>\S+)|(?<path>/\S*))\z}))
        # unix:/abs/path (one slash, what File.join("unix://", dir) makes) is
        # taken as Puma takes it, and so is %20 for a space in the path.
        URL.new(scheme: :unix, path: m[:path].gsub("%20", " "), options: parse_query(text, query, OPTIONS[:unix]))
      else
        raise ConfigError, "invalid bind #{text.inspect}: expected tcp://HOST:PORT, ssl://HOST:PORT?cert=...&key=... " \
                           "or unix://PATH (with ?options)"
      end
    end

    def self.parse_query(url, query, known)
      return {} if query.nil?

      query.split("&").each_with_object({}) do |pair, options|
        name, value = pair.split("=", 2)
        kind = known[name]
        unless kind
          raise ConfigError, "invalid bind #{url.inspect}: unknown option #{name.inspect} (known: #{known.keys.join(', ')})"
        end
        raise ConfigError, "invalid bind #{url.inspect}: option #{name} given twice" if options.key?(name.to_sym)

        options[name.to_sym] = option_value(url, name, value, kind)
      end
    end

    def self.option_value(url, name, value, kind)
      case kind
      when :positive
        return Integer(value, 10) if value&.match?(/\A\d{1,9}\z/) && Integer(value, 10).positive?
      when :boolean
        return value == "true" if %w[true false].include?(value)
      when :octal
        return Integer(value, 8) if value&.match?(/\A0?[0-7]{3}\z/)
      end
      what = { positive: "a positive integer", boolean: "true or false", octal: "an octal mode such as 0111" }.fetch(kind)
      raise ConfigError, "invalid bind #{url.inspect}: #{name} must be #{what}, got #{value.inspect}"
    end
    private_class_method :parse_query, :option_value

    # @param binds [Array<String>] tcp://HOST:PORT or unix://PATH, with Puma's ?options
    # @param backlog [Integer] listen(2) backlog
    # @param inherited [String, nil] the INHERIT_ENV value, if any
    # @param pems [Array<String>] PEM text ssl_bind was given (ssl:// binds name them store:N)
    def initialize(binds, backlog:, inherited: nil, pems: [])
      @binds = binds
      @backlog = backlog
      @inherited = parse_inherited(inherited)
      @pems = pems
    end

    # Set across a hot restart when the listeners came from socket activation.
    ACTIVATED_ENV = "MARGAY_SOCKET_ACTIVATED"

    # The listeners for this process: systemd's (socket activation), or those
    # a hot restart handed over, or newly bound ones for +binds+.
    def self.open(binds, backlog:, env: ENV, pems: [])
      sockets = Systemd.activated_sockets(env: env)
      inherited = env.delete(INHERIT_ENV)
      if !sockets.empty? || env.delete(ACTIVATED_ENV)
        refuse_tls_activation(binds)
        sockets = parse_inherited(inherited).values.map { |fd| Socket.for_fd(fd).tap { |io| io.close_on_exec = true } } if sockets.empty?
        return activated(sockets)
      end
      new(binds, backlog: backlog, inherited: inherited, pems: pems).bind
    end

    # Activated sockets are served as systemd gives them, whatever the binds say: plain HTTP
    # where TLS was configured is never right.
    def self.refuse_tls_activation(binds)
      tls = binds.find { |url| url.to_s.start_with?("ssl://") } or return

      raise ConfigError, "bind #{tls.split('?', 2).first}: TLS is not served on systemd-activated sockets; " \
                         "bind it without socket activation"
    end

    # {bind-url => fd} from an INHERIT_ENV value ({} for nil or ""). Pairs are split at a comma
    # that starts the next URL: an ssl:// bind's query may hold commas of its own
    # (verification_flags=A,B, reuse=100,60).
    def self.parse_inherited(value)
      return {} if value.nil? || value.empty?

      value.split(/,(?=(?:tcp|ssl|unix):)/).to_h do |pair|
        url, fd = pair.split(/=(?=\d+\z)/)
        [url, Integer(fd, 10)]
      end
    end

    # Listeners for sockets handed over by systemd socket activation: one per
    # socket, whatever the configured binds say (systemd owns the addresses).
    def self.activated(sockets)
      sockets.map do |io|
        addr = io.local_address
        if addr.unix?
          Listener.new(io: io, bind: "unix://#{addr.unix_path}", url: "unix://#{addr.unix_path}", unix: true,
                       server_name: "localhost", server_port: "0", activated: true)
        else
          host = addr.ip_address
          shown = addr.ipv6? ? "[#{host}]" : host
          url = "tcp://#{shown}:#{addr.ip_port}"
          name = %w[0.0.0.0 ::].include?(host) ? "localhost" : host
          Listener.new(io: io, bind: url, url: url, unix: false, server_name: name, server_port: addr.ip_port.to_s,
                       activated: true)
        end
      end
    end

    # @return [Array<Listener>] one per bind, ports resolved
    # Inherited sockets (a hot restart) are taken over again, close-on-exec like
    # new ones, so a program the app runs does not keep the port open; those
    # whose bind is gone from the configuration are closed.
    def bind
      listeners = expand(@binds).map do |url, parsed|
        fd = @inherited[url]
        io = if fd
               (parsed.scheme == :unix ? UNIXServer.for_fd(fd) : TCPServer.for_fd(fd)).tap { |s| s.close_on_exec = true }
             end
        listener = parsed.scheme == :unix ? bind_unix(url, parsed, io) : bind_tcp(url, parsed, io)
        listener.tls = TLS.context(listener.url, parsed.options, @pems) if parsed.scheme == :ssl
        listener.http2 = http2?(listener.url, parsed.options)
        listener.extended_connect = extended_connect?(listener.url, parsed.options)
        listener
      end
      (@inherited.keys - listeners.map(&:bind)).each { |url| close_fd(@inherited[url]) }
      listeners
    rescue SystemCallError, SocketError => e
      raise ConfigError, "cannot bind: #{e.message}"
    end

    # The bind's http2=true, refused with one line when the extension was built without libnghttp2.
    def self.http2?(url, options)
      return false unless options[:http2]

      require_relative "../native"
      unless defined?(Native::H2) && Native::H2
        raise ConfigError, "bind #{url}: http2=true, not on #{RUBY_ENGINE} yet (its pure-Ruby engine has no HTTP/2)" if NO_C_ENGINE
        raise ConfigError, "bind #{url}: http2=true, but Margay was built without libnghttp2 " \
                           "(install libnghttp2-dev and reinstall margay)"
      end
      true
    end

    # The bind's extended_connect=true: only beside http2=true (it is an HTTP/2 setting).
    def self.extended_connect?(url, options)
      return false unless options[:extended_connect]
      raise ConfigError, "bind #{url}: extended_connect=true needs http2=true" unless options[:http2]

      true
    end

    private

    def http2?(url, options) = self.class.http2?(url, options)
    def extended_connect?(url, options) = self.class.extended_connect?(url, options)

    def parse_inherited(value)
      self.class.parse_inherited(value)
    end

    # [[url, URL]]: a "localhost" host becomes one bind per loopback address
    # (127.0.0.1 and ::1, as Puma binds it), each its own listener.
    def expand(binds)
      binds.flat_map do |url|
        parsed = self.class.parse(url)
        next [[url, parsed]] unless parsed.scheme != :unix && parsed.host == "localhost"

        loopback_addresses.map do |address|
          host = address.include?(":") ? "[#{address}]" : address
          [url.sub("//localhost:", "//#{host}:"), parsed.dup.tap { |p| p.host = address }]
        end
      end
    end

    def loopback_addresses
      found = Socket.ip_address_list.select { |a| a.ipv4_loopback? || a.ipv6_loopback? }.map(&:ip_address).uniq
      found.empty? ? ["127.0.0.1"] : found.sort_by { |a| a.include?(":") ? 1 : 0 }
    end

    def bind_tcp(url, parsed, io)
      host = parsed.host
      unless io
        # Port 0 on "localhost": ::1 listens on the port 127.0.0.1 was given.
        port = parsed.port.zero? && @localhost_port && url.include?("[::1]") ? @localhost_port : parsed.port
        io = listen_tcp(host, port, parsed.options)
        @localhost_port = io.local_address.ip_port if host == "127.0.0.1"
      end
      actual = io.local_address.ip_port
      host = io.local_address.ip_address if host == "::" && io.local_address.ipv4? # the fallback above
      shown = host.include?(":") ? "[#{host}]" : host
      name = %w[0.0.0.0 ::].include?(host) ? "localhost" : host
      Listener.new(io: io, bind: url, url: "#{parsed.scheme}://#{shown}:#{actual}", unix: false,
                   server_name: name, server_port: actual.to_s)
    end

    # A listening TCPServer with the bind's options: SO_REUSEPORT before
    # bind(2) (reuse_port=true), "::" dual stack (IPV6_V6ONLY off, whatever
    # the sysctl says). low_latency: accepted sockets always get TCP_NODELAY
    # from the engine, so only low_latency=false is worth a word.
    def listen_tcp(host, port, options)
      if options[:low_latency] == false
        Kernel.warn("margay: bind #{host}:#{port}: low_latency=false ignored (Margay sets TCP_NODELAY on every " \
                    "connection and writes each response in as few writes as it can)")
      end
      addresses = Addrinfo.getaddrinfo(host, port, nil, :STREAM, nil, Socket::AI_PASSIVE)
      error = nil
      addresses.each do |addr|
        return listen_on(addr, options)
      rescue SystemCallError => e
        error = e
      end
      # "::" where IPv6 turns out to be off (the default host is chosen from the
      # interfaces): listen on 0.0.0.0, as Puma rewrites the bind.
      return listen_tcp("0.0.0.0", port, options) if host == "::" && error.is_a?(Errno::EAFNOSUPPORT)

      raise error || SocketError.new("no address for #{host}")
    end

    def listen_on(addr, options)
      # JRuby listens only through TCPServer (its Socket#listen is not a server): no reuse_port, backlog 50.
      return TCPServer.new(addr.ip_address, addr.ip_port) if RUBY_ENGINE == "jruby"

      socket = Socket.new(addr.afamily, Socket::SOCK_STREAM, 0)
      socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_REUSEADDR, true)
      socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_REUSEPORT, true) if options[:reuse_port]
      socket.setsockopt(Socket::IPPROTO_IPV6, Socket::IPV6_V6ONLY, false) if addr.ipv6? && addr.ipv6_unspecified?
      socket.bind(addr)
      socket.listen(options[:backlog] || @backlog)
      TCPServer.for_fd(socket.fileno).tap do |server|
        socket.autoclose = false # the TCPServer owns the descriptor now
        server.close_on_exec = true
      end
    rescue SystemCallError
      socket&.close
      raise
    end

    # umask: applied while the socket file is created (Puma's ?umask=0111;
    # 0 when not given, as in Puma: mode 0777, so a proxy running as another
    # user can connect); mode: chmod after (?mode=0666).
    def bind_unix(url, parsed, io)
      path = parsed.path
      options = parsed.options
      unless io
        File.unlink(path) if File.socket?(path) && !socket_in_use?(path)
        old_umask = File.umask(options[:umask] || 0) # as Puma: a socket anyone may connect to unless told otherwise
        begin
          io = UNIXServer.new(path)
        ensure
          File.umask(old_umask)
        end
        io.listen(options[:backlog] || @backlog)
        File.chmod(options[:mode], path) if options[:mode]
      end
      Listener.new(io: io, bind: url, url: url.split("?", 2).first, unix: true, server_name: "localhost", server_port: "0")
    end

    def close_fd(fd)
      IO.for_fd(fd).close
    rescue SystemCallError, ArgumentError
      nil
    end

    def socket_in_use?(path)
      UNIXSocket.new(path).close
      true
    rescue SystemCallError, IOError # JRuby refuses with an IOError
      false
    end
  end
end
