# frozen_string_literal: true

module Margay
  # Test support (internal): environment variables set for the length of a block.
  module TestEnv
    # Set +vars+ (name => value, nil unsets) in ENV, yield, then put back what was there.
    def with_env(vars)
      saved = vars.keys.to_h { |k| [k, ENV[k]] }
      vars.each { |k, v| ENV[k] = v }
      yield
    ensure
      saved.each { |k, v| ENV[k] = v }
    end
  end
end
