# frozen_string_literal: true

require_relative "../process/tls"

module Margay
  class Configuration
    # Directives that let an existing config/puma.rb run unchanged under
    # `margay -C config/puma.rb` (mixed into DSL::Evaluator). Puma settings
    # with a Margay equivalent are mapped to it; the others are ignored with
    # one warning each (never a failure). The mapping is documented in
    # docs/CONFIGURATION.md.
    module PumaCompat
      # Settings that exist for Puma's directives (which set them, under
      # Puma's names) and never become plain directives of their own.
      SETTINGS = %i[control_url control_token state_path plugins redirect_stdout redirect_stderr
                    redirect_append tag directory lowlevel_error_handler log_formatter custom_logger
                    remote_address remote_address_header proxy_protocol idle_timeout
                    force_shutdown_after restart_command worker_culling_strategy
                    fiber_scheduler max_io_threads prune_bundler].freeze

      # Puma name => [Margay setting, conversion]
      MAPPED = {
        persistent_timeout: [:keepalive_timeout, :itself.to_proc],
        first_data_timeout: [:header_timeout, :itself.to_proc],
        worker_shutdown_timeout: [:shutdown_timeout, :itself.to_proc],
        http_content_length_limit: [:max_body_size, :itself.to_proc],
        max_keep_alive: [:max_keepalive_requests, :itself.to_proc]
      }.freeze

      # Puma directives Margay has no use for, and why: each is accepted with
      # one warning line naming the file and line (never a failure).
      IGNORED = {
        worker_check_interval: "the master checks workers continuously",
        max_fast_inline: "Margay never queues a ready request behind another connection",
        queue_requests: "request buffering always happens in the native engine",
        wait_for_less_busy_worker: "only workers with a free thread accept connections",
        nakayoshi_fork: "the mold and a preloading master run full GCs before they fork",
        extra_runtime_dependencies: "a pruned master loads only Margay and its own gems",
        debug: "use --log-requests and the server log",
        raise_exception_on_sigterm: "TERM is always a graceful stop",
        shutdown_debug: "stuck requests are logged by request_timeout",
        fiber_per_request: "a fresh fiber per request comes with fiber mode (fiber_scheduler true), " \
                           "which also makes waits yield the thread",
        io_selector_backend: "Margay's event loop is native; see event_backend (:auto, :epoll, :poll)",
        clean_thread_locals: "not available: thread locals live as long as the pool thread",
        rack_url_scheme: "rack.url_scheme is http on tcp:// and unix:// binds and https on ssl:// binds " \
                         "(a proxy's X-Forwarded-Proto is for the app)",
        mutate_stdout_and_stderr_to_sync_on_write: "Margay writes each log line with one write call",
        state_permission: "the state file is created with the process umask",
        daemonize: "Margay does not daemonize: run it under a process manager (systemd, foreman, a container)",
        tcp_mode: "Margay speaks HTTP only", tcp_mode!: "Margay speaks HTTP only"
      }.freeze

      MAPPED.each do |puma_name, (setting, convert)|
        define_method(puma_name) { |value| set(setting, convert.call(numeric(value))) }
      end

      IGNORED.each do |puma_name, why|
        define_method(puma_name) do |*_args, **_opts, &_block|
          warn_here("'#{puma_name}' is a Puma setting Margay does not have (#{why}); ignored")
        end
      end

      # Puma's: a master that never loads the app (mold_boot, or preload_app false) runs
      # without Bundler; the worker loading the app sets the bundle up (BundlerPrune).
      def prune_bundler(answer = true)
        set(:prune_bundler, answer ? true : false)
      end

      # Fiber mode: every request in a Fiber under Margay's scheduler
      # (docs/CONFIGURATION.md "Fiber mode"). Not a Puma directive; it lives here with
      # Puma's max_io_threads, its neighbour.
      def fiber_scheduler(flag = true)
        set(:fiber_scheduler, flag ? true : false)
      end

      # Puma 8: up to +max+ threads beyond max_threads for requests that called
      # env["puma.mark_as_io_bound"] (thread mode; in fiber mode every wait yields anyway).
      def max_io_threads(max)
        set(:max_io_threads, integer(:max_io_threads, max))
      end

      # Puma's directives that silence one of its own warnings: Margay prints
      # no such warning, so there is nothing to do (and nothing to warn about).
      def silence_single_worker_warning(*) = nil

      # See silence_single_worker_warning.
      def silence_fork_callback_warning(*) = nil

      # Puma's TLS listener: the ssl:// bind Puma's DSL makes of +opts+ (cert, key, cert_pem,
      # key_pem, key_password_command, ca, verify_mode, ...; docs/CONFIGURATION.md "TLS"), and
      # Margay's sni: { host => { cert:, key: } } (or cert_pem:, key_pem:).
      # PEM text stays out of the URL: it goes to ssl_pems, and the URL says store:N.
      def ssl_bind(host, port, opts = {})
        raise_here "ssl_bind options must be a Hash, got #{opts.class}" unless opts.is_a?(Hash)

        opts = opts.transform_keys(&:to_sym)
        pems = (@settings[:ssl_pems] || []).dup
        store_pems(opts, pems)
        if opts[:sni].is_a?(Hash)
          opts[:sni] = opts[:sni].to_h { |host, files| [host.to_s, files.is_a?(Hash) ? store_pems(files.transform_keys(&:to_sym), pems) : files] }
        end
        set(:ssl_pems, pems.freeze)
        bind(TLS.bind_url(host, port, opts))
      end

      # cert_pem/key_pem of +opts+ moved to +pems+, the option saying store:N. Returns +opts+.
      def store_pems(opts, pems)
        %i[cert key].each do |name|
          pem = opts.delete(:"#{name}_pem") or next
          opts[name] = "store:#{pems.size}"
          pems << pem.to_s
        end
        opts
      end
      private :store_pems

      # Puma's fork_worker: workers are re-forked from a warm one (the mold)
      # after +after_requests+ requests; 0: only on demand (SIGURG).
      def fork_worker(after_requests = 1000)
        count = Integer(after_requests.to_s, 10)
        raise_here "fork_worker must be a number of requests >= 0, got #{after_requests.inspect}" if count.negative?

        set(:refork_after, count.zero? ? nil : count)
      rescue ArgumentError
        raise_here "fork_worker must be a number of requests >= 0, got #{after_requests.inspect}"
      end

      # Puma 6's name for the rackup file.
      def rackup_file(path)
        rackup(path)
      end

      # Serve this Rack app (an object with #call, or the block) instead of the rackup file.
      def app(obj = nil, &block)
        obj ||= block
        raise_here "app needs a Rack app (an object with #call) or a block" unless obj.respond_to?(:call)

        set(:app, obj)
      end

      # Puma's control app on +url+ ("auto": a unix socket in the tmpdir).
      # auth_token: the token; no_token: true for none; else a random one.
      def activate_control_app(url = "auto", opts = {})
        opts = opts.transform_keys(&:to_sym)
        unknown = opts.keys - %i[auth_token no_token umask]
        raise_here "activate_control_app: unknown option(s) #{unknown.join(', ')}" unless unknown.empty?

        set(:control_url, url.to_s == "auto" ? PumaCompat.auto_control_url : url.to_s)
        token = opts[:no_token] ? "none" : opts[:auth_token]&.to_s
        set(:control_token, token) if token
        warn_here("activate_control_app: umask is not supported (the control socket follows the process umask); ignored") if opts[:umask]
      end

      # A unix control socket of our own in the tmpdir (Puma's "auto"). Named
      # by pid only: a hot restart (exec, same pid) takes the same path over.
      def self.auto_control_url
        "unix://#{File.join(Dir.tmpdir, "margay-ctl-#{Process.pid}.sock")}"
      end

      # The YAML state file pumactl -S reads.
      def state_path(path)
        set(:state_path, path.to_s)
      end

      # Load a Puma plugin by name (`plugin :tmp_restart`). Repeatable.
      def plugin(name)
        set(:plugins, [*@settings[:plugins], name.to_s].uniq)
      end

      # Reopen stdout to +stdout+ and stderr to +stderr+ (append: keep what is there).
      def stdout_redirect(stdout = nil, stderr = nil, append = false)
        set(:redirect_stdout, stdout&.to_s)
        set(:redirect_stderr, stderr&.to_s)
        set(:redirect_append, append ? true : false)
      end

      # Extra text in the process title.
      def tag(text)
        set(:tag, text.to_s)
      end

      # chdir here before loading the app (and on a hot restart).
      def directory(dir)
        set(:directory, dir.to_s)
      end

      # Puma 4's name for directory.
      def worker_directory(dir)
        directory(dir)
      end

      # callable(error, env, status) => Rack response, for errors the app did not answer.
      def lowlevel_error_handler(obj = nil, &block)
        obj ||= block
        raise_here "lowlevel_error_handler needs an object with #call or a block" unless obj.respond_to?(:call)

        set(:lowlevel_error_handler, obj)
      end

      # The block receives every server log line and returns the line to write.
      def log_formatter(&block)
        raise_here "log_formatter needs a block" unless block

        set(:log_formatter, block)
      end

      # An object with #write (or #puts) that receives the server log.
      def custom_logger(logger)
        set(:custom_logger, logger)
      end

      # Stop after +seconds+ without a request.
      def idle_timeout(seconds)
        value = Integer(seconds.to_s, 10)
        raise ArgumentError unless value.positive?

        set(:idle_timeout, value)
      rescue ArgumentError
        raise_here "idle_timeout must be a positive number of seconds, got #{seconds.inspect}"
      end

      # How long a stop waits for requests before cutting them: seconds,
      # :immediately (0) or :forever (-1: requests are never cut).
      def force_shutdown_after(value = :forever)
        case value
        when :immediately then set(:force_shutdown_after, 0)
        when :forever then set(:force_shutdown_after, -1)
        else
          seconds = Float(value.to_s)
          raise ArgumentError if seconds.negative?

          set(:force_shutdown_after, seconds)
        end
      rescue ArgumentError
        raise_here "force_shutdown_after must be seconds >= 0, :immediately or :forever, got #{value.inspect}"
      end

      # The command a hot restart runs instead of the original one.
      def restart_command(command)
        set(:restart_command, command.to_s)
      end

      # Which workers a lower count stops first: :youngest or :oldest.
      def worker_culling_strategy(strategy)
        strategy = strategy.to_s.to_sym
        raise_here "worker_culling_strategy must be :youngest or :oldest, got #{strategy.inspect}" unless %i[youngest oldest].include?(strategy)

        set(:worker_culling_strategy, strategy)
      end

      # Margay always drains: a stop serves what was accepted and closes the listeners first.
      def drain_on_shutdown(which = true)
        return if which

        warn_here("drain_on_shutdown false: Margay always finishes the requests it accepted before stopping; ignored")
      end

      # rack.early_hints is always available; early_hints false is not.
      def early_hints(answer = true)
        return if answer

        warn_here("early_hints false: rack.early_hints is always available in Margay; ignored")
      end

      # Puma 7+: false turns keep-alive off (every response closes its connection).
      def enable_keep_alives(enabled = true)
        set(:max_keepalive_requests, 1) unless enabled
      end

      # Systemd socket activation: Margay always serves every socket systemd
      # passes (LISTEN_FDS) instead of the binds, so this only checks its value.
      def bind_to_activated_sockets(bind = true)
        return if [true, false, "only", :only].include?(bind)

        raise_here "bind_to_activated_sockets takes true, false or 'only', got #{bind.inspect}"
      end

      # Where REMOTE_ADDR comes from: :socket (the peer), :localhost
      # ("127.0.0.1"), a fixed String, header: "X-Forwarded-For" (the last
      # address of that header), or proxy_protocol: :v1 (a PROXY v1 line).
      def set_remote_address(value = :socket) # rubocop:disable Naming/AccessorMethodName
        case value
        when :socket, :localhost then set(:remote_address, value)
        when String
          raise_here "set_remote_address needs a non-empty address" if value.strip.empty?

          set(:remote_address, value)
        when Hash then remote_address_from(value.transform_keys(&:to_sym))
        else raise_here "set_remote_address takes :socket, :localhost, an address, header: NAME or proxy_protocol: :v1, got #{value.inspect}"
        end
      end

      private

      def remote_address_from(options)
        unless options.size == 1 && %i[header proxy_protocol].include?(options.keys.first)
          raise_here "set_remote_address takes one of header: NAME or proxy_protocol: :v1, got #{options.inspect}"
        end
        if options.key?(:header)
          name = options[:header].to_s
          raise_here "set_remote_address header: #{name.inspect} is not a header name" unless name.match?(/\A[A-Za-z0-9!#$%&'*+.^_`|~-]+\z/)

          set(:remote_address, :socket)
          set(:proxy_protocol, nil)
          set(:remote_address_header, name)
        else
          version = options[:proxy_protocol].to_s.downcase.to_sym
          raise_here "set_remote_address proxy_protocol: only :v1 is supported, got #{options[:proxy_protocol].inspect}" unless version == :v1

          set(:remote_address, :socket)
          set(:remote_address_header, nil)
          set(:proxy_protocol, :v1)
        end
      end
    end
  end
end
