# frozen_string_literal: true

require "json"
require "net/http"
require_relative "../support/cluster_process"
require "margay/process/allocator"

# `jemalloc` through the real executable: the process re-executes itself with the library
# preloaded (the same pid), says so in the banner and in the stats' versions, and a cluster's
# workers inherit it; a library that is not there is one warning and malloc.
class JemallocTest < Minitest::Test
  include ClusterProcess

  def setup
    skip "no libjemalloc installed (Debian: libjemalloc2)" unless Margay::Allocator.library(true)
    @dir = Dir.mktmpdir("margay-jemalloc-")
  end

  def test_single_runs_on_jemalloc_in_the_same_process
    control = free_port
    spawn_master("--jemalloc", "-b", "tcp://127.0.0.1:0", "--control-url", "tcp://127.0.0.1:#{control}",
                 "--control-token", "none", File.join(ROOT, "test/slow/support/cluster_app.ru"))
    wait_for_listening
    assert_match(/^\* Allocator: jemalloc$/, log_text)
    assert jemalloc_mapped?(@master), "libjemalloc is mapped in the master (pid #{@master}, the one spawned)"
    stats = JSON.parse(Net::HTTP.get(URI("http://127.0.0.1:#{control}/stats")))
    assert_equal "jemalloc", stats.dig("versions", "allocator")
  end

  def test_cluster_workers_inherit_it
    File.write(File.join(@dir, "margay.rb"), "jemalloc true\n")
    spawn_master("-w", "2", "-b", "tcp://127.0.0.1:0", "-C", "margay.rb", File.join(ROOT, "test/slow/support/cluster_app.ru"))
    wait_for_listening
    wait_for_log(/booted/, count: 2)
    assert_equal 2, worker_pids.size
    worker_pids.each { |pid| assert jemalloc_mapped?(pid), "worker #{pid} runs on jemalloc" }
  end

  def test_a_missing_library_warns_and_serves_on_malloc
    File.write(File.join(@dir, "margay.rb"), "jemalloc '/nonexistent/libjemalloc.so.2'\n")
    spawn_master("-C", "margay.rb", "-b", "tcp://127.0.0.1:0", File.join(ROOT, "test/slow/support/cluster_app.ru"))
    wait_for_listening
    assert_match(%r{jemalloc: no library at /nonexistent/libjemalloc\.so\.2 .*serving on malloc}, log_text)
    assert_match(/^\* Allocator: malloc$/, log_text)
    refute jemalloc_mapped?(@master)
  end

  private

  def jemalloc_mapped?(pid)
    File.foreach("/proc/#{pid}/maps").any? { |line| line.include?("libjemalloc") }
  end
end
