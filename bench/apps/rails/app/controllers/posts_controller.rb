# frozen_string_literal: true

# GET / and GET /authors/:id: query 1 finds an author (by id, or a pseudo-random one
# for /), query 2 loads that author's ten newest posts; both rendered by ERB.
class PostsController < ApplicationController
  def index
    id = params[:id] || ((Process.clock_gettime(Process::CLOCK_MONOTONIC, :microsecond) % 20) + 1)
    @author = Author.find(id)
    @posts = @author.posts.order(published_at: :desc).limit(10).to_a
  end
end
