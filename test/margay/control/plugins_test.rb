# frozen_string_literal: true

require "test_helper"
require "json"
require "tmpdir"
require "margay/control/operations"

# Puma plugins under Margay (Margay::Plugins, Margay::PumaLauncher) and the
# Operations that start them with the control app and the state file. The
# fast suite's bundle has no puma gem: these run on Margay's Puma::Plugin
# shim (test/slow/control/plugins_test.rb runs the puma gem's, and real plugins).
class PluginsTest < Minitest::Test
  # Stands for a Server: Server#stats's keys.
  class FakeServer
    def stats = { requests: 42, connections: 3, threads: 4, busy_threads: 3, errors: 0 }
  end

  PROBE = <<~RUBY
    require "puma/plugin"
    Puma::Plugin.create do
      def start(launcher)
        $margay_probe = { workers: launcher.options[:workers], environment: launcher.options[:environment],
                          token: launcher.options[:control_auth_token], url: launcher.options.fetch(:control_url),
                          clustered: launcher.respond_to?(:phased_restart), const: Puma::Const::VERSION }
        launcher.events.on_booted { ($margay_events ||= []) << :booted }
        launcher.events.after_stopped { ($margay_events ||= []) << :stopped }
        launcher.events.before_restart { raise "a failing handler" }
        launcher.log_writer.log("probe started")
        in_background { $margay_background = Thread.current.name }
      end
    end
  RUBY

  def setup
    @dir = Dir.mktmpdir("margay-plugins-")
    FileUtils.mkdir_p(File.join(@dir, "puma/plugin"))
    { "margay_probe" => PROBE,
      "margay_broken" => "require 'puma/plugin'\nPuma::Plugin.create { def start(_l) = raise(NotImplementedError, 'needs Puma::Server') }\n",
      "margay_syntax" => "require 'a_gem_that_is_not_here'\n",
      "margay_dsl" => "require 'puma/plugin'\nPuma::Plugin.create { def config(c) = c.metrics_url('x'); def start(_l) = ($margay_dsl = 1) }\n" }.each do |name, code|
      File.write(File.join(@dir, "puma/plugin/#{name}.rb"), code)
    end
    $LOAD_PATH.unshift(@dir)
    @log_io = StringIO.new
    @log = Margay::Log.new(out: @log_io, err: @log_io)
    $margay_probe = $margay_events = $margay_background = $margay_dsl = nil
  end

  def teardown
    @ops&.stop
    $LOAD_PATH.delete(@dir)
    FileUtils.remove_entry(@dir)
  end

  def operations(**settings)
    config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], environment: "staging", **settings)
    @ops = Margay::Operations.start(config, @log, FakeServer.new)
  end

  def test_a_plugin_starts_with_pumas_launcher_and_its_events_fire
    operations(plugins: ["margay_probe"], control_url: "tcp://127.0.0.1:0", control_token: "t0k")
    assert_equal({ workers: 0, environment: "staging", token: "t0k", url: @ops.control.url, clustered: true,
                   const: "8.0.2" }, $margay_probe)
    Margay::Plugins.threads.last.join(5)
    assert_equal "margay plugin bg", $margay_background, "in_background ran in Margay's thread"
    @ops.booted
    @ops.booted
    assert_equal [:booted], $margay_events, "after_booted fires once"
    Margay::Operations.fire(:before_restart) # the handler raises: logged, not fatal
    assert_match(/before_restart event handler failed: RuntimeError: a failing handler/, @log_io.string)
    @ops.stop
    assert_equal %i[booted stopped], $margay_events
    assert_includes @log_io.string, "probe started"
    @ops = nil
  end

  def test_plugins_that_cannot_load_or_start_cost_one_warning_line_each
    operations(plugins: %w[margay_broken margay_syntax margay_nonesuch margay_probe])
    warnings = @log_io.string.lines.grep(/WARN/)
    assert_equal 3, warnings.size, @log_io.string
    # Puma's own Plugins.find (when an earlier test made the puma gem loadable) reports a plugin
    # whose file fails to require as not found; the shim's names the missing gem.
    assert_match(/plugin margay_syntax not loaded: (.*a_gem_that_is_not_here|Unable to find plugin)/, warnings[0])
    assert_match(/plugin margay_nonesuch not loaded: Unable to find plugin/, warnings[1])
    assert_match(/plugin margay_broken not started: needs Puma::Server \(NotImplementedError\)/, warnings[2])
    refute_nil $margay_probe, "the others still start"
  end

  def test_a_plugins_config_hook_is_not_run_and_says_so
    operations(plugins: %w[margay_dsl])
    assert_equal 1, $margay_dsl, "it starts"
    assert_equal ["WARN: plugin margay_dsl: its config(dsl) hook is not run (Margay's config file is not Puma's DSL): " \
                  "the settings it adds are ignored\n"], @log_io.string.lines.grep(/WARN/)
  end

  def test_stats_in_process_have_pumas_single_shape
    operations(plugins: ["margay_probe"], max_threads: 8)
    stats = Margay.stats_hash
    assert_equal %i[started_at backlog running pool_capacity busy_threads io_threads backlog_max max_threads
                    requests_count reactor_max versions], stats.keys, "Puma 8's keys, in its order"
    assert_equal [0, 4, 5, 3, 8, 42, 3], stats.values_at(:backlog, :running, :pool_capacity, :busy_threads, :max_threads,
                                                         :requests_count, :reactor_max)
    assert_equal Margay::VERSION, stats[:versions][:margay]
    assert_equal JSON.parse(JSON.generate(stats)), JSON.parse(Puma.stats), "Puma.stats is Margay's, as JSON"
    assert_equal stats.keys, Puma.stats_hash.keys
    @ops.stop
    @ops = nil
    assert_equal({}, Margay.stats_hash, "nothing serves")
  end

end
