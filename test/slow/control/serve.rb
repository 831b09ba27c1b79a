# frozen_string_literal: true

# Test support (internal): a Margay process built from settings in
# MARGAY_CTL_SETTINGS (JSON; "plugins" a list of names), run by the slow
# control tests with either bundle (Margay's, or bench/Gemfile with the puma
# gem and real plugins). Until the config file names these settings, this is
# how a test turns on the control app, the state file and plugins. A hot
# restart re-executes this file with the same environment.
#
# The app: "/" answers "pid PID"; "/yabeda" (when the yabeda gem is
# loaded) collects Yabeda's metrics and answers their values as JSON;
# "/yabeda-types" the class of each (Yabeda::Gauge...); "/fail" raises;
# "/puma-stats" answers Puma.stats (MARGAY_CTL_REQUIRE_PUMA=1 loads the puma
# gem's lib/puma.rb first, as Bundler.require does for an app).
# MARGAY_CTL_METRICS=FILE: a thread of the process that runs the launcher
# (single mode's server, a cluster's master) writes Margay.metrics to FILE
# every 0.2 s once it serves (renamed into place: read whole).
# MARGAY_CTL_SOLID_QUEUE=DIR defines a stand-in SolidQueue::Supervisor that
# records its start and stop in DIR (the real plugin forks it).
$stdout.sync = true
$stderr.sync = true
require "json"
require "margay"

if (sq_dir = ENV["MARGAY_CTL_SOLID_QUEUE"])
  require "active_support"
  require "active_support/core_ext/object/blank" # the plugin calls #present?
  module SolidQueue
    class Supervisor
      def self.start(**options)
        File.write(File.join(ENV.fetch("MARGAY_CTL_SOLID_QUEUE"), "started"), "#{Process.pid} #{options[:mode]}")
        trap("INT") do
          File.write(File.join(ENV.fetch("MARGAY_CTL_SOLID_QUEUE"), "stopped"), Process.pid.to_s)
          exit!(0)
        end
        sleep
      end
    end
  end
end
require "yabeda" if ENV["MARGAY_CTL_YABEDA"]
require "puma" if ENV["MARGAY_CTL_REQUIRE_PUMA"] # as an app with puma in its Gemfile does

settings = JSON.parse(ENV.fetch("MARGAY_CTL_SETTINGS"), symbolize_names: true)
settings[:binds] ||= ["tcp://127.0.0.1:0"]
config = Margay::Configuration.new(**settings)

if (metrics_file = ENV["MARGAY_CTL_METRICS"])
  Thread.new do
    loop do
      text = Margay.metrics
      unless text.empty?
        File.write("#{metrics_file}.new", text)
        File.rename("#{metrics_file}.new", metrics_file)
      end
      sleep 0.2
    end
  end
end

app = lambda do |env|
  raise "failed on purpose" if env["PATH_INFO"] == "/fail"

  body =
    if env["PATH_INFO"].start_with?("/yabeda")
      Yabeda.configure! unless Yabeda.already_configured?
      Yabeda.collect!
      metrics = Yabeda.metrics.select { |name, _| name.start_with?("puma_") }
      if env["PATH_INFO"] == "/yabeda-types"
        JSON.generate(metrics.transform_values { |m| m.class.name })
      else
        JSON.generate(metrics.transform_values { |m| m.values.map { |tags, atom| [tags[:index], atom.value] } })
      end
    elsif env["PATH_INFO"] == "/puma-stats"
      Puma.stats
    else
      "pid #{Process.pid}"
    end
  [200, { "content-type" => "text/plain" }, [body]]
end
exit Margay::Launcher.new(config, app: app, restart_argv: [__FILE__]).run
