# frozen_string_literal: true

module Margay
  VERSION = "0.1.0"
end
