# frozen_string_literal: true

require "json"
require "rack/utils"
require_relative "../version"

module Margay
  # The built-in app served when there is no config.ru: one HTML page with the
  # version, the settings and live counters, and the counters as JSON.
  #
  #   GET /            the page (its script refreshes the counters every 2 s)
  #   GET /stats.json  {"version": ..., "stats": {...}}
  class DemoApp
    # Settings shown on the page, in this order, with their units.
    LIMITS = {
      header_timeout: "s", body_timeout: "s", keepalive_timeout: "s", write_timeout: "s",
      shutdown_timeout: "s", max_keepalive_requests: nil, max_request_target: "bytes",
      max_header_size: "bytes", max_headers: nil, max_body_size: "bytes", body_buffer_size: "bytes",
      max_connections: nil, event_backend: nil
    }.freeze

    # @param config [Configuration]
    # @param stats [#call] returns the server's live counters (Server#stats)
    # @param addresses [#call] returns the bound addresses (Server#addresses)
    def initialize(config, stats: -> { {} }, addresses: -> { config.binds })
      @config = config
      @stats = stats
      @addresses = addresses
    end

    # The Rack call: the page, /stats.json, or 404/405.
    def call(env)
      method = env["REQUEST_METHOD"]
      return respond(405, "text/plain", "Method Not Allowed\n", env, "allow" => "GET, HEAD") unless %w[GET HEAD].include?(method)

      case env["PATH_INFO"]
      when "/", "" then respond(200, "text/html; charset=utf-8", page, env)
      when "/stats.json" then respond(200, "application/json", JSON.generate(snapshot), env)
      else respond(404, "text/plain", "Not Found\n", env)
      end
    end

    private

    def respond(status, type, body, env, extra = {})
      headers = { "content-type" => type, "content-length" => body.bytesize.to_s,
                  "cache-control" => "no-store" }.merge(extra)
      [status, headers, env["REQUEST_METHOD"] == "HEAD" ? [] : [body]]
    end

    def snapshot
      { version: VERSION, environment: @config.environment, addresses: @addresses.call, stats: @stats.call }
    end

    def page
      rows = LIMITS.map do |key, unit|
        value = @config.public_send(key)
        shown = value.nil? ? "unlimited / automatic" : [value, unit].compact.join(" ")
        "<tr><th>#{key}</th><td>#{h(shown)}</td></tr>"
      end
      counters = @stats.call.map { |key, value| %(<tr><th>#{h(key)}</th><td id="stat-#{h(key)}">#{h(value)}</td></tr>) }
      <<~HTML
        <!DOCTYPE html>
        <html lang="en">
        <head><meta charset="utf-8"><title>Margay #{h(VERSION)}</title>
        <style>body{font-family:system-ui,sans-serif;max-width:44em;margin:2em auto;color:#222}
        th{text-align:left;padding-right:2em;font-weight:normal;color:#555}code{background:#eee;padding:0 .2em}</style>
        </head>
        <body>
        <h1>Margay #{h(VERSION)}</h1>
        <p>This is Margay's built-in demo app: there is no <code>#{h(@config.rackup)}</code> here.
        Run <code>margay path/to/config.ru</code> to serve your own Rack app.</p>
        <h2>Server</h2>
        <table>
        <tr><th>listening on</th><td>#{@addresses.call.map { |a| h(a) }.join('<br>')}</td></tr>
        <tr><th>threads</th><td>#{@config.min_threads}:#{@config.max_threads}</td></tr>
        <tr><th>environment</th><td>#{h(@config.environment)}</td></tr>
        <tr><th>ruby</th><td>#{h(RUBY_DESCRIPTION)}</td></tr>
        </table>
        <h2>Live counters</h2>
        <table id="stats">#{counters.join("\n")}</table>
        <p><a href="stats.json">stats.json</a></p>
        <h2>Limits and timeouts</h2>
        <table>#{rows.join("\n")}</table>
        <script>
        setInterval(function () {
          fetch("stats.json").then(function (r) { return r.json(); }).then(function (d) {
            Object.keys(d.stats).forEach(function (k) {
              var cell = document.getElementById("stat-" + k);
              if (cell) cell.textContent = d.stats[k];
            });
          }).catch(function () {});
        }, 2000);
        </script>
        </body>
        </html>
      HTML
    end

    def h(value)
      Rack::Utils.escape_html(value.to_s)
    end
  end
end
