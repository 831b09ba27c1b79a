# frozen_string_literal: true

# Reproducer, not part of `rake test`: many short keep-alive connections, one
# at a time, three requests each. Every request must be answered within 2 s and
# the server must stop cleanly afterwards.
#
#   bundle exec ruby -Itest -Ilib test/corpus/keepalive_stress.rb
#   STRESS_ITERATIONS=5000 STRESS_BACKEND=poll bundle exec ruby -Itest -Ilib test/corpus/keepalive_stress.rb
require "test_helper"
require_relative "../support/wire"
require_relative "apps"

module Margay
  class KeepaliveStress < Minitest::Test
    include TestHelper

    REQUEST = "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"

    def test_every_request_on_short_keep_alive_connections_is_answered
      iterations = Integer(ENV.fetch("STRESS_ITERATIONS", "3000"))
      backend = ENV.fetch("STRESS_BACKEND", "auto").to_sym
      stalls = []
      with_server(Corpus::Apps::ECHO, environment: "production", event_backend: backend) do |_host, port, _server|
        iterations.times do |i|
          client = Wire::Client.open(port, timeout: 2)
          3.times do |k|
            client.write(REQUEST)
            _, res = client.read_final
            next if res&.status == 200

            stalls << "connection #{i} request #{k}: #{res ? res.status : 'closed'}"
            break
          rescue Wire::Timeout
            stalls << "connection #{i} request #{k}: no response within 2 s"
            break
          end
        ensure
          client&.close
        end
      end
      assert_empty stalls, "#{stalls.size} of #{iterations * 3} requests not answered (#{backend})"
    end
  end
end
