# frozen_string_literal: true

require "json"

module Margay
  module Corpus
    # The apps the conformance corpus runs against (internal to the tests).
    module Apps
      # Env keys the echo app reports, besides every HTTP_* key.
      ECHO_KEYS = %w[REQUEST_METHOD PATH_INFO QUERY_STRING REQUEST_URI SERVER_NAME SERVER_PORT SERVER_PROTOCOL
                     CONTENT_LENGTH CONTENT_TYPE REMOTE_ADDR].freeze

      # Bytes to JSON text without loss: each byte becomes the code point of
      # the same value (ISO-8859-1), so NUL, CR and obs-text survive the trip.
      def self.wire_string(value)
        value.to_s.b.force_encoding(Encoding::ISO_8859_1).encode(Encoding::UTF_8)
      end

      # The inverse of .wire_string.
      def self.from_wire(text)
        text.encode(Encoding::ISO_8859_1).b
      end

      # 200 with a JSON object of the interesting env keys and the body read
      # from rack.input ("body", null when there is no rack.input). Lint-clean:
      # a HEAD request gets the same headers and an empty body.
      ECHO = lambda do |env|
        seen = {}
        env.each do |key, value|
          seen[key] = wire_string(value) if ECHO_KEYS.include?(key) || key.start_with?("HTTP_")
        end
        input = env["rack.input"]
        seen["body"] = input && wire_string(input.read)
        json = JSON.generate(seen)
        headers = { "content-type" => "application/json", "content-length" => json.bytesize.to_s }
        [200, headers, env["REQUEST_METHOD"] == "HEAD" ? [] : [json]]
      end

      # A body object that is not an Array, so the server streams it.
      class EachBody
        def initialize(chunks, raise_after: nil, raise_on_close: false)
          @chunks = chunks
          @raise_after = raise_after
          @raise_on_close = raise_on_close
        end

        def each
          @chunks.each_with_index do |chunk, i|
            raise "corpus: body#each failed on purpose" if @raise_after == i

            yield chunk
          end
          raise "corpus: body#each failed on purpose" if @raise_after == @chunks.size
        end

        def close
          raise "corpus: body#close failed on purpose" if @raise_on_close
        end
      end

      def self.plain(body = "ok", extra = {})
        [200, { "content-type" => "text/plain" }.merge(extra), [body]]
      end

      # Misbehaving routes, selected by the first path segment ("/header_crlf").
      # Each breaks one rule of the Rack SPEC or of HTTP; the server must not
      # pass the damage on to the client.
      ROUTES = {
        header_crlf: -> { plain("ok", "x-bad" => "a\r\nx-injected: 1") },
        header_lf: -> { plain("ok", "x-bad" => "a\nx-injected: 1") },
        header_cr: -> { plain("ok", "x-bad" => "a\rx-injected: 1") },
        header_nul: -> { plain("ok", "x-nul" => "a\0b") },
        header_array_crlf: -> { plain("ok", "set-cookie" => ["a=1", "b=2\r\nx-injected: 1"]) },
        set_cookie_array: -> { plain("ok", "set-cookie" => %w[a=1 b=2]) },
        header_name_space: -> { plain("ok", "bad name" => "v") },
        header_name_colon: -> { plain("ok", "x-split:x-more" => "v") },
        header_name_empty: -> { plain("ok", "" => "v") },
        header_name_crlf: -> { plain("ok", "x-a\r\nx-injected" => "1") },
        status_string: -> { ["200", { "content-type" => "text/plain" }, ["ok"]] },
        status_nil: -> { [nil, { "content-type" => "text/plain" }, ["ok"]] },
        status_float: -> { [200.0, { "content-type" => "text/plain" }, ["ok"]] },
        status_99: -> { [99, { "content-type" => "text/plain" }, ["ok"]] },
        status_1000: -> { [1000, { "content-type" => "text/plain" }, ["ok"]] },
        status_999: -> { [999, { "content-type" => "text/plain" }, ["ok"]] },
        app_raises: -> { raise "corpus: app failed on purpose" },
        app_garbage: -> { "not a rack response" },
        each_raises: -> { [200, { "content-type" => "text/plain" }, EachBody.new(["never"], raise_after: 0)] },
        # 1 MiB of output, well past the 64 KiB response buffer, then a failure.
        each_raises_late: lambda {
          [200, { "content-type" => "text/plain" }, EachBody.new(Array.new(16) { "z" * 65_536 }, raise_after: 16)]
        },
        close_raises: -> { [200, { "content-type" => "text/plain" }, EachBody.new(["complete"], raise_on_close: true)] },
        cl_too_large: -> { plain("abc", "content-length" => "10") },
        cl_too_small: -> { plain("abcSMUGGLED", "content-length" => "3") },
        cl_invalid: -> { plain("abc", "content-length" => "abc") },
        rack_headers: -> { plain("ok", "rack.session.id" => "secret", "rack.internal" => "x", "x-kept" => "yes") },
        no_content_body: -> { [204, { "content-length" => "18" }, ["should-not-be-sent"]] },
        not_modified_body: -> { [304, { "content-type" => "text/plain" }, ["should-not-be-sent"]] },
        stream_body: -> { [200, { "content-type" => "text/plain" }, EachBody.new(%w[one -two -three])] },
        head_body: -> { plain("should-not-be-sent", "content-length" => "18") },
        head_stream: -> { [200, { "content-type" => "text/plain" }, EachBody.new(["streamed-should-not-be-sent"])] },
        # Never touches rack.input: the server must skip the unread body itself.
        ignore_body: -> { plain("ignored") }
      }.freeze

      # Routes that need the env.
      ENV_ROUTES = {
        early_hints_crlf: lambda { |env|
          begin
            env["rack.early_hints"]&.call({ "link" => "</a.css>; rel=preload\r\nx-injected: 1" })
          rescue StandardError
            nil # refusing the hint is fine; sending it is not
          end
          plain
        },
        # Reads two bytes of the body and leaves the rest.
        partial_read: lambda { |env|
          env["rack.input"]&.read(2)
          plain("partial")
        },
        early_hints_valid: lambda { |env|
          env["rack.early_hints"]&.call({ "link" => "</a.css>; rel=preload; as=style" })
          plain
        }
      }.freeze

      # The app of the server without Rack::Lint: a misbehaving route when
      # the first path segment names one, the echo app otherwise.
      MISBEHAVING = lambda do |env|
        name = env["PATH_INFO"].to_s.delete_prefix("/").to_sym
        if (route = ROUTES[name])
          route.call
        elsif (route = ENV_ROUTES[name])
          route.call(env)
        else
          ECHO.call(env)
        end
      end

      def self.route?(name)
        ROUTES.key?(name) || ENV_ROUTES.key?(name)
      end
    end
  end
end
