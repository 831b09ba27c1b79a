# frozen_string_literal: true

# The app of the slow-client scenario (bench/core.rb, bench/slow_clients.rb):
#   GET /big  -> a 16 MiB text/plain body (one preallocated frozen string)
#   anything else -> the 13-byte "Hello, World!" of hello.ru
BIG_BODY = ("x" * (16 * 1024 * 1024)).freeze
BIG_LENGTH = BIG_BODY.bytesize.to_s.freeze
HELLO = "Hello, World!"

run lambda { |env|
  if env["PATH_INFO"] == "/big"
    [200, { "content-type" => "text/plain", "content-length" => BIG_LENGTH }, [BIG_BODY]]
  else
    [200, { "content-type" => "text/plain", "content-length" => "13" }, [HELLO]]
  end
}
