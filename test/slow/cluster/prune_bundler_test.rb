# frozen_string_literal: true

require_relative "../support/cluster_process"

# prune_bundler through the real executable started under Bundler (RUBYOPT's -rbundler/setup,
# as `bundle exec` sets it): a master that never loads the app executes itself again without
# Bundler (the same pid), the worker that loads the app has the bundle set up, and a hot
# restart starts under Bundler again and prunes again.
class ClusterPruneBundlerTest < Minitest::Test
  include ClusterProcess

  UNDER_BUNDLER = { "RUBYOPT" => "-rbundler/setup", "BUNDLE_GEMFILE" => File.join(ROOT, "Gemfile") }.freeze
  # The body: whether Bundler is loaded in the worker serving, and its pid.
  APP_SOURCE = "run ->(_env) { [200, {}, [\"\#{defined?(::Bundler).inspect} \#{Process.pid}\"]] }\n"

  def setup
    @dir = Dir.mktmpdir("margay-prune-")
    File.write(File.join(@dir, "app.ru"), APP_SOURCE)
  end

  def test_a_mold_boot_master_runs_without_bundler_and_the_workers_with_it
    start(mold_boot: true, prune_bundler: true)
    assert_equal "nil", master_saw, "before_fork ran in a master without Bundler"
    assert_match(/\) pid #{@master}$/, log_text, "the process spawned re-executed itself in place")
    assert_equal "\"constant\"", served_bundler, "the worker loaded the app with the bundle set up"
  end

  def test_preload_app_false_prunes_too_and_a_hot_restart_prunes_again
    start(preload_app: false, prune_bundler: true)
    assert_equal "nil", master_saw
    File.delete(File.join(@dir, "master.txt"))
    Process.kill(:USR2, @master)
    wait_for_log(/booted/, count: 4, timeout: 30)
    assert_equal "nil", master_saw, "the restarted master (under Bundler again) pruned again"
    assert_equal "\"constant\"", served_bundler
  end

  def test_without_it_the_master_keeps_bundler
    start(mold_boot: true)
    assert_equal "\"constant\"", master_saw
  end

  def test_a_preloading_master_says_it_is_ignored
    start(preload_app: true, prune_bundler: true)
    assert_match(/prune_bundler ignored: the master loads the app \(preload_app\)/, log_text)
    assert_equal "\"constant\"", master_saw
  end

  private

  def start(**settings)
    config = settings.map { |k, v| "#{k} #{v.inspect}\n" }.join +
             "before_fork { File.write(#{File.join(@dir, 'master.txt').inspect}, defined?(::Bundler).inspect) }\n"
    File.write(File.join(@dir, "margay.rb"), config)
    spawn_master("-w", "2", "-b", "tcp://127.0.0.1:0", "-C", "margay.rb", "app.ru", env: UNDER_BUNDLER)
    wait_for_listening
    wait_for_log(/booted/, count: 2, timeout: 30)
  end

  # What before_fork found in the master: defined?(::Bundler).inspect.
  def master_saw
    wait_for_file(File.join(@dir, "master.txt"), /\S/)
  end

  def served_bundler
    body = raw_exchange(@port, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 10)[/\r\n\r\n(.*)\z/m, 1]
    body.split.first
  end
end
