# frozen_string_literal: true

Rails.application.routes.draw do
  root "posts#index"
  get "/authors/:id", to: "posts#index"
  get "/slow", to: "posts#slow" # rails-pg-slow: a call to the slow service first (BENCH_SLOW_URL)
end
