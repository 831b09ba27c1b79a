# Trace-driven: per worker, the k-th request dispatched gets the k-th measured service time (in take order).
dir = ARGV[0]; clients = (ARGV[1] || 16).to_i
def pct(a, p) = a.sort[(a.size * p).floor.clamp(0, a.size - 1)]
lat = []
Dir.glob(File.join(dir, "[0-9]*.log")).each do |f|
  rs = File.readlines(f).map { |l| x = l.split; [x[1].to_f + x[2].to_f, x[3].to_f + x[4].to_f + x[8].to_f] }.sort
  svc = rs.map(&:last)
  free = Array.new(5, 0.0); arr = Array.new(clients) { |i| i * 0.0001 }
  svc.each do |s|
    i = arr.each_with_index.min_by(&:first)[1]; a = arr[i]
    k = free.each_with_index.min_by(&:first)[1]
    done = [a, free[k]].max + s
    free[k] = done; lat << done - a; arr[i] = done + 0.0003
  end
end
lat = lat.drop(200)
m = lat.sum / lat.size
printf("trace-driven FIFO %d clients x 5 threads per worker: mean %.1f p99 %.1f p99/mean %.2f\n", clients, 1000 * m, 1000 * pct(lat, 0.99), pct(lat, 0.99) / m)
