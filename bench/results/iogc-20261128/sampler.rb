# frozen_string_literal: true

# sampler.rb PGID CONTROL_PORT OUT WRK_PID: every 100 ms until killed, one JSON line to OUT:
# wall time; the machine's CPU jiffies (/proc/stat: busy, all); per process of the server's
# group and wrk: CPU ticks (utime+stime) and the run-queue wait of all its threads (ns, the
# second field of /proc/PID/task/TID/schedstat: ready to run, no CPU); and the control app's
# GET /queue (per worker: connections, busy and waiting threads, waiting requests, oldest wait);
# "others": every other process whose CPU ticks grew since the last sample, pid => [comm, ticks];
# "cpuf": the machine's user, nice, system, irq, softirq, steal jiffies.
require "json"
require "net/http"

pgid, control, out, wrk = ARGV[0].to_i, ARGV[1], ARGV[2], ARGV[3].to_i
uri = URI("http://127.0.0.1:#{control}/queue")
http = Net::HTTP.new(uri.host, uri.port)
http.start
def ticks(pid)
  head, tail = File.read("/proc/#{pid}/stat").split(") ", 2)
  f = tail.split
  [f[2].to_i, f[11].to_i + f[12].to_i, head[/\((.*)/, 1]]
rescue SystemCallError
  nil
end

def run_delay(pid)
  Dir["/proc/#{pid}/task/*/schedstat"].sum { |p| File.read(p).split[1].to_i }
rescue SystemCallError
  0
end

prev = {}
File.open(out, "w") do |o|
  loop do
    others = {}
    t = Process.clock_gettime(Process::CLOCK_REALTIME)
    cpu = File.foreach("/proc/stat").first.split.drop(1).map(&:to_i)
    procs = {}
    Dir.glob("/proc/[0-9]*").each do |d|
      pid = File.basename(d).to_i
      pg, tk, comm = ticks(pid)
      next unless pg

      unless pg == pgid || pid == wrk
        seen = prev[pid] || (prev.empty? ? tk : 0) # a process new since the last sample: all its ticks
        others[pid] = [comm, tk - seen] if tk > seen
        prev[pid] = tk
        next
      end

      procs[pid] = [tk, run_delay(pid)]
    end
    q = begin
      JSON.parse(http.get(uri.request_uri).body)
    rescue StandardError
      nil
    end
    o.puts(JSON.generate("t" => t.round(3), "cpu" => [cpu.values_at(0, 1, 2, 5, 6, 7).sum, cpu.take(8).sum], "procs" => procs, "others" => others, "cpuf" => cpu.values_at(0, 1, 2, 5, 6, 7),
                         "queue" => q && q["workers"], "lq" => q && q["listen_queue"]))
    o.flush
    sleep 0.1
  end
end
