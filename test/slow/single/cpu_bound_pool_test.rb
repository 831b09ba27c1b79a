# frozen_string_literal: true

require "etc"
require_relative "../support/cluster_process"

# A CPU-bound app in one process that shares its CPU with another busy process (both pinned
# to CPU 0 with taskset): its pool thread waits for the CPU, often across two of the
# supervisor's 5 ms looks, and such a look shows neither CPU time nor a run-queue wait (the
# kernel counts a wait once it ends). The pool must not take that for blocked threads: it
# serves on one thread, as it does on a CPU of its own, instead of growing to max threads
# that then share the GVL for as long as requests keep coming. (Threads started on demand in
# the first moments leave once the looks find the process computing: the second half counts.)
class CpuBoundPoolTest < Minitest::Test
  include ClusterProcess

  APP = <<~RUBY
    require "zlib"
    DATA = Random.new(1).bytes(60_000)
    # ~2 ms of CPU per request, most of it in zlib without the GVL (as a database driver's
    # query); the body names the thread
    run lambda { |_env|
      Zlib::Deflate.deflate(DATA)
      [200, {}, [Thread.current.name.to_s]]
    }
  RUBY
  CLIENTS = 8
  HOGS = Integer(ENV.fetch("HOGS", "4")) # busy processes on CPU 0 beside the server
  SECONDS = 6

  def setup
    super
    skip "needs taskset and 2 CPUs" unless system("command -v taskset >/dev/null") && Etc.nprocessors >= 2
  end

  def test_a_cpu_bound_app_descheduled_serves_on_one_thread
    @dir = Dir.mktmpdir("margay-cpu-bound-")
    app = File.join(@dir, "cpu.ru")
    File.write(app, APP)
    hog = Process.spawn("taskset", "-c", "0", RbConfig.ruby, "-e", "#{HOGS - 1}.times { fork }; loop {}", pgroup: true)
    spawn_process({}, "taskset", "-c", "0", RbConfig.ruby, File.join(ROOT, "exe/margay"),
                  "-b", "tcp://127.0.0.1:0", "-t", "0:5", app)
    wait_for_listening
    served = Hash.new(0)
    lock = Mutex.new
    counted = now + (SECONDS / 2)
    stop = now + SECONDS
    Array.new(CLIENTS) do
      Thread.new do
        sock = TCPSocket.new("127.0.0.1", @port)
        while now < stop
          sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
          status, _, body = read_response(sock, timeout: 10)
          assert_equal 200, status
          lock.synchronize { served[body] += 1 } if now > counted
        end
      ensure
        sock&.close
      end
    end.each(&:join)
    assert_operator served.values.sum, :>=, 100, "served #{served.inspect}"
    assert_equal 1, served.size, "one thread served them all (requests per thread: #{served.inspect})"
  ensure
    if hog
      Process.kill(:KILL, -hog)
      Process.wait(hog)
      sleep 0.1 # its forks, reparented, are reaped by init
    end
  end
end
