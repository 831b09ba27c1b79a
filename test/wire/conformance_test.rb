# frozen_string_literal: true

require "test_helper"
require "json"
require "timeout"
require_relative "../support/wire"
require_relative "../corpus/cases"
require_relative "../corpus/apps"

module Margay
  # Runs every case of test/corpus/cases.rb over a real socket against a real
  # server: one test method per case, named "test_<id>". Servers are shared:
  # one per (app kind, settings) group, started on first use and stopped when
  # the run ends, so the whole corpus takes seconds, not minutes.
  class ConformanceTest < Minitest::Test
    PROBE = "GET /__probe HTTP/1.1\r\nHost: probe.example\r\n\r\n"
    CLOSE_WAIT = 2     # seconds a closing server has to send EOF
    READ_TIMEOUT = 5   # seconds without a byte before a read gives up

    # Shared servers, keyed by [:echo | :misbehaving, settings]. Each lives in
    # a thread parked inside TestHelper#with_server until .stop_all.
    module Servers
      # The object with_server runs on (it needs Minitest assertions for its cleanup).
      class Host
        include Minitest::Assertions
        include Margay::TestHelper
        attr_accessor :assertions
        attr_reader :last_server_log

        def initialize
          @assertions = 0
        end
      end

      Entry = Struct.new(:port, :thread, :release, :host, :key)

      @entries = {}
      @lock = Mutex.new
      @failed = false

      class << self
        attr_accessor :failed

        # The port of the server for +kase+, started when first needed.
        def port_for(kase)
          key = [kase[:app] ? :misbehaving : :echo, kase[:settings] || {}]
          @lock.synchronize { (@entries[key] ||= start(key)).port }
        end

        def stop_all
          entries = @lock.synchronize { @entries.values.tap { @entries = {} } }
          entries.each { |e| e.release << true }
          entries.each do |e|
            e.thread.join(15)
            next unless failed && e.host.last_server_log && !e.host.last_server_log.empty?

            warn "--- server log #{e.key.inspect} ---\n#{e.host.last_server_log}"
          end
        end

        private

        def start(key)
          kind, settings = key
          app = kind == :echo ? Corpus::Apps::ECHO : Corpus::Apps::MISBEHAVING
          ready = Queue.new
          release = Queue.new
          host = Host.new
          thread = Thread.new do
            # production: a 500 is the plain error page, as deployed servers send it
            host.with_server(app, lint: kind == :echo, environment: "production", **settings) do |_addr, port, _server|
              ready << port
              release.pop
            end
          rescue Exception => e # rubocop:disable Lint/RescueException -- handed to the waiting test
            ready << e
          end
          thread.report_on_exception = false
          port = Timeout.timeout(30) { ready.pop }
          raise port if port.is_a?(Exception)

          Entry.new(port, thread, release, host, key)
        end
      end
    end

    Minitest.after_run { Servers.stop_all }

    # A corpus case must be well-formed before it can say anything about the server.
    def test_corpus_is_well_formed
      cases = Corpus::CASES
      ids = cases.map { |c| c[:id] }
      assert_operator cases.size, :>=, 170
      assert_equal ids.uniq, ids, "duplicate case ids"
      cases.each do |c|
        assert_match(/\A[a-z0-9]+(-[a-z0-9]+)*\z/, c[:id])
        assert_kind_of String, c[:ref], c[:id]
        assert_equal Encoding::BINARY, c[:request].encoding, c[:id]
        assert_includes [true, false], c[:close], c[:id]
        assert_kind_of Integer, c[:status], c[:id]
        next unless c[:app]

        assert Corpus::Apps.route?(c[:app]), "#{c[:id]}: unknown app route #{c[:app]}"
        assert_match %r{\A[A-Z]+ /#{c[:app]} }, c[:request], "#{c[:id]}: target must be /#{c[:app]}"
      end
    end

    Corpus::CASES.each do |kase|
      define_method("test_#{kase[:id]}") { run_case(kase) }
    end

    private

    def run_case(kase)
      client = Wire::Client.open(Servers.port_for(kase), timeout: READ_TIMEOUT)
      head = kase[:request].match?(/\A(?:\r\n)*HEAD /)
      interims, res = exchange(client, kase, head)
      context = "#{kase[:id]} (#{kase[:ref]})"

      refute_nil res, "#{context}: the server closed the connection without a response.\n#{transcript(client)}"
      assert_equal kase[:status], res.status, "#{context}: status\n#{transcript(client)}"
      check_interims(kase, interims, context)
      check_response(kase, res, head, context)
      check_env(kase, res, context) if echoed?(kase)
      check_followups(kase, client, context)
      check_connection(kase, res, client, context)
      check_wire_absent(kase, client, context)
    rescue Minitest::Assertion
      Servers.failed = true
      raise
    rescue Wire::Timeout, Wire::ProtocolError => e
      Servers.failed = true
      flunk "#{kase[:id]}: #{e.class}: #{e.message}\n#{client && transcript(client)}"
    ensure
      client&.close
    end

    # Write the request and read up to the first final response.
    def exchange(client, kase, head)
      client.write(kase[:request])
      interims = []
      if kase[:send_after_interim]
        first = client.read_response(head: head)
        return [interims, first] if first.nil? || !first.interim?

        interims << first
        client.write(kase[:send_after_interim])
      end
      more, res = client.read_final(head: head)
      [interims + more, res]
    end

    def check_interims(kase, interims, context)
      statuses = interims.map(&:status)
      case kase[:interim]
      when Integer
        assert_includes statuses, kase[:interim], "#{context}: expected an interim #{kase[:interim]}"
      when false
        assert_empty statuses, "#{context}: no interim response expected"
      end
      interims.each { |r| assert_equal "HTTP/1.1", r.version, "#{context}: interim status line" }
    end

    def check_response(kase, res, head, context)
      # RFC 9110 6.2: answer with the highest 1.x version supported (a SHOULD);
      # an HTTP/1.0 request may also be answered "HTTP/1.0".
      allowed = kase[:request].match?(%r{\A(?:\r\n)*\S+ \S+ HTTP/1\.0\r\n}) ? %w[HTTP/1.1 HTTP/1.0] : %w[HTTP/1.1]
      assert_includes allowed, res.version, "#{context}: status line version"
      refute_nil res["date"], "#{context}: every response carries a date header"
      if res.status == 204 || res.status < 200
        assert_nil res["content-length"], "#{context}: no content-length on #{res.status}"
        assert_nil res["transfer-encoding"], "#{context}: no transfer-encoding on #{res.status}"
      end
      assert_empty res.body, "#{context}: HEAD response with a body" if head
      if kase[:incomplete]
        refute res.complete, "#{context}: the body should have been cut short"
      else
        assert res.complete, "#{context}: response body cut short (#{res.body.bytesize} bytes)"
      end
      assert_equal kase[:response_body], res.body, "#{context}: response body" if kase.key?(:response_body)
      (kase[:response_headers] || {}).each do |name, want|
        check_header(res, name, want, context)
      end
      (kase[:response_headers_absent] || []).each do |name|
        assert_nil res[name], "#{context}: response header #{name} must not be sent"
      end
      res.fields.each do |name, _|
        refute name.downcase.start_with?("rack."), "#{context}: rack.* header #{name} sent to the client"
      end
    end

    def check_header(res, name, want, context)
      case want
      when Array
        got = res.fields.select { |n, _| n.casecmp?(name) }.map(&:last)
        assert_equal want, got, "#{context}: #{name} lines"
      when Regexp
        assert_match want, res[name].to_s, "#{context}: #{name}"
      else
        assert_equal want, res[name], "#{context}: #{name}"
      end
    end

    def echoed?(kase)
      %i[path_info query body headers_env env_not].any? { |k| kase.key?(k) }
    end

    def check_env(kase, res, context)
      env = JSON.parse(res.body).transform_values { |v| v && Corpus::Apps.from_wire(v) }
      assert_equal kase[:path_info], env["PATH_INFO"], "#{context}: PATH_INFO" if kase.key?(:path_info)
      assert_equal kase[:query], env["QUERY_STRING"], "#{context}: QUERY_STRING" if kase.key?(:query)
      assert_equal kase[:body], env["body"], "#{context}: body read from rack.input" if kase.key?(:body)
      (kase[:headers_env] || {}).each do |key, want|
        if want.nil?
          refute env.key?(key), "#{context}: env[#{key}] must be absent, got #{env[key].inspect}"
        else
          assert_equal want.b, env[key], "#{context}: env[#{key}]"
        end
      end
      (kase[:env_not] || {}).each do |key, bad|
        refute_equal bad.b, env[key], "#{context}: env[#{key}] must not be #{bad.inspect}"
      end
    rescue JSON::ParserError => e
      flunk "#{context}: the echo app's body is not JSON (#{e.message}): #{res.body[0, 300].inspect}"
    end

    def check_followups(kase, client, context)
      count = case kase[:followup]
              when true then 1
              when Integer then kase[:followup]
              else 0
              end
      count.times do |i|
        _, res = client.read_final
        refute_nil res, "#{context}: pipelined request #{i + 1} not answered\n#{transcript(client)}"
        want = kase[:followup_statuses]&.at(i) || 200
        assert_equal want, res.status, "#{context}: pipelined request #{i + 1}\n#{transcript(client)}"
        next unless want == 200 && (path = kase[:followup_paths]&.at(i))

        got = JSON.parse(res.body)["PATH_INFO"]
        assert_equal path, got, "#{context}: pipelined responses out of order"
      end
    end

    def check_connection(kase, res, client, context)
      if kase[:close]
        if kase.fetch(:close_header, true) == true
          assert res.connection?("close"), "#{context}: a closing response should say connection: close " \
                                           "(got #{res['connection'].inspect})"
        end
        state, extra = client.wait_close(CLOSE_WAIT)
        assert_empty extra, "#{context}: bytes after the response (a pipelined request answered?)\n#{transcript(client)}"
        refute_equal :open, state, "#{context}: connection still open #{CLOSE_WAIT} s after the response"
      else
        refute res.connection?("close"), "#{context}: response says connection: close but close: false expected"
        client.write(PROBE)
        _, probe = client.read_final
        refute_nil probe, "#{context}: connection closed, expected it to stay open\n#{transcript(client)}"
        assert_equal 200, probe.status, "#{context}: probe on the kept-alive connection\n#{transcript(client)}"
        assert_equal "/__probe", JSON.parse(probe.body)["PATH_INFO"], "#{context}: probe answered out of step"
      end
    end

    # Bytes that must appear nowhere in what the server sent on this connection,
    # leaving out the bodies of 500 responses (an error page may quote the
    # offending header; what matters is that it never becomes one).
    def check_wire_absent(kase, client, context)
      sent = client.transcript.dup
      client.responses.each { |r| sent.sub!(r.body, "") if r.status == 500 && !r.body.empty? }
      sent = sent.downcase
      (kase[:wire_absent] || []).each do |bytes|
        refute sent.include?(bytes.downcase), "#{context}: #{bytes.inspect} reached the wire\n#{transcript(client)}"
      end
    end

    def transcript(client)
      bytes = client.transcript
      shown = bytes.bytesize > 2000 ? "#{bytes.byteslice(0, 2000).inspect}... (#{bytes.bytesize} bytes)" : bytes.inspect
      "--- server sent ---\n#{shown}"
    end
  end
end
