# ruby sim.rb DIR CONNS [THINK_MS]: the Rails probe's run in DIR (bench/results/railstail-probe/run.rb)
# replayed first come, first served with its own service times, two ways:
# - pinned: each worker serves CONNS / workers kept-alive clients of its own (a cluster whose
#   connections stay on their worker, evenly split);
# - one queue: the CONNS clients wait in one queue, and whichever worker's thread frees first
#   takes the oldest request (what moving every waiting request to the first free thread gives).
# A worker's k-th request in the replay takes the k-th service time that worker measured (app
# start to end, in the order its threads took them, plus the median turn between two of its
# requests: write, read the next), on as many threads as served 5 % or more of its requests.
# A client sends its next request THINK_MS (default 0.3) after its response. The first 0.5 s of
# replayed time is left out, as the measured figures leave out nothing but the run's edges.
dir, conns, think = ARGV[0], Integer(ARGV[1]), Float(ARGV[2] || 0.3) / 1000
meta = File.read(File.join(dir, "meta.txt"))
t0 = meta[/^t0 (\S+)/, 1].to_f
t1 = meta[/^t1 (\S+)/, 1].to_f
def pct(a, p) = a.sort[(a.size * p).floor.clamp(0, a.size - 1)]
def ratio(a) = pct(a, 0.99) / (a.sum / a.size)

workers = Dir.glob(File.join(dir, "[0-9]*.log")).map do |f|
  rs = File.readlines(f).reject { _1.start_with?("GC ") }.map { |l| x = l.split; { arr: x[1].to_f, st: x[3].to_f, en: x[4].to_f, thr: x[13] } }
  rs.select! { |r| r[:arr] >= t0 && r[:en] <= t1 }
  rs.sort_by! { _1[:st] }
  # the turn: from a response's end to the next start, when that next request had already arrived
  turns = rs.each_cons(2).filter_map { |a, b| b[:st] - a[:en] if b[:arr] < a[:en] && b[:st] > a[:en] }
  turn = turns.empty? ? 0.0 : pct(turns, 0.5)
  threads = rs.group_by { _1[:thr] }.count { |_, v| v.size >= 0.05 * rs.size }
  { recs: rs, svc: rs.map { _1[:en] - _1[:st] + turn }, turn: turn, threads: [threads, 1].max }
end
workers.reject! { _1[:recs].empty? }
abort "no records in #{dir}" if workers.empty?

measured = workers.flat_map { |w| w[:recs].map { _1[:en] - _1[:arr] } }
# Replays: [latency, start time of the request] of every request served.
def replay(queues_of, workers, clients_of, think)
  lat = []
  free = workers.map { |w| Array.new(w[:threads], 0.0) }
  next_svc = Array.new(workers.size, 0)
  queues_of.each do |ws|
    arrivals = Array.new(clients_of.call(ws)) { |i| i * 0.0001 }
    loop do
      # the free thread that frees first among these workers, and the oldest waiting client
      w, k = ws.flat_map { |wi| free[wi].each_index.map { |ki| [wi, ki] } }.min_by { |wi, ki| free[wi][ki] }
      break if next_svc[w] >= workers[w][:svc].size

      c = arrivals.each_index.min_by { arrivals[_1] }
      start = [arrivals[c], free[w][k]].max
      done = start + workers[w][:svc][next_svc[w]]
      next_svc[w] += 1
      free[w][k] = done
      lat << [done - arrivals[c], start]
      arrivals[c] = done + think
    end
  end
  lat.select { _1[1] >= 0.5 }.map(&:first)
end
pinned = replay(workers.each_index.map { [_1] }, workers, ->(_) { conns / workers.size }, think)
one = replay([workers.each_index.to_a], workers, ->(_) { conns }, think)
wrk = File.read(File.join(dir, "wrk.txt"))
puts "#{File.basename(dir)}: #{workers.size} workers, #{conns} connections, #{measured.size} requests; " \
     "threads #{workers.map { _1[:threads] }.join('/')}, turn #{workers.map { (1000 * _1[:turn]).round(2) }.join('/')} ms, " \
     "service p50/p99 #{workers.map { |w| "#{(1000 * pct(w[:svc], 0.5)).round(1)}/#{(1000 * pct(w[:svc], 0.99)).round(1)}" }.join(' ')} ms"
puts format("  wrk %s, p99 %s", wrk[/Requests\/sec:\s+(\S+)/, 1], wrk[/99%\s+(\S+)/, 1])
puts format("  p99/mean: measured (server side) %.2f | replayed pinned %.2f | replayed one queue %.2f",
            ratio(measured), ratio(pinned), ratio(one))
puts format("  mean ms: measured %.1f | pinned %.1f | one queue %.1f",
            1000 * measured.sum / measured.size, 1000 * pinned.sum / pinned.size, 1000 * one.sum / one.size)
