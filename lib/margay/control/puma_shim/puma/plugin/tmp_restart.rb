# frozen_string_literal: true

require "puma/plugin"

# Margay's tmp_restart (the puma gem's is used when the bundle has it): touch
# tmp/restart.txt and the server restarts (launcher.restart: USR2). The file's
# mtime is looked at every 2 seconds; a missing file means no restart.
Puma::Plugin.create do
  def start(launcher)
    path = File.join("tmp", "restart.txt")
    begin
      File.write(path, "") unless File.exist?(path)
      seen = File.mtime(path)
    rescue SystemCallError
      return # not writable here: nothing to watch
    end
    in_background do
      loop do
        sleep 2
        mtime = begin
          File.mtime(path)
        rescue SystemCallError
          nil
        end
        next unless mtime && mtime > seen

        launcher.restart
        break
      end
    end
  end
end
