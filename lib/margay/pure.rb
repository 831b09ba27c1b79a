# frozen_string_literal: true

require_relative "errors"
require_relative "pure/engine"

module Margay
  # The pure-Ruby engine (lib/margay/pure/): Native::Engine's contract in Ruby, for Rubies
  # that cannot load the C extension. lib/margay/native.rb puts it behind the Native names on JRuby.
  module Pure
  end
end
