# frozen_string_literal: true

# The native extension (ext/margay): Margay::Native::Engine, Native::IdleBoard
# and the parser's test bindings.
begin
  require "margay/margay_native"
rescue LoadError => e
  raise LoadError, "margay: the native extension is not built (run `bundle exec rake compile`): #{e.message}"
end
