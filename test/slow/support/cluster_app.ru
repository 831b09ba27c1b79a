# frozen_string_literal: true

# The app the cluster integration tests serve through the real executable.
$stdout.sync = true
run lambda { |env|
  if env["PATH_INFO"] == "/slow"
    puts "slow request in #{Process.pid}"
    sleep 5
  end
  [200, { "content-type" => "text/plain" }, [env["rack.input"].read.bytesize.to_s]]
}
