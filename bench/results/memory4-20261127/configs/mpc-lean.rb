mold_boot true
prune_bundler true
compact_before_fork true
lean_heap true
