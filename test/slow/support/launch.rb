# frozen_string_literal: true

# Test support (internal): serve ARGV[0] (a rackup file) with a Configuration
# built directly from MARGAY_TEST_SETTINGS (a Ruby Hash literal: settings
# that have no flag, callables included), as the CLI would launch it; a hot
# restart re-executes this script.
lib = File.expand_path("../../../lib", __dir__)
$LOAD_PATH.unshift(lib) unless $LOAD_PATH.include?(lib)
require "margay"

$stdout.sync = true
settings = eval(ENV.fetch("MARGAY_TEST_SETTINGS", "{}")) # rubocop:disable Security/Eval -- the test's own text
config = Margay::Configuration.new(binds: ["tcp://127.0.0.1:0"], rackup: ARGV.fetch(0), **settings)
log = Margay::Log.new(quiet: config.quiet)
exit Margay::Launcher.new(config, log: log, rackup_given: true, restart_argv: [File.expand_path(__FILE__), *ARGV]).run
