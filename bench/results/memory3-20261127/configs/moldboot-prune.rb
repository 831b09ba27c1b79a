mold_boot true
prune_bundler true
