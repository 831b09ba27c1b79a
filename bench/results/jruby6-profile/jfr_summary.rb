# usage: ruby agg.rb REC.jfr [event] [depth]
require "json"
rec, event, depth = ARGV[0], ARGV[1] || "jdk.ExecutionSample", (ARGV[2] || 1).to_i
json = `jfr print --json --stack-depth 64 --events #{event} #{rec}`
events = JSON.parse(json)["recording"]["events"]
puts "#{events.size} #{event} events"
def name(f)
  m = f["method"]
  t = m["type"]["name"]
  "#{t}.#{m['name']}:#{f['lineNumber']}"
end
def ruby?(f)
  f["method"]["name"].start_with?("RUBY$method$", "RUBY$block$")
end
def rname(f)
  t = f["method"]["type"]["name"].sub(%r{.*/lib/}, "").sub(%r{.*/gems/}, "")
  "#{t}.#{f['method']['name'].sub(/\$__VARARGS__$/, '')}:#{f['lineNumber']}"
end
self_c = Hash.new(0); self_ruby = Hash.new(0); incl_ruby = Hash.new(0); threads = Hash.new(0); states = Hash.new(0)
events.each do |e|
  v = e["values"]
  frames = (v["stackTrace"] || {})["frames"] || []
  th = (v["sampledThread"] || v["eventThread"] || {})["javaName"].to_s.sub(/\d+$/, "N")
  threads[th] += 1
  states[v["state"]] += 1 if v["state"]
  self_c[frames.first(depth).map { |f| name(f) }.join(" < ")] += 1 unless frames.empty?
  r = frames.find { |f| ruby?(f) }
  self_ruby[r ? rname(r) : "(no ruby frame)"] += 1
  frames.select { |f| ruby?(f) }.map { |f| rname(f).sub(/:\d+$/, "") }.uniq.each { |n| incl_ruby[n] += 1 }
end
[["threads", threads], ["states", states], ["top frames", self_c], ["nearest ruby frame", self_ruby], ["ruby inclusive", incl_ruby]].each do |t, h|
  puts "== #{t}"
  h.sort_by { |_, c| -c }.first(t == "ruby inclusive" ? 45 : 30).each { |k, c| printf "%6d %5.1f%%  %s\n", c, 100.0 * c / events.size, k }
end
