# frozen_string_literal: true

# The app the single-mode lifecycle tests serve through the real executable.
$stdout.sync = true
puts "APP loaded in #{Process.pid}"
run lambda { |env|
  case env["PATH_INFO"]
  when "/slow"
    puts "slow request in #{Process.pid}"
    sleep 1.5
  when "/boom"
    raise "boom"
  when "/say" # a line on stdout and one on stderr
    puts "app stdout #{env['QUERY_STRING']}"
    warn "app stderr #{env['QUERY_STRING']}"
  end
  [200, { "content-type" => "text/plain" }, ["#{Process.pid} #{Dir.pwd}"]]
}
