# frozen_string_literal: true

require_relative "../support/cluster_process"

# Reforking end to end (lib/margay/cluster/mold.rb): a warm worker becomes
# the mold, settles its heap, the other workers are re-forked from it, and it
# serves again (no idle process keeps a copy of the heap).
class ClusterMoldTest < Minitest::Test
  include ClusterProcess

  def test_urg_makes_a_mold_workers_are_reforked_from_it_and_it_serves_again
    start_cluster(2, compact_before_fork: true, heap_room_before_fork: 0.4)
    Process.kill(:URG, @master)
    wait_for_log(/mold ready \(pid (\d+)\)/)
    mold = log_text[/mold ready \(pid (\d+)\)/, 1].to_i
    assert_match(/mold \(from worker \d\): heap settled before forking \(PSS\/RSS MiB\): before [\d.]+\/[\d.]+, 4 full GCs .*\d+ free slots \(40 %\) .*GC\.compact .*malloc_trim/,
                 log_text, "each step measured in the log")
    wait_for_log(/the mold \(pid #{mold}\) serves again as worker (\d)/, timeout: 20)
    wait_for_log(/worker \d \(pid #{mold}\) booted/, timeout: 10)
    children = worker_pids - [mold]
    children.select! { |pid| parent_of(pid) != @master || pid > mold } # the re-forked one(s)
    refute_empty children
    children.each do |pid|
      refute_equal mold, parent_of(pid), "a reforked worker is not the mold's child"
      assert_equal @master, parent_of(pid), "the master (a child subreaper) adopted it"
    end
    assert_match(/\Amargay: worker/, File.read("/proc/#{mold}/cmdline"), "the template is a worker again")
    assert_equal 2, Margay::TestWatchdog.descendants(@master).size, "two workers, no idle mold"
    served = Array.new(40) { raw_exchange(@port, "GET /pid HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 10) }
    assert_includes served.map { |r| r[/\r\n\r\n(\d+)/, 1].to_i }, mold, "the template serves requests"

    Process.kill(:KILL, children.first)
    wait_for_log(/booted/, count: 5, timeout: 10) # a lost worker is replaced (by the master now)
    assert_equal 200, post("again")[0]
  end

  def test_refork_keeps_serving_with_no_request_lost
    start_cluster(2, out_of_band_gc: 5)
    stop = false
    counts = Hash.new(0)
    clients = Array.new(3) do
      Thread.new do
        until stop
          status = post("x")[0]
          counts[status] += 1
        end
      end
    end
    sleep 0.5
    Process.kill(:URG, @master)
    wait_for_log(/serves again as worker/, timeout: 20)
    wait_for_log(/booted/, count: 4, timeout: 10) # 2 at start, 1 re-forked, the mold again
    sleep 0.5
    stop = true
    clients.each(&:join)
    assert_equal [200], counts.keys, "every request answered 200 through the refork: #{counts}"
    assert_operator counts[200], :>, 10
    refute_match(/exited|failed/, log_text)
  end

  def test_refork_after_requests_once
    start_cluster(1, refork_after: 20)
    30.times { assert_equal 200, post("w")[0] }
    wait_for_log(/becomes the mold/, timeout: 10)
    wait_for_log(/mold ready/, timeout: 10)
    wait_for_log(/serves again as worker 0/, timeout: 10) # one worker: nothing to fork, the mold serves at once
    wait_for_log(/booted/, count: 2, timeout: 10)
    40.times { assert_equal 200, post("after")[0] }
    sleep 1.5 # a heartbeat or more: a second refork_due would have arrived
    assert_equal 1, log_text.scan(/becomes the mold/).size, "refork_after reforks once (as Puma's fork_worker)"
  end

  def test_mold_boot_loads_the_app_once_in_the_first_worker_which_forks_the_others
    @dir = Dir.mktmpdir("margay-cluster-")
    app = File.join(@dir, "app.ru")
    File.write(app, "$stdout.sync = true\nputs \"app loaded in \#{Process.pid}\"\n" \
                    "run ->(_env) { [200, { \"content-type\" => \"text/plain\" }, [Process.pid.to_s]] }\n")
    File.write(File.join(@dir, "margay.rb"), "mold_boot true\n")
    spawn_master("-w", "3", "-b", "tcp://127.0.0.1:0", "-C", File.join(@dir, "margay.rb"), app)
    wait_for_listening
    wait_for_log(/the mold \(pid (\d+)\) serves again as worker 0/, timeout: 30)
    mold = log_text[/the mold \(pid (\d+)\) serves again/, 1].to_i
    wait_for_log(/worker 0 \(pid #{mold}\) booted/, count: 2, timeout: 10)
    assert_match(/loaded by the first worker, the mold of the others/, log_text, "the banner says where the app loads")
    assert_equal [mold], log_text.scan(/app loaded in (\d+)/).flatten.map(&:to_i), "one load, in the first worker"
    assert_match(/mold \(from worker 0\): heap settled/, log_text)
    refute_match(/master: heap settled/, log_text, "the master holds no app")
    workers = worker_pids.uniq
    assert_equal 3, workers.size, log_text
    served = []
    300.times do # until each has answered (the kernel picks which worker accepts)
      served |= [raw_exchange(@port, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 10)[/\r\n\r\n(\d+)/, 1].to_i]
      break if served.size == 3
    end
    assert_equal workers.sort, served.sort, "all three serve"

    Process.kill(:KILL, (workers - [mold]).first)
    wait_for_log(/app loaded in/, count: 2, timeout: 20) # the master forks the replacement, which loads the app
    wait_for_log(/booted/, count: 5, timeout: 20)
    assert_equal 200, raw_exchange(@port, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", timeout: 10)[/\A\S+ (\d+)/, 1].to_i
  end

  private

  def parent_of(pid)
    File.read("/proc/#{pid}/stat").split(") ").last.split[1].to_i
  end
end
