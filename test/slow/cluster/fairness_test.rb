# frozen_string_literal: true

require_relative "../support/cluster_process"

# The pipelining rule (core/loop.h, MG_TURN_MS) in a cluster worker: one worker with one thread,
# a client pipelining slow requests, and another keep-alive client whose request arrives while
# the hog's first is in the app. The app appends every path it serves to a file: the order
# is the worker's queue order (test/wire/fairness_test.rb does the same in single mode).
class ClusterFairnessTest < Minitest::Test
  include ClusterProcess

  APP = <<~'RUBY'
    # frozen_string_literal: true
    dir = __dir__
    run lambda { |env|
      path = env["PATH_INFO"]
      File.open(File.join(dir, "order"), "a") { |f| f.puts(path) }
      if path.start_with?("/hog/")
        if path == "/hog/1"
          File.write(File.join(dir, "started"), "")
          sleep 0.01 until File.exist?(File.join(dir, "go"))
        end
        sleep 0.02 # longer than a turn
      end
      [200, { "content-type" => "text/plain" }, [path]]
    }
  RUBY

  def test_a_ready_connection_goes_before_the_hogs_next_pipelined_request_in_a_worker
    @dir = Dir.mktmpdir("margay-cluster-")
    File.write(File.join(@dir, "config.ru"), APP)
    File.write(File.join(@dir, "margay.rb"), "threads 1, 1\n")
    spawn_master("-w", "1", "-b", "tcp://127.0.0.1:0", "-C", "margay.rb", "config.ru")
    wait_for_listening
    wait_for_log(/booted/)

    other = TCPSocket.new("127.0.0.1", @port)
    other.write("GET /warm HTTP/1.1\r\nHost: t\r\n\r\n")
    assert_equal 200, read_response(other).first
    hog = TCPSocket.new("127.0.0.1", @port)
    hog.write((1..4).map { |i| "GET /hog/#{i} HTTP/1.1\r\nHost: t\r\n\r\n" }.join)
    wait_for_marker("started")
    other.write("GET /other HTTP/1.1\r\nHost: t\r\n\r\n")
    wait_acked(other)
    File.write(File.join(@dir, "go"), "")

    assert_equal [200, "/other"], read_response(other, timeout: 10).values_at(0, 2)
    4.times { |i| assert_equal "/hog/#{i + 1}", read_response(hog, timeout: 10)[2] }
    assert_equal %w[/warm /hog/1 /other /hog/2 /hog/3 /hog/4], File.readlines(File.join(@dir, "order"), chomp: true)
  ensure
    other&.close
    hog&.close
  end

  private

  def wait_for_marker(name)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
    until File.exist?(File.join(@dir, name))
      flunk "#{name} never appeared; log:\n#{log_text}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.01
    end
  end
end
