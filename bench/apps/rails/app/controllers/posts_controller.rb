# frozen_string_literal: true

require "net/http"

# GET / and GET /authors/:id: query 1 finds an author (by id, or a pseudo-random one
# for /), query 2 loads that author's ten newest posts; both rendered by ERB.
# GET /slow (workload rails-pg-slow, issue 13): first a Net::HTTP GET to the slow local
# service at BENCH_SLOW_URL (bench/slow_service.rb, 50 ms), on a new connection as a plain
# `Net::HTTP.start` does, then the same two queries and template.
class PostsController < ApplicationController
  def index
    id = params[:id] || ((Process.clock_gettime(Process::CLOCK_MONOTONIC, :microsecond) % 20) + 1)
    @author = Author.find(id)
    @posts = @author.posts.order(published_at: :desc).limit(10).to_a
  end

  def slow
    uri = slow_uri
    res = Net::HTTP.start(uri.host, uri.port, open_timeout: 5, read_timeout: 10) { |http| http.get(uri.request_uri) }
    raise "the slow service answered #{res.code}" unless res.code == "200"

    index
    render :index
  end

  private

  def slow_uri
    url = ENV.fetch("BENCH_SLOW_URL") { raise "BENCH_SLOW_URL is not set: GET /slow needs bench/slow_service.rb" }
    URI(url)
  end
end
