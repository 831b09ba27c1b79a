# frozen_string_literal: true

# Feature detection for the native hot path, plus opt-in debug and sanitizer builds:
#   MARGAY_DEBUG=1     -O0 -g3, assertions on
#   MARGAY_SANITIZE=1  AddressSanitizer + UndefinedBehaviorSanitizer (run Ruby with
#                      LD_PRELOAD=$(gcc -print-file-name=libasan.so) so the runtime loads first)
require "mkmf"

append_cflags("-std=gnu11")
append_cflags("-fvisibility=hidden")
append_cflags("-Wall")
append_cflags("-Wextra")
append_cflags("-Wno-unused-parameter")
append_cflags("-Wno-missing-field-initializers")

if ENV["MARGAY_DEBUG"] == "1" || ENV["MARGAY_SANITIZE"] == "1"
  $CFLAGS = $CFLAGS.gsub(/-O\d/, "") # rubocop:disable Style/GlobalVars
  append_cflags("-O0")
  append_cflags("-g3")
  $defs << "-DMG_DEBUG=1" # rubocop:disable Style/GlobalVars
else
  append_cflags("-O2")
  $defs << "-DNDEBUG" # rubocop:disable Style/GlobalVars
end

if ENV["MARGAY_SANITIZE"] == "1"
  %w[-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined].each do |flag|
    append_cflags(flag)
    append_ldflags(flag)
  end
  # Ruby raises with a longjmp that ASan does not see, leaving our frames' stack
  # redzones poisoned; check the heap (where our buffers live) and not the stack.
  $CFLAGS << " --param asan-stack=0" # rubocop:disable Style/GlobalVars
end

# Linux: epoll is the default event backend; poll(2) is always built (portable, and tested).
have_header("sys/epoll.h") && have_func("epoll_create1", "sys/epoll.h")
have_header("sys/eventfd.h") && have_func("eventfd", "sys/eventfd.h")
have_func("accept4", %w[sys/types.h sys/socket.h])
have_header("sys/sendfile.h") && have_func("sendfile", "sys/sendfile.h")
have_func("pipe2", "unistd.h")
have_header("sys/prctl.h") # PR_SET_CHILD_SUBREAPER for the cluster master
have_func("memmem", "string.h")
have_func("rb_thread_call_without_gvl", "ruby/thread.h") or abort("rb_thread_call_without_gvl is required")
have_const("O_TMPFILE", "fcntl.h")

create_makefile("margay/margay_native")
