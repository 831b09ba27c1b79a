# frozen_string_literal: true

require "open3"

module MargayBench
  # Hosts on one machine: +count+ network namespaces, each with its own address on a bridge in
  # the root namespace, so that a balancer running in the root namespace sees them as separate
  # hosts (each server binds the same port on its own address, as in a fleet). Root only.
  #
  #   hosts = Hosts.new(3).up      # bridge 10.213.N.1/24, hosts 10.213.N.11 .. .13
  #   hosts.argv(0, %w[bundle exec exe/margay -b tcp://10.213.N.11:9292])
  #   hosts.down                   # namespaces, links and bridge removed
  #
  # Names carry this process's pid, so that two runs (a test and a bench) do not collide; #down
  # also removes what a killed earlier run of the same pid left.
  class Hosts
    attr_reader :names

    # Why hosts cannot be made here (nil: they can).
    def self.unavailable
      return "needs root (ip netns add)" unless Process.uid.zero?
      return "needs iproute2's ip" unless File.executable?("/usr/sbin/ip") || File.executable?("/sbin/ip")

      nil
    end

    def initialize(count, id: Process.pid % 250)
      @count = count
      @id = id
      @bridge = "mgbr#{id}"
      @names = Array.new(count) { |i| "mgh#{id}n#{i + 1}" }
    end

    # The address of host +i+ (0-based).
    def address(i)
      "10.213.#{@id}.#{11 + i}"
    end

    # The address the hosts reach the root namespace at (the bridge's).
    def gateway
      "10.213.#{@id}.1"
    end

    def up
      down
      ip "link", "add", @bridge, "type", "bridge"
      ip "addr", "add", "#{gateway}/24", "dev", @bridge
      ip "link", "set", @bridge, "up"
      @names.each_with_index do |ns, i|
        ip "netns", "add", ns
        ip "link", "add", "#{ns}v", "type", "veth", "peer", "name", "eth0", "netns", ns
        ip "link", "set", "#{ns}v", "master", @bridge, "up"
        ip "-n", ns, "addr", "add", "#{address(i)}/24", "dev", "eth0"
        ip "-n", ns, "link", "set", "eth0", "up"
        ip "-n", ns, "link", "set", "lo", "up"
      end
      self
    end

    # Remove what #up made (quietly: parts may be missing).
    def down
      @names.each do |ns|
        system("ip", "netns", "del", ns, %i[out err] => File::NULL)
        system("ip", "link", "del", "#{ns}v", %i[out err] => File::NULL)
      end
      system("ip", "link", "del", @bridge, %i[out err] => File::NULL)
    end

    # +argv+ run inside host +i+'s namespace.
    def argv(i, argv)
      ["ip", "netns", "exec", @names.fetch(i), *argv]
    end

    private

    def ip(*args)
      out, status = Open3.capture2e("ip", *args)
      raise "ip #{args.join(' ')}: #{out.strip}" unless status.success?
    end
  end
end
