# frozen_string_literal: true

require_relative "../support/cluster_process"

# Puma's operational settings in a real cluster (support/launch.rb builds
# the Configuration): redirected stdout/stderr reopened on HUP by the master
# and the workers, TTOU's culling strategy, the workers' titles.
class ClusterSettingsTest < Minitest::Test
  include ClusterProcess

  APP = File.expand_path("../support/single_app.ru", __dir__)
  LAUNCH = File.expand_path("../support/launch.rb", __dir__)

  def start(settings)
    spawn_process({ "MARGAY_TEST_SETTINGS" => settings }, RbConfig.ruby, LAUNCH, APP)
  end

  def alive?(pid)
    File.read("/proc/#{pid}/stat")[/\) (\S)/, 1] != "Z"
  rescue Errno::ENOENT, Errno::ESRCH
    false
  end

  def test_hup_reopens_redirects_everywhere_and_ttou_culls_the_oldest
    @dir = Dir.mktmpdir("margay-cluster-settings-")
    out, err = File.join(@dir, "out.log"), File.join(@dir, "err.log")
    start("{ workers: 2, redirect_stdout: #{out.inspect}, redirect_stderr: #{err.inspect}, " \
          "worker_culling_strategy: :oldest, tag: 'shop' }")
    text = wait_for_file(out, /booted/, count: 2)
    @port = text[%r{Listening on tcp://127\.0\.0\.1:(\d+)}, 1].to_i
    pids = text.scan(/worker (\d) \(pid (\d+)\) booted/).to_h { |i, pid| [i.to_i, pid.to_i] }
    assert_equal "margay: worker 0 [shop]", File.read("/proc/#{pids[0]}/cmdline").tr("\0", " ").strip

    File.rename(out, "#{out}.1")
    File.rename(err, "#{err}.1")
    Process.kill(:HUP, @master)
    [@master, *pids.values].each { |pid| wait_for_reopen(pid, out => 1, err => 2) }
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
    seen = []
    until seen.uniq.size == 2 || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      seen << raw_exchange(@port, "GET /say?#{seen.size} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")[/\r\n\r\n(\d+)/, 1].to_i
    end
    assert_equal pids.values.sort, seen.uniq.sort, "both workers answered"
    wait_for_file(err, /app stderr/, count: seen.size) # every worker writes to the new files
    assert_equal seen.size, File.read(out).scan(/app stdout/).size

    Process.kill(:TTOU, @master)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 20
    sleep 0.05 while alive?(pids[0]) && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
    refute alive?(pids[0]), "the oldest worker stopped"
    assert alive?(pids[1]), "the youngest serves on"
    assert_predicate stop_cluster, :success?
  end

  # HUP when the redirected file cannot be opened (here its directory is
  # gone; logrotate's `create` with the wrong owner does the same): the
  # master used to die of the exception, and the workers with it. It says so
  # and the cluster serves on; once the directory is back, HUP reopens.
  def test_hup_with_a_log_that_cannot_be_reopened_keeps_the_cluster
    logs, out = make_logs_dir("margay-cluster-settings-")
    start("{ workers: 2, redirect_stdout: #{out.inspect}, redirect_stderr: #{out.inspect} }")
    text = wait_for_file(out, /booted/, count: 2)
    @port = text[%r{Listening on tcp://127\.0\.0\.1:(\d+)}, 1].to_i
    pids = text.scan(/worker \d \(pid (\d+)\) booted/).flatten.map(&:to_i)

    File.rename(logs, "#{logs}.1")
    Process.kill(:HUP, @master)
    wait_for_file("#{logs}.1/out.log", /master: HUP: could not reopen the redirected logs/)
    wait_for_file("#{logs}.1/out.log", /worker \d: HUP: could not reopen the redirected logs/, count: 2)
    assert alive?(@master), "the master serves on"
    assert pids.all? { |pid| alive?(pid) }, "so do the workers"
    3.times { assert_match(/\r\n\r\n\d+/, raw_exchange(@port, "GET /say HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")) }

    Dir.mkdir(logs)
    Process.kill(:HUP, @master)
    [@master, *pids].each do |pid|
      wait_for_reopen(pid, out => 1)
    rescue Minitest::Assertion
      raise Minitest::Assertion, "#{$!.message}\nmaster #{@master}, workers #{pids}\n--- old\n#{File.read("#{logs}.1/out.log")}\n--- new\n#{File.read(out) if File.exist?(out)}"
    end
    assert_predicate stop_cluster, :success?
  end

  # Puma's idle_timeout in a cluster: the master stops once the workers'
  # heartbeat counters show no request for that long, and not while one runs.
  def test_idle_timeout_stops_the_cluster_once_no_request_ran
    @dir = Dir.mktmpdir("margay-cluster-settings-")
    out = File.join(@dir, "out.log")
    start("{ workers: 2, idle_timeout: 2, redirect_stdout: #{out.inspect} }")
    text = wait_for_file(out, /booted/, count: 2)
    @port = text[%r{Listening on tcp://127\.0\.0\.1:(\d+)}, 1].to_i
    assert_match(/\r\n\r\n\d+/, raw_exchange(@port, "GET /say HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))
    assert_predicate master_exit(30, "the cluster still runs long after idle_timeout\n#{log_text}"), :success?
    assert_match(/no request for 2s \(idle_timeout\): stopping/, File.read(out))
  end
end
