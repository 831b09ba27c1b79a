# frozen_string_literal: true

require "stringio"

module Margay
  module Pure
    # A request's Rack env as ext/margay/ruby/env.c builds it: the template, the request line,
    # the fields as HTTP_* (repeated ones joined, cookies with "; "), SERVER_NAME and
    # SERVER_PORT from the authority or the listener. Mixed into Engine (its listeners,
    # template and clock).
    module Env
      # The env keys of the usual request field names, as clients spell them: found here, a name
      # is not downcased, upcased and joined again.
      USUAL_FIELDS = %w[Host User-Agent Accept Accept-Encoding Accept-Language Connection Cookie Referer Origin
                        Cache-Control Upgrade-Insecure-Requests X-Forwarded-For X-Forwarded-Proto X-Request-Id
                        X-Real-Ip Authorization If-None-Match If-Modified-Since Pragma Content-Type].freeze
      ENV_KEYS = USUAL_FIELDS.each_with_object({}) do |name, keys|
        key = name == "Content-Type" ? "CONTENT_TYPE" : "HTTP_#{name.upcase.tr('-', '_')}"
        keys[name] = keys[name.downcase] = key.freeze
      end.freeze

      private

      def env_for(conn)
        head = conn.head
        listener = @listeners[conn.listener]
        env = @env_template.dup
        env["REQUEST_METHOD"] = head.method
        env["PATH_INFO"] = head.path.empty? ? "/" : head.path
        env["QUERY_STRING"] = head.query
        env["REQUEST_URI"] = head.target
        env["SERVER_PROTOCOL"] = head.minor.zero? ? "HTTP/1.0" : "HTTP/1.1"
        env["REMOTE_ADDR"] = remote_addr(conn)
        head.fields.each { |name, value| put_field(env, name, value) }
        env["CONTENT_LENGTH"] = conn.input.bytesize.to_s if head.content_length || head.chunked
        authority = head.authority || head.host
        env["HTTP_HOST"] = head.authority if head.authority
        if authority
          name, port = split_authority(authority)
          env["SERVER_NAME"] = name.empty? ? "localhost" : name
          env["SERVER_PORT"] = port || (head.target.match?(/\Ahttps:/i) && head.authority ? "443" : "80")
        else
          env["SERVER_NAME"] = listener[2]
          env["SERVER_PORT"] = listener[3]
        end
        waited = conn.arrival ? now - conn.arrival : 0.0
        env["margay.queue_time"] = waited.positive? ? waited : 0.0
        env["puma.request_body_wait"] = conn.body_wait || 0.0
        queue_time_header(env, conn) if @cfg[:queue_time_header]
        env["rack.input"] = StringIO.new(conn.input) if conn.input && !conn.input.empty?
        env
      end

      # A fixed value; else the last address of the configured forwarding field (the nearest
      # proxy's: every earlier one is the client's to choose); else the PROXY line's; else the peer.
      def remote_addr(conn)
        return @remote_value.dup if @remote_value

        if @remote_header
          _, value = conn.head.fields.reverse_each.find do |name, _|
            !name.include?("_") && name.downcase.tr("_", "-") == @remote_header
          end
          addr = value && Proxy.forwarded_last(value)
          return addr if addr
        end
        conn.proxy.is_a?(String) && !conn.proxy.empty? ? conn.proxy.dup : conn.addr.dup
      end

      # X-Request-Start: t=<arrival, wall clock, ms> (nginx's format) unless a proxy sent one.
      def queue_time_header(env, conn)
        return if env.key?("HTTP_X_REQUEST_START")

        wall = Process.clock_gettime(Process::CLOCK_REALTIME) - (conn.arrival ? now - conn.arrival : 0)
        env["HTTP_X_REQUEST_START"] = format("t=%.3f", wall)
      end

      def put_field(env, name, value)
        key = ENV_KEYS[name] || env_key(name)
        return unless key

        if env.key?(key) && key != "CONTENT_TYPE"
          env[key] = "#{env[key]}#{key == 'HTTP_COOKIE' ? '; ' : ', '}#{value}"
        else
          env[key] = value.dup
        end
      end

      # The env key of the field +name+; nil for a field the env leaves out.
      def env_key(name)
        case name.downcase
        when "content-length", "transfer-encoding" then nil
        when "content-type" then "CONTENT_TYPE"
        else
          return nil if name.include?("_")

          "HTTP_#{name.upcase.tr('-', '_')}"
        end
      end

      def split_authority(authority)
        if authority.start_with?("[")
          close = authority.index("]") || authority.size
          port = authority[close + 2..] if authority[close + 1] == ":"
          [authority[0..close], port && !port.empty? ? port : nil]
        else
          name, port = authority.split(":", 2)
          [name.to_s, port && !port.empty? ? port : nil]
        end
      end
    end
  end
end
