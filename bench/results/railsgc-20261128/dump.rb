# frozen_string_literal: true

# dump.rb DUMP [N]: from gcprobe.ru's ObjectSpace.dump_all (GC_PROBE_TRACE=1), the objects
# allocated while tracing, old against young, and the N allocation sites (file:line, type)
# with the most old objects: what was promoted during the window.
require "json"

old = Hash.new(0)
young = Hash.new(0)
File.foreach(ARGV[0]) do |line|
  next unless line.include?('"file":')

  o = JSON.parse(line)
  key = "#{o['file'].sub(%r{.*/gems/}, '')}:#{o['line']} #{o['type']}"
  (o.dig("flags", "old") ? old : young)[key] += 1
end
puts "traced objects: #{old.values.sum} old, #{young.values.sum} young (alive or unswept at the dump)"
old.sort_by { |_, n| -n }.first((ARGV[1] || 40).to_i).each { |k, n| puts format("%7d  %s", n, k) }
