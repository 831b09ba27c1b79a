# frozen_string_literal: true

require "test_helper"
require "tmpdir"
require_relative "../support/ports"

# margay.queue_time behind the real nginx on loopback, nginx adding X-Request-Start: t=${msec}
# (the stamp APMs read): the arrival Margay measures (the app call less margay.queue_time) is
# within 5 ms of nginx's stamp, for requests served at once and for one that waited behind a
# slow request for the only thread. (0.2-1.2 ms on a quiet machine: ${msec} is truncated to the
# millisecond and read from nginx's cached clock before it forwards; a busy machine delays that
# forwarding by a few ms.)
class QueueTimeNginxTest < Minitest::Test
  include Margay::TestHelper
  include Margay::TestPorts

  NGINX = "/usr/sbin/nginx"

  def setup
    skip "no nginx at #{NGINX}" unless File.executable?(NGINX)
    @calls = Queue.new
  end

  def app
    calls = @calls
    lambda do |env|
      called_at = Time.now.to_f
      calls << [env["PATH_INFO"], env["margay.queue_time"], env["HTTP_X_REQUEST_START"], called_at]
      sleep 0.5 if env["PATH_INFO"] == "/slow"
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
  end

  def nginx_conf(port, upstream)
    <<~CONF
      daemon off;
      master_process off;
      worker_processes 1;
      pid nginx.pid;
      error_log stderr warn;
      events { worker_connections 64; }
      http {
        access_log off;
        client_body_temp_path client_body;
        proxy_temp_path proxy;
        fastcgi_temp_path fastcgi;
        uwsgi_temp_path uwsgi;
        scgi_temp_path scgi;
        upstream margay { server 127.0.0.1:#{upstream}; keepalive 4; }
        server {
          listen 127.0.0.1:#{port};
          location / {
            proxy_pass http://margay;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Request-Start "t=${msec}";
          }
        }
      }
    CONF
  end

  def with_nginx(upstream)
    Dir.mktmpdir("margay-nginx-") do |dir|
      port = free_port
      File.write(File.join(dir, "nginx.conf"), nginx_conf(port, upstream))
      pid = Process.spawn(NGINX, "-p", "#{dir}/", "-c", "#{dir}/nginx.conf", "-e", "stderr",
                          out: File::NULL, err: File.join(dir, "err.log"))
      begin
        wait_listening(port, dir)
        yield port
      ensure
        Process.kill(:TERM, pid)
        Process.wait(pid)
      end
    end
  end

  def wait_listening(port, dir)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
    begin
      TCPSocket.new("127.0.0.1", port).close
    rescue Errno::ECONNREFUSED
      flunk "nginx did not listen: #{File.read(File.join(dir, 'err.log'))}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.05
      retry
    end
  end

  # [queue time, Margay's arrival less nginx's stamp] of the next call, for +path+.
  def next_call(path)
    got, queue_time, stamp, called_at = pop_within(@calls)
    assert_equal path, got
    assert_match(/\At=\d+\.\d{3}\z/, stamp, "nginx's stamp, kept (queue_time_header adds none then)")
    [queue_time, called_at - queue_time - Float(stamp.delete_prefix("t="))]
  end

  def test_arrival_within_5_ms_of_nginx_msec
    with_server(app, min_threads: 1, max_threads: 1, queue_time_header: true) do |_host, upstream, _server|
      with_nginx(upstream) do |port|
        assert_match(%r{\AHTTP/1.1 200}, raw_get(port, "/warm")) # receive timestamps on
        next_call("/warm")
        5.times do |i|
          assert_match(%r{\AHTTP/1.1 200}, raw_get(port, "/at-once-#{i}"))
          _queue_time, offset = next_call("/at-once-#{i}")
          assert_in_delta 0.002, offset, 0.0035, "request #{i}: Margay's arrival against nginx's ${msec}"
        end
        slow = Thread.new { raw_get(port, "/slow") }
        assert_equal "/slow", pop_within(@calls)[0]
        assert_match(%r{\AHTTP/1.1 200}, raw_get(port, "/queued"))
        queue_time, offset = next_call("/queued")
        assert_operator queue_time, :>, 0.3, "it waited for the slow request"
        assert_in_delta 0.002, offset, 0.0035, "the queued request's arrival against nginx's ${msec}"
        assert_match(%r{\AHTTP/1.1 200}, slow.value)
      end
    end
  end
end
