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
# "/puma-stats" answers Puma.stats (MARGAY_CTL_REQUIRE_PUMA=1 loads the puma
# gem's lib/puma.rb first, as Bundler.require does for an app).
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

app = lambda do |env|
  body =
    if env["PATH_INFO"] == "/yabeda"
      Yabeda.configure! unless Yabeda.already_configured?
      Yabeda.collect!
      metrics = Yabeda.metrics.select { |name, _| name.start_with?("puma_") }
      JSON.generate(metrics.transform_values { |m| m.values.map { |tags, atom| [tags[:index], atom.value] } })
    elsif env["PATH_INFO"] == "/puma-stats"
      Puma.stats
    else
      "pid #{Process.pid}"
    end
  [200, { "content-type" => "text/plain" }, [body]]
end
exit Margay::Launcher.new(config, app: app, restart_argv: [__FILE__]).run
