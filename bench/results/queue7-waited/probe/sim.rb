# Closed-loop FIFO simulation: clients per queue, threads per queue, service times drawn from the
# measured app times (+ a fixed engine overhead), client turnaround z.
dir = ARGV[0]
recs = Dir.glob(File.join(dir, "[0-9]*.log")).flat_map { |f| File.readlines(f).map { |l| x = l.split; [x[3].to_f + x[4].to_f, x[8].to_f] } }
svc = recs.map { |a, g| a + g } # app time + take->app (GVL, env)
def pct(a, p) = a.sort[(a.size * p).floor.clamp(0, a.size - 1)]
def sim(svc, queues, threads, z, n = 200_000, seed = 1)
  rng = Random.new(seed)
  lat = []
  queues.each do |clients|
    free = Array.new(threads, 0.0) # when each thread frees
    # events: clients' arrival times
    arr = Array.new(clients) { |i| i * 0.0001 }
    (n / queues.size).times do
      i = arr.each_with_index.min_by(&:first)[1]  # FIFO: earliest arrival next
      a = arr[i]
      k = free.each_with_index.min_by(&:first)[1]
      start = [a, free[k]].max
      done = start + svc[rng.rand(svc.size)]
      free[k] = done
      lat << done - a
      arr[i] = done + z
    end
  end
  lat = lat.drop(lat.size / 20)
  m = lat.sum / lat.size
  format("mean %.1f p99 %.1f p99/mean %.2f", m * 1000, pct(lat, 0.99) * 1000, pct(lat, 0.99) / m)
end
printf("service: mean %.2f p99 %.2f ms\n", 1000 * svc.sum / svc.size, 1000 * pct(svc, 0.99))
puts "4 x 16 clients, 5 threads: #{sim(svc, [16, 16, 16, 16], 5, 0.0003)}"
puts "15,17,16,16:              #{sim(svc, [15, 17, 16, 16], 5, 0.0003)}"
puts "one queue, 64 clients, 20 threads: #{sim(svc, [64], 20, 0.0003)}"
const = [svc.sum / svc.size]
puts "constant service 4x16: #{sim(const, [16, 16, 16, 16], 5, 0.0003)}"
