mold_boot true
