# frozen_string_literal: true

require_relative "../support/cluster_process"

# queue_timeout and the queue time in a real cluster's worker: a request that waited for the
# worker's only thread longer than queue_timeout is answered 503 by the worker's engine, and the
# env of a request that did not wait carries margay.queue_time.
class ClusterShedTest < Minitest::Test
  include ClusterProcess
  include Margay::TestHelper

  def test_a_worker_sheds_a_request_past_queue_timeout
    start_cluster(1, min_threads: 1, max_threads: 1, queue_timeout: 1)
    slow = TCPSocket.new("127.0.0.1", @port)
    slow.write("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    wait_for_log(/slow request in/)
    queued = TCPSocket.new("127.0.0.1", @port)
    queued.write("GET /pid HTTP/1.1\r\nHost: x\r\n\r\n")
    status, headers, = read_response(queued, timeout: 10)
    assert_equal [503, "1"], [status, headers["retry-after"]], "waited 5 s behind /slow"
    assert_equal 200, read_response(slow, timeout: 10)[0]
    response = raw_get(@port, "/queue_time")
    assert_match(%r{\AHTTP/1.1 200}, response)
    assert_operator Float(response.split("\r\n\r\n", 2).last), :<, 0.5, "a request that did not wait"
  ensure
    [slow, queued].each { |s| s&.close }
  end
end
