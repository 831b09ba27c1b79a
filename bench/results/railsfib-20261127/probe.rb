# frozen_string_literal: true

# railsfib probe: loaded by RUBYOPT=-r/tmp/railsfib/probe.rb into every Ruby process; active only
# in a Margay server (exe/margay). Every 0.5 s one TSV line to /tmp/railsfib/out/probe-PID.tsv:
# wall, process CPU, GC.stat figures, requests started/finished (ActiveSupport::Notifications),
# the AR pool's stat. Every 4th line also counts live Fiber objects (a heap walk).
if $PROGRAM_NAME.end_with?("exe/margay") || (ARGV[0] == "exec" && ARGV[1].to_s.end_with?("exe/margay"))
  module RailsfibProbe
    @started = 0
    @finished = 0
    @pool_wait_s = 0.0
    class << self
      attr_accessor :started, :finished
    end
    KEYS = %i[count time minor_gc_count major_gc_count total_allocated_objects heap_live_slots old_objects
              old_objects_limit remembered_wb_unprotected_objects remembered_wb_unprotected_objects_limit
              malloc_increase_bytes oldmalloc_increase_bytes].freeze

    def self.hook_rails
      ActiveSupport::Notifications.subscribe("start_processing.action_controller") { |*| @started += 1 }
      ActiveSupport::Notifications.subscribe("process_action.action_controller") { |*| @finished += 1 }
    end

    def self.line(n)
      g = GC.stat
      pool = begin
        s = ActiveRecord::Base.connection_pool.stat
        "#{s[:size]}\t#{s[:connections]}\t#{s[:busy]}\t#{s[:idle]}\t#{s[:waiting]}"
      rescue StandardError, NameError
        "-\t-\t-\t-\t-"
      end
      fibers = (n % 4).zero? ? ObjectSpace.each_object(Fiber).count : -1
      threads = Thread.list.size
      major_by = GC.latest_gc_info(:major_by)
      [format("%.3f", Process.clock_gettime(Process::CLOCK_MONOTONIC)),
       format("%.4f", Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)),
       *KEYS.map { |k| g[k] }, @started, @finished, pool, fibers, threads, major_by.inspect].join("\t")
    end

    Thread.new do
      Thread.current.name = "railsfib-probe"
      dir = "/tmp/railsfib/out"
      Dir.mkdir(dir) unless Dir.exist?(dir)
      path = File.join(dir, "probe-#{Process.pid}.tsv")
      hooked = false
      File.open(path, "w") do |f|
        f.sync = true
        f.puts %w[mono cpu].concat(KEYS.map(&:to_s)).concat(%w[started finished pool_size pool_conns pool_busy pool_idle pool_waiting fibers threads major_by]).join("\t")
        n = 0
        loop do
          sleep 0.5
          if !hooked && defined?(::Rails) && Rails.respond_to?(:application) && Rails.application&.initialized?
            hook_rails
            hooked = true
          end
          f.puts line(n)
          n += 1
        end
      end
    rescue StandardError => e
      warn "railsfib probe: #{e.class}: #{e.message}"
    end
  end
end
