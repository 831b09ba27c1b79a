preload_app false
