# frozen_string_literal: true

require_relative "support/side_by_side"

# Real-world config/puma.rb files (test/fixtures/puma_configs/, each naming its
# source) under `bundle exec margay -C config/puma.rb`, from a temporary app
# whose bundle is bench/Gemfile (Rails gems and Puma in it, as in the apps the
# files come from). Each must start, serve 200 where the file says it listens
# (PORT, or its unix socket), fork the workers it asks for, and stop on TERM.
# Every warning line Margay printed is shown in the suite's log.
class PumaConfigsTest < Minitest::Test
  parallelize_me!
  include Margay::TestPorts

  FIXTURES = File.expand_path("../fixtures/puma_configs", __dir__)
  # PUMA_CONFIGS_SERVER=puma runs the same checks against Puma 8 (to vet a new fixture).
  SERVER = (ENV["PUMA_CONFIGS_SERVER"] || "margay").to_sym

  # The app: Active Record loaded (hooks in these files reconnect it in workers;
  # DATABASE_URL points it at an in-memory SQLite), a 200 on every path.
  APP = <<~'RUBY'
    require "active_record"
    $stdout.sync = true
    run ->(_env) { [200, { "content-type" => "text/plain" }, ["ok"]] }
  RUBY

  # Stand-ins for the app files some configs load (see each fixture's header).
  CAMPFIRE_ENVIRONMENT = <<~'RUBY'
    # Stand-in for Campfire's config/environment.rb: what its puma.rb uses from the app.
    require "concurrent-ruby"
    module Membership
      def self.disconnect_all = nil
    end
  RUBY
  GITLAB_LIFECYCLE = <<~'RUBY'
    # Stand-in for GitLab's lib/gitlab/cluster/lifecycle_events.rb.
    module Gitlab
      module Cluster
        module LifecycleEvents
          class << self
            attr_reader :options

            def set_puma_options(options) = (@options = options)
            def do_before_master_restart = nil
            def do_before_fork = nil
            def do_worker_start = nil
            def do_worker_stop = nil
          end
        end
      end
    end
  RUBY
  GITLAB_FORMATTER = <<~'RUBY'
    # Stand-in for GitLab's lib/gitlab/puma_logging/json_formatter.rb.
    require "json"
    module Gitlab
      module PumaLogging
        class JSONFormatter
          def call(str) = "#{JSON.generate(message: str)}\n"
        end
      end
    end
  RUBY

  POSTAL_CONFIG = <<~'RUBY'
    # Stand-in for Postal's lib/postal/config.rb: what its puma.rb uses from it.
    require "pathname"
    module Postal
      Config = Struct.new(:web_server, :rails)

      def self.config = Config.new(nil, nil)
      def self.log_root = Pathname.new(File.expand_path("../../log", __dir__))
    end
  RUBY

  # Per file: the threads (min, max) and workers (0: single mode) it implies (as
  # Puma 8 reports them for it), its environment (a lambda value is called with the
  # app's directory), where it listens (:port: on PORT; or a unix socket under the
  # app), files it needs, redirected logs.
  CASES = {
    "rails_6_1" => { threads: [5, 5], workers: 0 },
    "rails_7_0" => { threads: [5, 5], env: { "RAILS_ENV" => "production" }, workers: 0 },
    "rails_7_1" => { threads: [5, 5], env: { "RAILS_ENV" => "production", "WEB_CONCURRENCY" => "2" }, workers: 2 },
    "rails_7_2" => { threads: [3, 3], workers: 0 },
    "rails_8_0" => { threads: [3, 3], env: { "RAILS_ENV" => "production", "WEB_CONCURRENCY" => "0" }, workers: 0 },
    "chatwoot" => { threads: [5, 5], workers: 0 },
    "lobsters" => { threads: [5, 5], env: { "RAILS_ENV" => "production", "PUMA_WORKERS" => "1", "PIDFILE" => "tmp/pids/puma.pid" },
                    workers: 1 },
    "huginn" => { threads: [1, 1], env: { "RAILS_ENV" => "production", "PORT" => "" }, workers: 2,
                  unix: "tmp/sockets/puma.sock", logs: %w[log/stdout.log log/stderr.log] },
    "feedbin" => { threads: [5, 5], env: { "RAILS_ENV" => "production", "WEB_CONCURRENCY" => "2" }, workers: 2,
                   unix: "tmp/sockets/puma.sock" },
    "human_essentials" => { threads: [5, 5], env: { "BIND" => ->(app) { "unix://#{app}/tmp/sockets/web_server.sock" },
                                                    "PIDFILE" => "tmp/pids/web_server.pid" },
                            workers: 2, unix: "tmp/sockets/web_server.sock" },
    "fat_free_crm" => { threads: [2, 2], workers: 1 },
    "postal" => { threads: [5, 5], workers: 0, logs: %w[log/puma.log], files: { "lib/postal/config.rb" => POSTAL_CONFIG } },
    "once_campfire" => { threads: [5, 5], env: { "WEB_CONCURRENCY" => "2" }, workers: 2,
                         files: { "config/environment.rb" => CAMPFIRE_ENVIRONMENT } },
    "gitlab" => { threads: [1, 16], workers: 3, unix: "tmp/sockets/gitlab.socket", logs: %w[log/puma.stdout.log log/puma.stderr.log],
                  files: { "lib/gitlab/cluster/lifecycle_events.rb" => GITLAB_LIFECYCLE,
                           "lib/gitlab/puma_logging/json_formatter.rb" => GITLAB_FORMATTER } },
    "rubygems_org" => { threads: [1, 1], env: { "RAILS_ENV" => "production", "WEB_CONCURRENCY" => "2" }, workers: 2 },
    "codetriage" => { threads: [5, 5], env: { "WEB_CONCURRENCY" => "2" }, workers: 2 },
    "identity_idp" => { threads: [1, 1], env: { "RAILS_ENV" => "production", "PUMA_WORKER_CONCURRENCY" => "2",
                               "REMOTE_ADDRESS_HEADER" => "X-Forwarded-For" }, workers: 2 }
  }.freeze

  def test_every_fixture_has_a_case_and_names_its_source
    files = Dir[File.join(FIXTURES, "*.rb")].map { |f| File.basename(f, ".rb") }
    assert_equal files.sort, CASES.keys.sort
    assert_operator files.count { |f| !f.start_with?("rails_") }, :>=, 11, "at least eleven real-world files"
    files.each do |name|
      header = File.read(File.join(FIXTURES, "#{name}.rb")).lines.take_while { |l| l.start_with?("#") }.join
      assert_match(/^# Source: \S+/, header, "#{name}.rb names its source")
      assert_match(/^# License: /, header, "#{name}.rb names the license")
      assert_match(/^# Adaptations:/, header, "#{name}.rb says what was adapted")
    end
  end

  def setup
    SideBySide.skip_unless_bundle(self)
  end

  def teardown
    @run&.kill
    FileUtils.rm_rf(@dir) if @dir
  end

  # The app directory a Rails app would have: config/puma.rb, tmp/pids, tmp/sockets, log.
  def make_app(name, spec)
    @dir = Dir.mktmpdir("margay-puma-config-#{name}-")
    %w[config tmp/pids tmp/sockets log].each { |d| FileUtils.mkdir_p(File.join(@dir, d)) }
    File.write(File.join(@dir, "config.ru"), APP)
    FileUtils.cp(File.join(FIXTURES, "#{name}.rb"), File.join(@dir, "config/puma.rb"))
    (spec[:files] || {}).each do |path, source|
      FileUtils.mkdir_p(File.dirname(File.join(@dir, path)))
      File.write(File.join(@dir, path), source)
    end
  end

  def report(name, run, spec)
    logs = (spec[:logs] || []).filter_map do |path|
      full = File.join(@dir, path)
      File.read(full) if File.exist?(full)
    end
    lines = SideBySide.warnings([run.output, *logs].join)
    $stdout.puts(lines.empty? ? "[#{name}] no warnings" : lines.map { |l| "[#{name}] #{l}" }.join("\n"))
  end

  def output_of(run, spec)
    logs = (spec[:logs] || []).map do |path|
      full = File.join(@dir, path)
      "--- #{path}\n#{File.exist?(full) ? File.read(full) : '(none)'}"
    end
    [run.output, *logs].join("\n")
  end

  CASES.each do |name, spec|
    define_method(:"test_#{name}") do
      make_app(name, spec)
      port = free_port
      env = { "PORT" => port.to_s, "DATABASE_URL" => "sqlite3::memory:" }
      (spec[:env] || {}).each { |k, v| env[k] = v.respond_to?(:call) ? v.call(@dir) : v }
      @run = SideBySide::Run.new(SERVER, %w[-C config/puma.rb], dir: @dir, env: env).start
      found = @run.wait_serving(timeout: 40)
      report(name, @run, spec)
      assert found, -> { "#{name}: #{SERVER} did not serve; status #{@run.status.inspect}; output:\n#{output_of(@run, spec)}" }

      listener =
        if spec[:unix]
          found.find { |l| l.family == "unix" && l.path == File.join(@dir, spec[:unix]) }
        else
          found.find { |l| l.port == port }
        end
      assert listener, -> { "#{name}: not listening where the file says (#{spec[:unix] || "port #{port}"}): #{found.map(&:to_s)}" }
      assert_equal 200, SideBySide.get(listener, "/").first, "#{name}: GET / on #{listener}"

      assert_equal spec[:threads], SideBySide.threads_in(output_of(@run, spec)),
                   -> { "#{name}: min:max threads reported\n#{output_of(@run, spec)}" }

      children = @run.stable_children(settle: 1.5)
      assert_equal spec[:workers], children, -> { "#{name}: worker processes\n#{output_of(@run, spec)}" }

      status = @run.stop(timeout: 30)
      assert status, "#{name}: still running 30 s after TERM"
      # Exit 0; or killed by the TERM itself, as Puma 8 ends (raise_exception_on_sigterm).
      clean = status.success? || (status.signaled? && status.termsig == Signal.list["TERM"])
      assert clean, -> { "#{name}: TERM ended it with #{status.inspect}; output:\n#{output_of(@run, spec)}" }
    end
  end
end
