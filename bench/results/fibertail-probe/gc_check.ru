# frozen_string_literal: true

# bench/apps/io.ru (10 ms sleep + ~2 KB JSON) that tallies why each full GC ran
# (GC.latest_gc_info(:major_by), looked at after each sleep); GET /gc answers GC.stat's figures.
require "json"
ROWS = Array.new(50) { |i| { "id" => i, "name" => "item #{i}", "price" => i * 3 } }.freeze
MAJ = Hash.new(0)
SEEN = [GC.stat(:major_gc_count)]
run lambda { |env|
  if env["PATH_INFO"] == "/gc"
    s = GC.stat
    next [200, {}, [JSON.generate(major_by: MAJ, major: s[:major_gc_count], minor: s[:minor_gc_count], time: s[:time], old: s[:old_objects], shady: s[:uncollectible_wb_unprotected_objects], shady_limit: s[:uncollectible_wb_unprotected_objects_limit], old_limit: s[:old_objects_limit], oldmalloc: s[:oldmalloc_increase_bytes], oldmalloc_limit: s[:oldmalloc_increase_bytes_limit], live: s[:heap_live_slots])]]
  end
  sleep 0.010
  m = GC.stat(:major_gc_count)
  if m != SEEN[0]
    SEEN[0] = m
    MAJ[GC.latest_gc_info(:major_by).to_s] += 1
  end
  body = JSON.generate(ROWS.map { |r| r.merge("total" => r["price"] * 2) })
  [200, { "content-type" => "application/json" }, [body]]
}
