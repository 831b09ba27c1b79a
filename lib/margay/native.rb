# frozen_string_literal: true

# The native extension (ext/margay): Margay::Native::Engine, Native::IdleBoard
# and the parser's test bindings.
module Margay
  # The native extension is not built: a checkout used through
  # `gem "margay", path: ...` (Bundler compiles no extension for a path gem),
  # or a gem install whose compile failed. The message says what to run.
  class NativeMissing < LoadError
    # One line: what to run in +root+ (the gem's or the checkout's directory).
    def self.advice(root)
      if File.file?(File.join(root, "Rakefile"))
        "margay: the native extension is not built: run `bundle install && bundle exec rake compile` in #{root} " \
          "(Bundler does not compile a path: gem), or install the gem: `gem build margay.gemspec && gem install margay-*.gem`"
      else
        "margay: the native extension is not built in #{root}: reinstall the gem (`gem pristine margay`) " \
          "and read the compiler's output"
      end
    end
  end
end

if RUBY_ENGINE == "jruby" # no C extensions there: the pure-Ruby engine (lib/margay/pure/)
  require "margay/pure"
  module Margay
    module Native # the names the server uses
      Engine = Pure::Engine
      def self.malloc_trim = nil
      def self.malloc_arenas(_count) = false

      # An ssl:// bind: refused at start with one line (the pure-Ruby engine has no TLS yet).
      class TLSContext
        def initialize(*)
          raise ConfigError, "ssl:// binds: not on #{RUBY_ENGINE} yet (its pure-Ruby engine has no TLS); " \
                             "terminate TLS in a proxy in front of Margay"
        end
      end
    end
  end
else
  begin
    require "margay/margay_native"
  rescue LoadError => e
    raise e if e.is_a?(Margay::NativeMissing) || !e.message.include?("margay_native")

    raise Margay::NativeMissing, Margay::NativeMissing.advice(File.expand_path("../..", __dir__))
  end
end
