# frozen_string_literal: true

# bench/run.rb workload "upload": the client POSTs 8 MiB; the app reads the whole body
# (in 64 KiB chunks) and answers with the byte count. GET answers 200 too (readiness check).
run lambda { |env|
  input = env["rack.input"]
  size = 0
  if input
    buf = +""
    while input.read(65_536, buf)
      size += buf.bytesize
    end
  end
  body = "#{size}\n"
  [200, { "content-type" => "text/plain", "content-length" => body.bytesize.to_s }, [body]]
}
