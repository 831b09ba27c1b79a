nginx -p /tmp/h2tls/ngx/ -c /tmp/h2tls/ngx/nginx.conf -e stderr & NP=$!
sleep 1
W=$(pgrep -P $NP | head -1); echo worker $W
h2load -n 20000 -c 64 -m 100 -t2 https://127.0.0.1:23999/ >/dev/null
timeout 120 strace -f -c -o /tmp/h2tls/strace-nginx.txt -p $W & SP=$!; sleep 1
h2load -n 200000 -c 64 -m 100 -t2 https://127.0.0.1:23999/ > /tmp/h2tls/h2load-strace-nginx.txt
kill -INT $SP; wait $SP
timeout 120 strace -f -e trace=read,write,recvfrom,sendto,writev -o /tmp/h2tls/trace-nginx.txt -p $W & SP=$!; sleep 1
h2load -n 20000 -c 64 -m 100 -t2 https://127.0.0.1:23999/ >/dev/null
kill -INT $SP; wait $SP
kill $NP; wait
