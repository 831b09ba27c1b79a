# frozen_string_literal: true

require_relative "../support/cluster_process"

# Reforking end to end (lib/margay/cluster/mold.rb): a warm worker becomes
# the mold and the workers are re-forked from it.
class ClusterMoldTest < Minitest::Test
  include ClusterProcess

  def test_urg_makes_a_mold_and_workers_are_reforked_from_it
    start_cluster(2)
    Process.kill(:URG, @master)
    wait_for_log(/mold ready \(pid (\d+)\)/)
    mold = log_text[/mold ready \(pid (\d+)\)/, 1].to_i
    wait_for_log(/booted/, count: 4, timeout: 20) # both serving slots replaced by the mold's children
    children = worker_pids.last(2)
    children.each do |pid|
      refute_equal mold, parent_of(pid), "a reforked worker is not the mold's child"
      assert_equal @master, parent_of(pid), "the master (a child subreaper) adopted it"
      assert_equal "margay: worker", File.read("/proc/#{pid}/cmdline").split("\0").first[/\Amargay: worker/]
    end
    assert_match(/\Amargay: mold/, File.read("/proc/#{mold}/cmdline"))
    5.times { assert_equal 200, post("r")[0] }
    Process.kill(:KILL, children.first)
    wait_for_log(/booted/, count: 5, timeout: 10) # a lost child is replaced, again from the mold
    assert_equal 200, post("again")[0]
  end

  def test_refork_after_requests
    start_cluster(1, refork_after: 20)
    30.times { assert_equal 200, post("w")[0] }
    wait_for_log(/becomes the mold/, timeout: 10)
    wait_for_log(/mold ready/, timeout: 10)
    wait_for_log(/booted/, count: 2, timeout: 10)
    assert_equal 200, post("after")[0]
  end

  private

  def parent_of(pid)
    File.read("/proc/#{pid}/stat").split(") ").last.split[1].to_i
  end
end
