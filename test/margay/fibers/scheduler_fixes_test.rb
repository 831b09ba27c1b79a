# frozen_string_literal: true

require "test_helper"

# Fiber mode (issue 13): the review's findings on the scheduler and the loop, each over real
# sockets. Behaviour is asserted (who woke, what was answered, which thread), never wall time
# except as a generous bound against the full shutdown grace.
class FiberSchedulerFixesTest < Minitest::Test
  include Margay::TestHelper

  def fiber_server(app, **settings, &block)
    with_server(app, fiber_scheduler: true, event_backend: :auto, min_threads: 1, max_threads: 1, **settings, &block)
  end

  def text(body)
    [200, { "content-type" => "text/plain" }, [body.to_s]]
  end

  def send_get(port, path)
    sock = TCPSocket.new("127.0.0.1", port)
    sock.write("GET #{path} HTTP/1.1\r\nHost: x\r\n\r\n")
    sock
  end

  def fill(pipe)
    loop { pipe.write_nonblock("x" * 65_536) }
  rescue IO::WaitWritable
    nil
  end

  # Two fibers waiting on one fd: the fd is armed for the union of their events (a sum of two
  # IO::READABLE was IO::PRIORITY, two IO::WRITABLE an unknown bit: neither ever woke).
  def test_two_readers_of_one_pipe_both_wake
    r, w = IO.pipe
    waiting = Queue.new
    app = lambda do |env|
      if env["PATH_INFO"] == "/wait"
        waiting << 1
        text(r.wait_readable(5) ? "readable" : "timed out")
      else
        w.write("x")
        text("written")
      end
    end
    fiber_server(app) do |_host, port|
      a = send_get(port, "/wait")
      pop_within(waiting, 5)
      b = send_get(port, "/wait")
      pop_within(waiting, 5)
      assert_equal "written", read_response(send_get(port, "/write"))[2]
      assert_equal [[200, "readable"], [200, "readable"]],
                   [a, b].map { |s| read_response(s, timeout: 10).values_at(0, 2) }
    end
  ensure
    r&.close
    w&.close
  end

  def test_two_writers_of_one_pipe_both_wake
    r, w = IO.pipe
    fill(w)
    waiting = Queue.new
    app = lambda do |env|
      if env["PATH_INFO"] == "/wait"
        waiting << 1
        text(w.wait_writable(5) ? "writable" : "timed out")
      else
        r.read_nonblock(1 << 20)
        text("drained")
      end
    end
    fiber_server(app) do |_host, port|
      a = send_get(port, "/wait")
      pop_within(waiting, 5)
      b = send_get(port, "/wait")
      pop_within(waiting, 5)
      assert_equal "drained", read_response(send_get(port, "/drain"))[2]
      assert_equal [[200, "writable"], [200, "writable"]],
                   [a, b].map { |s| read_response(s, timeout: 10).values_at(0, 2) }
    end
  ensure
    r&.close
    w&.close
  end
end
