# frozen_string_literal: true

# Diagnostic (root: reads /proc/PID/pagemap's PFNs and /proc/PID/mem): for one process, its
# brk heap and Ruby heap pages, page by page, private (mapped once) or shared, and where the
# Ruby heap pages' own `struct heap_page` (malloc'd, holding the GC's bitmaps that
# every GC writes) lie. Usage: ruby pages.rb PID...
PAGE = 4096
STRUCT_SIZE = 56 + (5 * GC::INTERNAL_CONSTANTS[:HEAP_PAGE_BITMAP_SIZE]) # struct heap_page on 3.1
RUBY_PAGE = GC::INTERNAL_CONSTANTS[:HEAP_PAGE_SIZE] # 16 KiB on Ruby 3.1

def maps(pid)
  File.readlines("/proc/#{pid}/maps").map do |l|
    a, perms, _off, _dev, _ino, name = l.split(" ", 6)
    s, e = a.split("-").map(&:hex)
    { start: s, end: e, perms: perms, name: name.to_s.strip }
  end
end

# [present, exclusive(mapcount 1)] per 4 KiB page of [s, e)
def pagemap(pid, s, e)
  File.open("/proc/#{pid}/pagemap", "rb") do |f|
    raw = f.pread((e - s) / PAGE * 8, s / PAGE * 8)
    raw.unpack("Q*").map { |v| [v[63] == 1, v[56] == 1] }
  end
end

def analyze(pid)
  ms = maps(pid)
  mem = File.open("/proc/#{pid}/mem", "rb")
  structs = [] # addresses of struct heap_page
  bodies = []
  body_priv = 0
  body_total = 0
  ms.each do |m|
    next unless (m[:name].empty? || m[:name] == "[heap]") && m[:perms].start_with?("rw")

    a = (m[:start] + RUBY_PAGE - 1) & ~(RUBY_PAGE - 1)
    while a + RUBY_PAGE <= m[:end]
      ptr = (mem.pread(8, a).unpack1("Q") rescue 0)
      if ptr.positive?
        start = (mem.pread(8, ptr + 32).unpack1("Q") rescue 0)
        if start > a && start < a + RUBY_PAGE
          structs << ptr
          bodies << a
          pm = pagemap(pid, a, a + RUBY_PAGE)
          body_total += pm.count { |p, _| p }
          body_priv += pm.count { |p, x| p && x }
        end
      end
      a += RUBY_PAGE
    end
  end
  heaps = ms.select { |m| m[:name] == "[heap]" }
  pms = heaps.map { |h| pagemap(pid, h[:start], h[:end]) }
  present = pms.sum { |pm| pm.count { |p, _| p } }
  priv = pms.sum { |pm| pm.count { |p, x| p && x } }
  in_heap = structs.count { |p| heaps.any? { |h| p >= h[:start] && p < h[:end] } }
  # every 4 KiB page holding (part of) a struct heap_page, wherever malloc put it
  struct_pages = structs.flat_map { |p| [p / PAGE, (p + STRUCT_SIZE - 1) / PAGE] }.uniq
  flags = struct_pages.map { |pg| pagemap(pid, pg * PAGE, (pg + 1) * PAGE).first }
  sp_priv = flags.count { |p, x| p && x }
  puts format("%-8d ruby pages %4d (structs in brk %d): bodies %5.1f MiB resident, %5.1f private | brk %5.1f MiB resident, " \
              "%5.1f private; pages holding a struct heap_page %d (%.1f MiB), private %d (%.1f MiB)",
              pid, structs.size, in_heap, body_total * 4 / 1024.0, body_priv * 4 / 1024.0, present * 4 / 1024.0,
              priv * 4 / 1024.0, struct_pages.size, struct_pages.size * 4 / 1024.0, sp_priv, sp_priv * 4 / 1024.0)
  return unless ENV["ANON"]

  body_set = bodies.to_h { |b| [b, true] }
  ms.each do |m|
    next unless m[:name].empty? && m[:perms].start_with?("rw")

    pm = pagemap(pid, m[:start], m[:end])
    other = pm.each_index.count { |i| pm[i][0] && pm[i][1] && !body_set[(m[:start] + (i * PAGE)) & ~(RUBY_PAGE - 1)] }
    next if other < 32

    puts format("  anon %x-%x %7d KiB: private outside Ruby pages %d KiB", m[:start], m[:end], (m[:end] - m[:start]) / 1024, other * 4)
  end
end

ARGV.each { |pid| analyze(Integer(pid)) }
