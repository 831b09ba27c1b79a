# frozen_string_literal: true

require_relative "../support/cluster_process"

# `lean_heap` through the real executable: the master executes itself again (the same pid)
# with RUBY_GC_HEAP_FREE_SLOTS_MIN_RATIO and _GOAL_RATIO in the environment Ruby starts
# with (/proc/PID/environ: what the process image was started with, which is what Ruby
# reads them from), so its workers run with them too; an operator's own value is kept.
class LeanHeapTest < Minitest::Test
  include ClusterProcess

  MIN = "RUBY_GC_HEAP_FREE_SLOTS_MIN_RATIO"
  GOAL = "RUBY_GC_HEAP_FREE_SLOTS_GOAL_RATIO"

  def setup
    skip "needs /proc/PID/environ (Linux)" unless File.readable?("/proc/self/environ")
  end

  def test_master_and_workers_start_with_half_the_free_room
    start(lean: true)
    assert_equal({ MIN => "0.10", GOAL => "0.20" }, ratios(@master), "the spawned pid, executed again")
    worker, seen = served
    assert_includes worker_pids, worker
    assert_equal({ MIN => "0.10", GOAL => "0.20" }, seen, "a worker's Ruby started with them")
  end

  def test_an_operators_own_value_is_kept
    start(lean: true, env: { MIN => "0.3" })
    assert_equal({ MIN => "0.3", GOAL => "0.20" }, served.last)
  end

  # prune_bundler's re-execution comes first and carries the ratios: the master that runs
  # without Bundler started with them too.
  def test_with_prune_bundler_the_pruned_master_has_them
    saw = File.join(Dir.tmpdir, "margay-lean-#{Process.pid}-bundler.txt")
    start(lean: true, settings: "mold_boot true\nprune_bundler true\n" \
                                "before_fork { File.write(#{saw.inspect}, defined?(::Bundler).inspect) }\n",
          env: { "RUBYOPT" => "-rbundler/setup", "BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile") })
    assert_equal "nil", File.read(saw), "the master runs without Bundler"
    assert_equal({ MIN => "0.10", GOAL => "0.20" }, ratios(@master), "and started with the ratios")
    assert_equal({ MIN => "0.10", GOAL => "0.20" }, served.last)
  ensure
    File.delete(saw) if saw && File.exist?(saw)
  end

  def test_without_the_setting_the_environment_is_left_alone
    start(lean: false)
    assert_equal({}, ratios(@master))
    assert_equal({}, served.last)
  end

  private

  def start(lean:, env: {}, settings: "")
    @dir = Dir.mktmpdir("margay-lean-")
    File.write(File.join(@dir, "margay.rb"), "lean_heap #{lean}\n#{settings}")
    # The worker answers its pid and the ratios its process image started with.
    File.write(File.join(@dir, "environ.ru"), <<~RUBY)
      run lambda { |_env|
        start = File.binread("/proc/self/environ").split("\\0").select { |kv| kv.start_with?("RUBY_GC_HEAP_FREE_SLOTS_") }
        [200, {}, [([Process.pid] + start).join("\\n")]]
      }
    RUBY
    spawn_master("-w", "2", "-b", "tcp://127.0.0.1:0", "-C", File.join(@dir, "margay.rb"), File.join(@dir, "environ.ru"),
                 env: env)
    wait_for_listening
    wait_for_log(/booted/, count: 2)
  end

  # [worker pid, its ratios] from one request.
  def served
    body = raw_exchange(@port, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 10).split("\r\n\r\n", 2).last
    pid, *vars = body.split("\n")
    [Integer(pid), vars.to_h { |kv| kv.split("=", 2) }]
  end

  def ratios(pid)
    File.binread("/proc/#{pid}/environ").split("\0").select { |kv| kv.start_with?("RUBY_GC_HEAP_FREE_SLOTS_") }
        .to_h { |kv| kv.split("=", 2) }
  end
end
