# frozen_string_literal: true

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
                    force_shutdown_after restart_command worker_culling_strategy].freeze

      # Puma name => [Margay setting, conversion]
      MAPPED = {
        persistent_timeout: [:keepalive_timeout, :itself.to_proc],
        first_data_timeout: [:header_timeout, :itself.to_proc],
        worker_shutdown_timeout: [:shutdown_timeout, :itself.to_proc],
        http_content_length_limit: [:max_body_size, :itself.to_proc],
        max_keep_alive: [:max_keepalive_requests, :itself.to_proc]
      }.freeze

      # Puma settings Margay has no use for: why each is ignored.
      IGNORED = {
        plugin: "Puma plugins do not load into Margay",
        state_path: "Margay has no pumactl state file",
        activate_control_app: "Margay has no control app (use signals, docs/SIGNALS.md)",
        stdout_redirect: "redirect the process's stdout/stderr instead",
        lowlevel_error_handler: "errors are answered by Margay (500, or a closed connection)",
        worker_check_interval: "the master checks workers continuously",
        max_fast_inline: "Margay never queues a ready request behind another connection",
        queue_requests: "request buffering always happens in the native engine",
        wait_for_less_busy_worker: "only workers with a free thread accept connections",
        nakayoshi_fork: "the mold runs a full GC before it forks",
        prune_bundler: "not needed by Margay's hot restart",
        extra_runtime_dependencies: "not needed by Margay's hot restart",
        silence_single_worker_warning: "Margay prints no such warning",
        silence_fork_callback_warning: "Margay prints no such warning",
        tag: "the process title is margay: worker N",
        directory: "start Margay in the app's directory",
        debug: "use --log-requests and the server log",
        early_hints: "rack.early_hints is always available",
        supported_http_methods: "Margay passes every token method to the app",
        raise_exception_on_sigterm: "TERM is always a graceful stop",
        shutdown_debug: "stuck requests are logged by request_timeout",
        fiber_scheduler: "Margay runs apps on threads",
        enable_keep_alives: "keep-alive never holds a Margay thread",
        log_formatter: "Margay's log format is fixed",
        custom_logger: "Margay's log goes to stdout/stderr",
      }.freeze

      MAPPED.each do |puma_name, (setting, convert)|
        define_method(puma_name) { |value| @settings[setting] = convert.call(numeric(value)) }
      end

      IGNORED.each do |puma_name, why|
        define_method(puma_name) do |*_args, **_opts, &_block|
          warn_here("'#{puma_name}' is a Puma setting Margay does not have (#{why}); ignored")
        end
      end

      # Puma's TLS listener. Margay does not speak TLS yet, and serving plain
      # HTTP where TLS was asked for is never right: the start is refused.
      def ssl_bind(*_args, **_opts)
        raise_here "ssl_bind: Margay does not speak TLS yet, and will not serve plain HTTP where TLS was " \
                   "asked for; terminate TLS in a proxy in front of Margay and bind plain tcp:// instead"
      end

      # Puma's fork_worker: re-fork workers from worker 0 after N requests.
      def fork_worker(after_requests = 1000)
        @settings[:refork_after] = Integer(after_requests.to_s, 10)
      end

      # Puma 6's name for the rackup file.
      def rackup_file(path)
        rackup(path)
      end

      private

      def warn_here(message)
        line = caller_locations.find { |l| l.path == @path }&.lineno
        Kernel.warn("margay: #{@path}#{":#{line}" if line}: #{message}")
      end
    end
  end
end
