lean_heap true
