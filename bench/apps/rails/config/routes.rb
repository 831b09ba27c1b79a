# frozen_string_literal: true

Rails.application.routes.draw do
  root "posts#index"
  get "/authors/:id", to: "posts#index"
end
