# frozen_string_literal: true

# The app the cluster integration tests serve through the real executable.
$stdout.sync = true
Signal.trap("HUP") { puts "HUP in #{Process.pid}" } # an app that reopens its logs
run lambda { |env|
  case env["PATH_INFO"]
  when "/slow"
    puts "slow request in #{Process.pid}"
    sleep 5
  when "/pid"
    return [200, { "content-type" => "text/plain" }, [Process.pid.to_s]]
  when "/queue_time"
    return [200, { "content-type" => "text/plain" }, [env["margay.queue_time"].inspect]]
  when "/second" # a 1 s request that says where it ran (its query names it)
    puts "second #{env["QUERY_STRING"]} in #{Process.pid}"
    sleep 1
    return [200, { "content-type" => "text/plain" }, [Process.pid.to_s]]
  when "/slow_in" # sleeps only in the worker whose pid is the query
    sleep 5 if env["QUERY_STRING"].to_i == Process.pid
  when "/stuck" # a request that ignores request_timeout's interrupt
    Thread.handle_interrupt(Margay::RequestTimeout => :never) { sleep 8 }
  end
  [200, { "content-type" => "text/plain" }, [env["rack.input"].read.bytesize.to_s]]
}
