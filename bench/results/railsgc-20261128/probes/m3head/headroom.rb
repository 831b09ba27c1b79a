before_worker_boot do
  s = GC.stat
  target = (s[:heap_live_slots] / 0.6).ceil
  n = target - s[:heap_live_slots]
  if n > 0
    GC.disable
    Array.new(n) { Object.new }
    GC.enable
  end
  warn "headroom: live #{s[:heap_live_slots]} avail #{s[:heap_available_slots]} -> #{GC.stat(:heap_available_slots)}"
end
