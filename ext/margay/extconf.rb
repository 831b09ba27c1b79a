# frozen_string_literal: true

# Feature detection for the native hot path, plus opt-in debug and sanitizer builds:
#   MARGAY_DEBUG=1     -O0 -g3, and assert() on: the ownership invariants of core/ (a
#                      connection is armed, completed or forgotten only by its owner, and a
#                      slot is reused only once it is free) abort the process when broken
#   MARGAY_SANITIZE=1  the same, plus AddressSanitizer + UndefinedBehaviorSanitizer (run Ruby
#                      with LD_PRELOAD=$(gcc -print-file-name=libasan.so) so the runtime loads first)
require "mkmf"

# The sources live in folders by layer (http/, ev/, core/, ruby/; see margay.c). Every C file
# under them is built; fuzz/ holds the libFuzzer harnesses (rakelib/fuzz.rake), not the extension.
# Objects mirror the folders (core/engine.o, ruby/engine.o): make finds each source through the
# $(srcdir) entry of VPATH, and includes name the folder ("core/conn.h") from -I$(srcdir).
sources = Dir.glob("**/*.c", base: __dir__).reject { |f| f.start_with?("fuzz/") }.sort
folders = sources.map { |f| File.dirname(f) }.uniq - ["."]
$srcs = sources.map { |f| File.join($srcdir, f) } # rubocop:disable Style/GlobalVars
$objs = sources.map { |f| f.sub(/\.c\z/, ".o") } # rubocop:disable Style/GlobalVars
FileUtils.mkdir_p(folders) # in the build directory, where make writes the objects
$cleanfiles.concat(folders.map { |dir| "#{dir}/*.o" }) # rubocop:disable Style/GlobalVars

# Ruby's own headers are system headers to us: -Wextra judges our code, not theirs (they have
# unused parameters, which would also make mkmf reject -Wextra altogether).
$INCFLAGS = $INCFLAGS.gsub(/-I(\$\((?:arch_)?hdrdir\)\S*)/, '-isystem \\1') # rubocop:disable Style/GlobalVars

append_cflags("-std=gnu11")
append_cflags("-fvisibility=hidden")
append_cflags("-Wall")
append_cflags("-Wextra")
append_cflags("-Wno-missing-field-initializers")
# ruby.h turns on the GNU extensions (accept4, O_TMPFILE, ...); core/ and http/ do not include
# it, so the build does, for every unit alike.
$defs << "-D_GNU_SOURCE=1" # rubocop:disable Style/GlobalVars

if ENV["MARGAY_DEBUG"] == "1" || ENV["MARGAY_SANITIZE"] == "1"
  $CFLAGS = $CFLAGS.gsub(/-O\d/, "") # rubocop:disable Style/GlobalVars
  append_cflags("-O0")
  append_cflags("-g3")
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
have_header("sys/prctl.h") # PR_SET_CHILD_SUBREAPER for the cluster master
have_func("rb_thread_call_without_gvl", "ruby/thread.h") or abort("rb_thread_call_without_gvl is required")

# TLS (core/tls.c, core/tls_ctx.c) with OpenSSL 1.1.1 or later (libssl-dev on Debian). Without it the extension
# still builds, Margay::Native::TLS is false and a TLS bind refuses to start. MARGAY_NO_TLS=1
# builds without it on purpose (how that refusal is tested by hand).
def openssl_found?
  return false if ENV["MARGAY_NO_TLS"] == "1"

  (pkg_config("openssl") || (have_library("crypto", "CRYPTO_malloc") && have_library("ssl", "SSL_new"))) &&
    have_header("openssl/ssl.h") &&
    try_compile(<<~C)
      #include <openssl/ssl.h>
      #if OPENSSL_VERSION_NUMBER < 0x10101000L
      #error OpenSSL 1.1.1 or later is needed
      #endif
      int main(void) { return SSL_CTX_set_ciphersuites(0, "") + SSL_read_ex(0, 0, 0, 0); }
    C
end
if openssl_found?
  $defs << "-DMG_HAVE_TLS=1" # rubocop:disable Style/GlobalVars
else
  message "margay: built without OpenSSL: TLS binds will refuse to start\n"
end

# HTTP/2 (core/h2.c) with libnghttp2 1.52 or later (libnghttp2-dev on Debian). Without it the
# extension still builds, Margay::Native::H2 is false and an http2 bind refuses to start.
# MARGAY_NO_H2=1 builds without it on purpose.
def nghttp2_found?
  return false if ENV["MARGAY_NO_H2"] == "1"

  (pkg_config("libnghttp2") || have_library("nghttp2", "nghttp2_session_server_new2")) &&
    have_header("nghttp2/nghttp2.h") &&
    try_compile(<<~C)
      #include <nghttp2/nghttp2.h>
      #if NGHTTP2_VERSION_NUM < 0x013400
      #error nghttp2 1.52 or later is needed
      #endif
      int main(void) { return (int)nghttp2_session_mem_send(0, 0); }
    C
end
if nghttp2_found?
  $defs << "-DMG_HAVE_H2=1" # rubocop:disable Style/GlobalVars
else
  message "margay: built without libnghttp2: http2 binds will refuse to start\n"
end

create_makefile("margay/margay_native")

# mkmf knows the headers of the top folder only: make every object depend on every header, so
# that changing one rebuilds what includes it (the extension is small; precision is not needed).
headers = Dir.glob("**/*.h", base: __dir__).reject { |f| f.start_with?("fuzz/") }.sort
File.open("Makefile", "a") do |makefile|
  makefile.puts "", "$(OBJS): #{headers.map { |h| "$(srcdir)/#{h}" }.join(" ")}"
end
