# frozen_string_literal: true

require "websocket/driver"

module Margay
  # A Rack 3 WebSocket echo app for the tests: websocket-driver's server side
  # frames the messages (and computes the handshake, answered as the 101's
  # headers); it talks over the stream of its streaming body, reading with
  # IO#read's exact lengths only (all that Rack::Lint's stream wrapper
  # offers). It answers "echo: MESSAGE" (with "pid" its process id) and closes
  # after "bye".
  module WebSocketEcho
    # The socket websocket-driver writes to: the handshake it computes is
    # kept (it becomes the Rack response's headers), every later write goes
    # to the stream.
    class DriverSocket
      attr_reader :env
      attr_accessor :stream

      def initialize(env)
        @env = env
        @handshake = +""
      end

      def write(data)
        @stream ? @stream.write(data) : @handshake << data
      end

      # The handshake's header fields, names in lower case (Rack 3).
      def headers
        @handshake.split("\r\n").drop(1).to_h do |line|
          name, value = line.split(":", 2)
          [name.downcase, value.strip]
        end
      end
    end

    # One WebSocket frame, or nil at end of stream.
    def self.read_frame(stream)
      head = stream.read(2) or return nil
      length = head.getbyte(1) & 0x7f
      extended = { 126 => 2, 127 => 8 }.fetch(length, 0)
      ext = extended.zero? ? "".b : stream.read(extended)
      return nil unless ext&.bytesize == extended

      length = ext.unpack1(extended == 2 ? "n" : "Q>") unless extended.zero?
      rest = stream.read((head.getbyte(1) & 0x80).zero? ? length : length + 4) || "".b
      head + ext + rest
    end

    # The Rack app: 426 unless the request asks for a WebSocket.
    def self.call(env)
      return [426, { "upgrade" => "websocket" }, []] unless env["rack.protocol"]&.include?("websocket")

      socket = DriverSocket.new(env)
      driver = WebSocket::Driver.rack(socket)
      driver.start
      [101, socket.headers, ->(stream) { talk(driver, socket, stream) }]
    end

    def self.talk(driver, socket, stream)
      socket.stream = stream
      closed = false
      driver.on(:message) do |event|
        driver.text(event.data == "pid" ? Process.pid.to_s : "echo: #{event.data}")
        driver.close if event.data == "bye"
      end
      driver.on(:close) { closed = true }
      until closed
        frame = read_frame(stream) or break
        driver.parse(frame)
      end
    end
  end
end
