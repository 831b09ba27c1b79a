# frozen_string_literal: true

require "test_helper"
require "margay/control/puma_launcher"

# What plugins and the control app get as Puma's launcher
# (Margay::PumaLauncher): options under Puma's names, events, the log
# writer, and each action as the signal Margay answers (recorded here, not sent).
class PumaLauncherTest < Minitest::Test
  # Records the signals instead of sending them.
  class RecordingLauncher < Margay::PumaLauncher
    def signals = (@signals ||= [])

    private

    def signal(sig)
      signals << sig
      true
    end
  end

  # Stands for a Cluster: its stats are already Puma's shape.
  class FakeCluster
    def stats = { workers: 2 }
  end

  def setup
    @log_io = StringIO.new
    @log = Margay::Log.new(out: @log_io, err: @log_io)
  end

  def launcher(runner: nil, **settings)
    RecordingLauncher.new(config: Margay::Configuration.new(**settings), log: @log, runner: runner)
  end

  def test_options_speak_pumas_names
    config = Margay::Configuration.new(workers: 2, shutdown_timeout: 7, state_path: "/x/y", binds: ["tcp://127.0.0.1:1"])
    options = Margay::PumaLauncher::Options.new(config, { control_auth_token: "none" })
    assert_equal [2, 7, "/x/y", ["tcp://127.0.0.1:1"], "none"],
                 %i[workers worker_shutdown_timeout state binds control_auth_token].map { |k| options[k] }
    assert_equal 2, options[:workers]
    assert_equal 7, options["worker_shutdown_timeout"]
    assert_nil options[:solid_queue_mode]
    options[:solid_queue_mode] = :async
    assert_equal :async, options.fetch(:solid_queue_mode)
    assert_equal :d, options.fetch(:nothing_here, :d)
    assert_raises(KeyError) { options.fetch(:nothing_here) }
  end

  def test_single_mode_actions
    l = launcher
    booted = []
    l.events.on_restart { booted << :before_restart }
    refute l.clustered?
    l.stop
    l.restart
    l.phased_restart
    assert_equal false, l.refork, "no refork without workers"
    assert_equal %i[TERM USR2 USR2], l.signals, "a phased restart is a restart in single mode, like Puma"
    assert_empty booted, "the restart fires before_restart when it happens (Launcher#restart!), not the request for it"
    assert_match(/phased restart not available in single mode/, @log_io.string)
  end

  def test_cluster_mode_actions_and_stats
    l = launcher(runner: FakeCluster.new, workers: 2)
    fired = []
    l.events.before_restart { fired << :before_restart }
    l.restart
    l.phased_restart
    assert l.refork
    l.reload_certificates
    assert_equal %i[USR2 USR1 URG ALRM], l.signals
    assert_empty fired, "the cluster master fires before_restart when it restarts"
    assert_equal({ workers: 2 }, l.stats)
  end

  def test_events_take_both_names_and_survive_a_failing_handler
    events = Margay::PumaLauncher::Events.new(@log)
    seen = []
    events.on_booted { seen << 1 }
    events.after_booted { raise "boom" }
    events.register(:after_booted, -> { seen << 3 })
    assert_raises(ArgumentError) { events.register(:after_booted, -> {}) { nil } }
    events.fire_once(:after_booted)
    events.fire_once(:after_booted)
    assert_equal [1, 3], seen
    assert_match(/after_booted event handler failed: RuntimeError: boom/, @log_io.string)
  end

  def test_log_writer_and_thread_status
    l = launcher
    l.log_writer.log("hello from a plugin")
    l.log_writer.error("bad news")
    assert_match(/^hello from a plugin$/, @log_io.string)
    assert_match(/^ERROR: bad news$/, @log_io.string)
    names = l.thread_status.map(&:first)
    assert(names.all? { |n| n.start_with?("Thread: TID-") })
    own = "Thread: TID-#{Thread.current.object_id.to_s(36)}"
    assert(names.any? { |n| n == own || n.start_with?("#{own} ") }, "this thread is listed") # others come and go
  end
end
