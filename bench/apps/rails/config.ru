# frozen_string_literal: true

# bench/run.rb workload "realistic": a small Rails 7.2 app with ActiveRecord + SQLite.
# Each GET / runs two queries (an author, then that author's ten newest posts) and
# renders an ERB template inside a layout. Started by bench/run.rb with
# BUNDLE_GEMFILE=bench/Gemfile, like every server in the suite.
require_relative "config/environment"

run Rails.application
