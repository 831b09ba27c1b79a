# frozen_string_literal: true

# The hello-world app of the core benchmark (bench/core.rb): every request gets a
# 13-byte text/plain "Hello, World!" with an explicit content-length.
# A fresh headers hash per response, as a real app would build one.
BODY = "Hello, World!"

run lambda { |_env|
  [200, { "content-type" => "text/plain", "content-length" => "13" }, [BODY]]
}
