# frozen_string_literal: true

require "test_helper"
require "margay/pure"

module Margay
  # The pure engine's reactor wait (lib/margay/pure/poller.rb), both backends over real
  # sockets: readiness of the watched IOs only, removal, and a wake-up from another thread.
  class PurePollerTest < Minitest::Test
    def pollers
      list = [Pure::Poller::Select.new]
      begin
        list << Pure::Poller::Nio.new
      rescue LoadError
        nil # MRI's bundle has no nio4r; the JRuby suite runs this backend
      end
      list
    end

    # A connected pair of TCP sockets (JRuby's UNIXSocket.pair is no java.nio channel).
    def tcp_pair
      server = TCPServer.new("127.0.0.1", 0)
      client = TCPSocket.new("127.0.0.1", server.local_address.ip_port)
      [server.accept, client]
    ensure
      server&.close
    end

    def test_the_jruby_bundle_waits_with_nio4r
      skip "nio4r is in the JRuby bundle (.ci/jruby.gemfile), not in MRI's" unless RUBY_ENGINE == "jruby"

      assert_equal "nio4r", Pure::Poller.new.name
    end

    def test_readiness_removal_and_wakeup
      pollers.each do |poller|
        a, a_peer = tcp_pair
        b, b_peer = tcp_pair
        poller.add(a)
        poller.add(b)
        a_peer.write("x")
        assert_equal [a], poller.wait(5).to_a, poller.name

        poller.remove(a)
        b_peer.write("y")
        assert_equal [b], poller.wait(5).to_a, "#{poller.name}: a removed IO is not reported"
        b.read_nonblock(1)

        Thread.new { (sleep 0.2) && poller.wakeup }
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        assert_empty poller.wait(10).to_a, poller.name
        assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 5, "#{poller.name}: woken"
      ensure
        poller.close
        [a, a_peer, b, b_peer].each { |io| io&.close }
      end
    end

    # A stopping reactor releases its listeners and waits once more: a listener closed after
    # that refuses new clients at once (java.nio closes a registered channel's socket only when
    # its selector lets it go), while the poller itself stays open.
    def test_a_released_listener_closes_at_once
      pollers.each do |poller|
        listener = TCPServer.new("127.0.0.1", 0)
        port = listener.local_address.ip_port
        poller.add(listener)
        poller.wait(0)
        poller.release(listener)
        poller.wait(0)
        listener.close
        assert_raises(Errno::ECONNREFUSED, poller.name) { TCPSocket.new("127.0.0.1", port).close }
      ensure
        poller.close
        listener.close unless listener.nil? || listener.closed?
      end
    end

    # The server may close a listener before the stopping reactor releases it: releasing a
    # closed IO is a no-op, and the next wait goes on without it.
    def test_releasing_a_listener_the_server_already_closed
      pollers.each do |poller|
        listener = TCPServer.new("127.0.0.1", 0)
        poller.add(listener)
        poller.wait(0)
        listener.close
        poller.release(listener)
        assert_empty poller.wait(0).to_a, poller.name
      ensure
        poller.close
      end
    end
  end
end
