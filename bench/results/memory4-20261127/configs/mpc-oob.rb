mold_boot true
prune_bundler true
compact_before_fork true
out_of_band_gc 100
