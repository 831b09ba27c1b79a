# frozen_string_literal: true

require_relative "boot"
require "rails"
require "active_record/railtie"
require "action_controller/railtie"
require "action_view/railtie"

module BenchRails
  # Database file: BENCH_RAILS_DB, else tmp/bench.sqlite3 next to this app.
  DB_PATH = ENV.fetch("BENCH_RAILS_DB") { File.expand_path("../tmp/bench.sqlite3", __dir__) }

  class Application < Rails::Application
    config.load_defaults 7.2
    config.root = File.expand_path("..", __dir__)
    config.eager_load = true # production-like: everything loaded before forking
    config.secret_key_base = "margay-bench-not-a-secret-" * 3
    config.logger = ActiveSupport::Logger.new(File::NULL)
    config.log_level = :warn
    config.hosts.clear
    config.action_controller.perform_caching = false
    config.active_record.maintain_test_schema = false
    config.active_support.deprecation = :silence
    # Under a fiber scheduler (Margay --fibers, Falcon, Itsi) many requests share a thread:
    # ActiveSupport::IsolatedExecutionState (the executor's state, ActiveRecord's connection
    # lease and query cache, CurrentAttributes) must then be per fiber, or two requests on one
    # thread would share one database connection. The bench harnesses set
    # BENCH_RAILS_ISOLATION=fiber for the fiber servers; thread servers keep Rails' default.
    if (level = ENV["BENCH_RAILS_ISOLATION"])
      config.active_support.isolation_level = level.to_sym
    end
  end

  # Creates and fills the database once (under an exclusive lock, so concurrently
  # booting processes do not race). 20 authors x 50 posts.
  module Seed
    module_function

    def run
      FileUtils.mkdir_p(File.dirname(DB_PATH))
      File.open("#{DB_PATH}.lock", File::RDWR | File::CREAT, 0o644) do |lock|
        lock.flock(File::LOCK_EX)
        conn = ActiveRecord::Base.connection
        unless conn.table_exists?(:posts) && Post.count == 1000
          conn.create_table(:authors, force: true) { |t| t.string :name, null: false }
          conn.create_table(:posts, force: true) do |t|
            t.integer :author_id, null: false
            t.string :title, null: false
            t.text :body, null: false
            t.datetime :published_at, null: false
          end
          conn.add_index :posts, %i[author_id published_at]
          ActiveRecord::Base.transaction do
            20.times do |a|
              author = Author.create!(name: "Author #{a + 1}")
              50.times do |p|
                author.posts.create!(title: "Post #{p + 1} by #{author.name}", body: "Lorem ipsum dolor sit amet. " * 8,
                                     published_at: Time.utc(2024, 1, 1) + (a * 50 + p) * 3600)
              end
            end
          end
        end
      end
      ActiveRecord::Base.connection_handler.clear_all_connections!
    end
  end
end
