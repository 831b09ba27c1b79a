# frozen_string_literal: true

require_relative "../support/cluster_process"
require "json"

# Memory per process (Stats::Memory, Stats.memory_report) over real
# processes: the control app's GET /memory in single mode and in a cluster,
# where each worker's RSS/PSS arrive with its heartbeat. Puma's /stats keeps
# Puma's keys.
class ClusterMemoryTest < Minitest::Test
  include ClusterProcess

  MEMORY_KEYS = %w[rss_kib pss_kib boot_rss_kib boot_pss_kib].freeze

  def test_single_process_memory
    start_with_control
    memory = control_json("/memory?token=t")
    assert_equal MEMORY_KEYS, memory.keys
    assert_operator memory["pss_kib"], :>, 0
    assert_operator memory["rss_kib"], :>=, memory["pss_kib"]
    assert_operator memory["boot_rss_kib"], :>, 0, "the reading taken as it started serving"
    refute control_json("/stats?token=t").key?("pss_kib"), "Puma's stats keep Puma's keys"
    assert_match(/Invalid auth token/, raw_exchange(@control, "GET /memory HTTP/1.1\r\nHost: t\r\n\r\n", timeout: 5))
  end

  def test_cluster_memory_per_worker
    start_with_control("-w", "2")
    wait_for_log(/booted/, count: 2)
    memory = nil
    assert_eventually(10) do
      memory = control_json("/memory?token=t")
      memory["workers"].size == 2 && memory["workers"].all? { |w| w["memory"]["pss_kib"].positive? }
    end
    assert_equal %w[master workers total_rss_kib total_pss_kib], memory.keys
    assert_equal MEMORY_KEYS, memory["master"].keys
    assert_equal worker_pids.sort, memory["workers"].map { |w| w["pid"] }.sort
    memory["workers"].each do |w|
      assert_equal [false, MEMORY_KEYS], [w["mold"], w["memory"].keys]
      assert_operator w["memory"]["rss_kib"], :>=, w["memory"]["pss_kib"]
      assert_operator w["memory"]["boot_rss_kib"], :>, 0
    end
    assert_operator memory["master"]["pss_kib"], :>, 0
    assert_equal memory["master"]["pss_kib"] + memory["workers"].sum { |w| w["memory"]["pss_kib"] }, memory["total_pss_kib"]
    stats = control_json("/stats?token=t")
    assert_equal Margay::Stats::COUNTERS.map(&:to_s), stats["worker_status"].first["last_status"].keys,
                 "Puma's stats keep Puma's keys"
  end

  # out_of_band_gc N: a worker idle after N requests runs a full GC; without the setting
  # this small app makes no full GC in as many requests.
  def test_out_of_band_gc_runs_a_full_gc_between_requests
    assert_equal [0, 0], major_gcs_around_requests(nil)
    before, after = major_gcs_around_requests(5)
    assert_operator after - before, :>=, 2, "one full GC after each 5 requests, when the worker was idle"
  end

  private

  # Major GC counts a 1-worker cluster answers before and after 12 sequential
  # requests, less the count at boot.
  def major_gcs_around_requests(every)
    @dir = Dir.mktmpdir("margay-memory-")
    File.write(File.join(@dir, "gc.ru"), "run ->(_env) { [200, {}, [GC.stat(:major_gc_count).to_s]] }\n")
    File.write(File.join(@dir, "margay.rb"), every ? "out_of_band_gc #{every}\n" : "")
    spawn_master("-w", "1", "-t", "1:1", "-b", "tcp://127.0.0.1:0", "-C", File.join(@dir, "margay.rb"),
                 File.join(@dir, "gc.ru"))
    wait_for_listening
    wait_for_log(/booted/)
    get = -> { raw_exchange(@port, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 10)[/\r\n\r\n(\d+)/, 1].to_i }
    first = get.call
    12.times do
      get.call
      sleep 0.05 # idle between requests: the worker's tick (5 ms) sees no request running
    end
    counts = [0, get.call - first]
    stop_cluster
    kill_cluster
    FileUtils.rm_rf(@dir)
    @dir = nil
    counts
  end

  def start_with_control(*args)
    @dir = Dir.mktmpdir("margay-memory-")
    File.write(File.join(@dir, "margay.rb"), "activate_control_app 'tcp://127.0.0.1:0', auth_token: 't'\n")
    spawn_master(*args, "-b", "tcp://127.0.0.1:0", "-C", File.join(@dir, "margay.rb"), APP)
    wait_for_listening
    wait_for_log(%r{Starting control server on tcp://127\.0\.0\.1:(\d+)})
    @control = log_text[%r{Starting control server on tcp://127\.0\.0\.1:(\d+)}, 1].to_i
  end

  def control_json(path)
    JSON.parse(raw_exchange(@control, "GET #{path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 10)
      .split("\r\n\r\n", 2).last)
  end

  def assert_eventually(timeout)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    until yield
      flunk "not within #{timeout}s" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.2
    end
  end
end
