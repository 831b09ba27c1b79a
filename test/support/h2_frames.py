"""Raw HTTP/2 frames against a server (test/wire/h2_test.rb): python3-h2 for the session,
hyperframe for frames h2 would refuse to send. Prints one JSON line of what it saw.

  h2_frames.py seeds DIR              writes the h2 fuzz harness's seeds (ext/margay/fuzz/seeds/h2):
                                      client frames after the preface, one scenario a file
                                      (/usr/bin/python3 test/support/h2_frames.py seeds ext/margay/fuzz/seeds/h2)

  PORT may be tls:PORT: the same over TLS (ALPN h2, the certificate not checked).

  h2_frames.py PORT settings          the server's SETTINGS
  h2_frames.py PORT frames PATH...    a GET of each PATH, all on one connection at once: what came
                                      for each stream, in order (each head's fields, "data" for body
                                      bytes, "end" for END_STREAM, "reset"), by path
  h2_frames.py PORT ended PATH...     a GET of each PATH, all on one connection at once (one write):
                                      when each stream ended (CLOCK_MONOTONIC seconds, as Ruby's
                                      Process.clock_gettime reads it), by path, and "sent": when
                                      they were sent
  h2_frames.py PORT split_preface N PATH
                                      the client preface's first N bytes alone, then (0.3 s later)
                                      the rest with a GET of PATH: what came for the stream, as frames
  h2_frames.py PORT proxied LINE PATH the PROXY v1 line LINE (CRLF added), the preface and a GET of
                                      PATH in one write: what came for the stream, as frames
  h2_frames.py PORT rapid_reset N     N x (HEADERS + RST_STREAM), then reads until closed
  h2_frames.py PORT big_headers SIZE  one stream with a SIZE-byte header value, then a normal one
  h2_frames.py PORT continuation N    HEADERS without END_HEADERS, then N empty CONTINUATION frames
  h2_frames.py PORT made_you_reset N  N x (HEADERS with END_STREAM + a WINDOW_UPDATE that overflows
                                      the stream's window, which the server answers with RST_STREAM
                                      FLOW_CONTROL_ERROR), then reads until closed
  h2_frames.py PORT ping_flood N      N PING frames without reading the ACKs, then reads until closed
  h2_frames.py PORT settings_flood N  N empty SETTINGS frames without reading the ACKs, then reads until closed
  h2_frames.py PORT settings_entries N one SETTINGS frame of N entries, then reads until closed
  h2_frames.py PORT empty_data N      a POST's HEADERS, then N DATA frames with no payload and no
                                      END_STREAM, then reads until closed
  h2_frames.py PORT zero_window N PATH [dribble|grant]
                                      SETTINGS_INITIAL_WINDOW_SIZE 0, N GETs of PATH; prints "ready"
                                      once their response heads came, then reads until closed,
                                      granting no window (with dribble: every 0.2 s a PING and
                                      1 byte more of each stream's window): the JSON says how long
                                      that took and the body bytes received. With grant: once a line
                                      comes on stdin, windows of 1 GiB, then reads the streams to
                                      their end: each one's body size and SHA-256
  h2_frames.py PORT tunnel PATH N BIG [reset|hold]
                                      an extended CONNECT (RFC 8441) of PATH (:protocol websocket),
                                      its headers without END_STREAM; N messages each sent after the
                                      echo of the one before, a GET on another stream meanwhile, then
                                      BIG random bytes sent as the stream's window lets them while
                                      their echo is read, then END_STREAM (with reset: RST_STREAM
                                      CANCEL; with hold: nothing, until the server ends the stream
                                      or 10 s pass): the server's ENABLE_CONNECT_PROTOCOL, the tunnel's
                                      status, the echoes, the GET's status, the bytes sent when the
                                      stream's window first closed, whether BIG came back whole, how
                                      the stream ended
"""
import hashlib
import os
import json
import socket
import ssl
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
from hyperframe.frame import ContinuationFrame, DataFrame, HeadersFrame, PingFrame, SettingsFrame, WindowUpdateFrame


def connect(port, send_preface=True):
    tls = port.startswith("tls:")
    sock = socket.create_connection(("127.0.0.1", int(port[4:] if tls else port)), timeout=10)
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        sock = ctx.wrap_socket(sock)
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    if send_preface:
        sock.sendall(conn.data_to_send())
    return sock, conn


def request(path, extra=()):
    return [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", "localhost")] + list(extra)


def whole_frames(buf):
    """(start, end) of each whole frame at the head of buf: a 9-byte header whose first 3 bytes are
    the payload's length, then the payload. A partial frame at the end is left out."""
    off = 0
    while len(buf) - off >= 9:
        end = off + 9 + int.from_bytes(buf[off:off + 3], "big")
        if len(buf) < end:
            break
        yield off, end
        off = end


def receive(conn, data):
    """conn.receive_data a whole frame at a time, keeping the events of the frames before one h2
    refuses: it refuses every frame after a GOAWAY, though the streams up to the GOAWAY's last
    stream id go on (RFC 9113 6.8), and one call with them all would lose the events before it."""
    buf = getattr(conn, "partial_frame", b"") + data
    events = []
    used = 0
    for start, used in whole_frames(buf):
        try:
            events.extend(conn.receive_data(buf[start:used]))
        except h2.exceptions.ProtocolError:
            pass
    conn.partial_frame = buf[used:]
    return events


def pump(sock, conn, until, limit=10.0, tick=None):
    """Read and feed events until until(events_so_far) or the connection closes, or +limit+
    seconds of silence. With +tick+: tick() after each 0.2 s of silence, for +limit+ seconds in all."""
    seen = []
    deadline = time.monotonic() + limit
    sock.settimeout(0.2 if tick else limit)
    try:
        while not until(seen):
            try:
                data = sock.recv(65536)
            except socket.timeout:
                if not tick or time.monotonic() > deadline:
                    raise
                tick()
                data = None
            if data == b"":
                seen.append("closed")
                break
            if data:
                seen.extend(receive(conn, data))
            out = conn.data_to_send()
            if out:
                sock.sendall(out)
    except (ConnectionResetError, BrokenPipeError):
        seen.append("closed")
    except socket.timeout:
        seen.append("timeout")
    return seen


def send(sock, data):
    """sendall; False once the server has closed (a reset or a broken pipe)."""
    try:
        sock.sendall(data)
        return True
    except (ConnectionResetError, BrokenPipeError):
        return False


def until_closed(sock, conn):
    """Pump until the server closes: its GOAWAY code and whether it closed."""
    seen = pump(sock, conn, lambda s: "closed" in s)
    return {"goaway": goaway_of(seen), "closed": "closed" in seen}


def goaway_of(events):
    for e in events:
        if isinstance(e, h2.events.ConnectionTerminated):
            return e.error_code
    return None


def seeds(out_dir):
    import os

    def frames_after_preface(build):
        conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        data = conn.data_to_send()[24:]  # SETTINGS, after the 24-byte preface
        build(conn)
        return data + conn.data_to_send()

    def get(conn):
        conn.send_headers(1, request("/a?b=c", [("cookie", "a=1"), ("cookie", "b=2")]), end_stream=True)

    def post(conn):
        conn.send_headers(1, [(":method", "POST")] + request("/up")[1:] + [("content-length", "3000")])
        conn.send_data(1, b"x" * 3000, end_stream=True)

    def many(conn):
        for sid in range(1, 40, 2):
            conn.send_headers(sid, request("/s%d" % sid), end_stream=True)

    def reset(conn):
        for sid in range(1, 20, 2):
            conn.send_headers(sid, request("/"), end_stream=True)
            conn.reset_stream(sid)

    def trailers(conn):
        conn.send_headers(1, [(":method", "POST")] + request("/t")[1:] + [("te", "trailers")])
        conn.send_data(1, b"body")
        conn.send_headers(1, [("x-trailer", "1")], end_stream=True)

    def ping(conn):
        conn.ping(b"12345678")
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 100})
        conn.send_headers(1, request("/"), end_stream=True)
        conn.increment_flow_control_window(1000)

    def tunnel(conn):  # an extended CONNECT (RFC 8441): DATA both before and after the app's answer
        conn.config.validate_outbound_headers = False
        conn.send_headers(1, [(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "http"),
                              (":path", "/ws"), (":authority", "localhost")])
        conn.send_data(1, b"\x81\x85abcd" + b"hello")
        conn.send_headers(3, request("/"), end_stream=True)
        conn.send_data(1, b"more", end_stream=True)

    os.makedirs(out_dir, exist_ok=True)
    for name, build in [("get", get), ("post", post), ("many", many), ("reset", reset), ("trailers", trailers),
                        ("ping", ping), ("tunnel", tunnel)]:
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(frames_after_preface(build))


def main():
    if sys.argv[1] == "seeds":
        seeds(sys.argv[2])
        return
    port, what = sys.argv[1], sys.argv[2]
    # split_preface and proxied write the preface themselves
    sock, conn = connect(port, what not in ("split_preface", "proxied"))
    out = {}
    if what == "settings":
        seen = pump(sock, conn, lambda s: any(isinstance(e, h2.events.RemoteSettingsChanged) for e in s))
        changed = next(e for e in seen if isinstance(e, h2.events.RemoteSettingsChanged)).changed_settings
        out = {str(int(k)): v.new_value for k, v in changed.items()}
    elif what in ("frames", "split_preface", "proxied"):
        first, paths = b"", {}
        if what == "split_preface":
            preface = conn.data_to_send()
            sock.sendall(preface[:int(sys.argv[3])])
            time.sleep(0.3)
            first = preface[int(sys.argv[3]):]
        elif what == "proxied":
            first = sys.argv[3].encode() + b"\r\n" + conn.data_to_send()
        for path in sys.argv[3 if what == "frames" else 4:]:
            sid = conn.get_next_available_stream_id()
            paths[sid] = path
            conn.send_headers(sid, request(path), end_stream=True)
        sock.sendall(first + conn.data_to_send())
        kinds = {h2.events.InformationalResponseReceived: "informational", h2.events.ResponseReceived: "response",
                 h2.events.TrailersReceived: "trailers"}
        done = (h2.events.StreamEnded, h2.events.StreamReset)
        got = {sid: [] for sid in paths}
        for e in pump(sock, conn, lambda s: sum(isinstance(e, done) for e in s) == len(paths)):
            sid = getattr(e, "stream_id", None)
            if sid not in got:
                continue
            if type(e) in kinds:
                got[sid].append({kinds[type(e)]: [[k, v] for k, v in e.headers]})
            elif isinstance(e, h2.events.DataReceived) and e.data and got[sid][-1] != "data":
                got[sid].append("data")
            elif isinstance(e, h2.events.StreamEnded):
                got[sid].append("end")
            elif isinstance(e, h2.events.StreamReset):
                got[sid].append("reset")
        out = {paths[sid]: events for sid, events in got.items()}
    elif what == "ended":
        paths = {}
        for path in sys.argv[3:]:
            sid = conn.get_next_available_stream_id()
            paths[sid] = path
            conn.send_headers(sid, request(path), end_stream=True)
        out["sent"] = time.clock_gettime(time.CLOCK_MONOTONIC)
        sock.sendall(conn.data_to_send())
        ended = {}

        def note(seen):  # after each read: the streams it ended end now
            for e in seen:
                if isinstance(e, h2.events.StreamEnded) and e.stream_id in paths and paths[e.stream_id] not in ended:
                    ended[paths[e.stream_id]] = time.clock_gettime(time.CLOCK_MONOTONIC)
            return len(ended) == len(paths)
        pump(sock, conn, note)
        out.update({p: ended.get(p) for p in paths.values()})
    elif what == "rapid_reset":
        n = int(sys.argv[3])
        for i in range(n):
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, request("/"), end_stream=True)
            conn.reset_stream(sid)
            if i % 50 == 49 and not send(sock, conn.data_to_send()):
                break
        send(sock, conn.data_to_send())
        out = until_closed(sock, conn)
    elif what == "made_you_reset":
        n = int(sys.argv[3])
        for i in range(n):
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, request("/"), end_stream=True)
            if not send(sock, conn.data_to_send() + WindowUpdateFrame(sid, window_increment=2**31 - 1).serialize()):
                break
        out = until_closed(sock, conn)
    elif what == "big_headers":
        size = int(sys.argv[3])
        big = conn.get_next_available_stream_id()
        conn.send_headers(big, request("/big", [("x-big", "a" * size)]), end_stream=True)
        small = conn.get_next_available_stream_id()
        conn.send_headers(small, request("/small"), end_stream=True)
        sock.sendall(conn.data_to_send())
        statuses = {}

        def done(seen):
            for e in seen:
                if isinstance(e, h2.events.ResponseReceived):
                    statuses[e.stream_id] = dict(e.headers)[":status"]
                if isinstance(e, h2.events.StreamReset):
                    statuses[e.stream_id] = "reset"
            return len(statuses) == 2 or "closed" in seen

        seen = pump(sock, conn, done)
        out = {"big": statuses.get(big), "small": statuses.get(small), "goaway": goaway_of(seen)}
    elif what in ("continuation", "ping_flood", "settings_flood", "settings_entries", "empty_data"):
        n = int(sys.argv[3])
        if what == "continuation":
            sid = conn.get_next_available_stream_id()
            block = conn.encoder.encode(request("/"))
            frames = HeadersFrame(sid, block, flags=["END_STREAM"]).serialize()
            frames += ContinuationFrame(sid, b"", flags=[]).serialize() * n
        elif what == "ping_flood":
            frames = b"".join(PingFrame(0, opaque_data=i.to_bytes(8, "big")).serialize() for i in range(n))
        elif what == "settings_flood":
            frames = SettingsFrame(0).serialize() * n
        elif what == "settings_entries":
            frames = SettingsFrame(0, settings={0x4000 + i: i for i in range(n)}).serialize()
        else:
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, [(":method", "POST")] + request("/up")[1:])
            frames = conn.data_to_send() + DataFrame(sid, b"").serialize() * n
        send(sock, frames)
        out = until_closed(sock, conn)
    elif what == "zero_window":
        n, path = int(sys.argv[3]), sys.argv[4]
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        sids = []
        for i in range(n):
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, request(path), end_stream=True)
            sids.append(sid)
        sock.sendall(conn.data_to_send())
        heads = set()
        data = [0]
        counted = set()

        def note(seen):
            for e in seen:
                if id(e) in counted:
                    continue
                counted.add(id(e))
                if isinstance(e, h2.events.ResponseReceived):
                    heads.add(e.stream_id)
                if isinstance(e, h2.events.DataReceived):
                    data[0] += len(e.data)
            return len(heads) == n or "closed" in seen

        seen = pump(sock, conn, note, limit=30.0)
        print("ready", flush=True)
        start = time.monotonic()
        def dribble():
            conn.ping(b"dribble!")
            for sid in sids:
                try:
                    conn.increment_flow_control_window(1, stream_id=sid)
                except h2.exceptions.H2Error:
                    pass  # the server reset it

        mode = sys.argv[5] if len(sys.argv) > 5 else None
        if mode == "grant":
            sys.stdin.readline()
            for sid in sids:
                conn.increment_flow_control_window(2**30, stream_id=sid)
            conn.increment_flow_control_window(2**30)
            sock.sendall(conn.data_to_send())
            seen += pump(sock, conn, lambda s: sum(isinstance(e, h2.events.StreamEnded) for e in s) == n or "closed" in s,
                         limit=30.0)
            bodies = {sid: [0, hashlib.sha256()] for sid in sids}
            for e in seen:
                if isinstance(e, h2.events.DataReceived) and e.stream_id in bodies:
                    bodies[e.stream_id][0] += len(e.data)
                    bodies[e.stream_id][1].update(e.data)
            ended = {e.stream_id for e in seen if isinstance(e, h2.events.StreamEnded)}
            out = {"heads": len(heads), "bodies": [[b[0], b[1].hexdigest()] for b in bodies.values()],
                   "ended": len(ended)}
        else:
            tick = dribble if mode == "dribble" else None
            seen += pump(sock, conn, lambda s: (note(s) or True) and "closed" in s, limit=60.0, tick=tick)
            out = {"heads": len(heads), "data": data[0], "closed": "closed" in seen,
                   "seconds": round(time.monotonic() - start, 2), "goaway": goaway_of(seen)}
    elif what == "tunnel":
        out = tunnel(sock, conn, sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), (sys.argv[6:] or ["end"])[0])
    print(json.dumps(out), flush=True)


def tunnel(sock, conn, path, n, big, finish):
    """The tunnel mode (see the top): a websocket-like echo over one stream of an extended CONNECT."""
    conn.config.validate_outbound_headers = False  # :protocol, whatever this h2 version thinks of it
    settings = {}
    echoed = bytearray()
    got = {"status": None, "get": None, "ended": False, "reset": None, "closed": False, "held": None}

    def feed(events):
        for e in events:
            if isinstance(e, h2.events.RemoteSettingsChanged):
                settings.update({int(k): v.new_value for k, v in e.changed_settings.items()})
            elif isinstance(e, h2.events.ResponseReceived):
                got["status" if e.stream_id == sid else "get"] = dict(e.headers)[":status"]
            elif isinstance(e, h2.events.DataReceived):
                conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                if e.stream_id == sid:
                    echoed.extend(e.data)
            elif isinstance(e, h2.events.StreamEnded) and e.stream_id == sid:
                got["ended"] = True
            elif isinstance(e, h2.events.StreamReset) and e.stream_id == sid:
                got["reset"] = int(e.error_code)
        if "closed" in events:
            got["closed"] = True
        out = conn.data_to_send()
        if out:
            sock.sendall(out)

    def wait(cond, limit=10.0):
        deadline = time.monotonic() + limit
        while not cond() and not got["closed"] and time.monotonic() < deadline:
            feed(pump(sock, conn, lambda seen: len(seen) > 0, limit=max(0.05, deadline - time.monotonic())))
        return cond()

    sid = None
    wait(lambda: settings)
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "http"),
                            (":path", path), (":authority", "localhost")], end_stream=False)
    sock.sendall(conn.data_to_send())
    wait(lambda: got["status"] is not None or got["reset"] is not None)
    echoes = []
    for i in range(1, n + 1):
        msg = ("msg-%d" % i).encode()
        conn.send_data(sid, msg)
        sock.sendall(conn.data_to_send())
        if i == 1:
            get = conn.get_next_available_stream_id()
            conn.send_headers(get, request("/"), end_stream=True)
            sock.sendall(conn.data_to_send())
        wait(lambda: len(echoed) >= len(msg))
        echoes.append(echoed.decode(errors="replace"))
        echoed.clear()
    if n > 0:
        wait(lambda: got["get"] is not None)
    data = os.urandom(big)
    sent = 0
    while sent < big and not got["closed"] and got["reset"] is None:
        room = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size, big - sent)
        if room <= 0:
            if got["held"] is None and conn.streams[sid].outbound_flow_control_window == 0:
                got["held"] = sent  # the stream's own window, not the connection's
            if not wait(lambda: conn.local_flow_control_window(sid) > 0, limit=10.0):
                break
            continue
        conn.send_data(sid, data[sent:sent + room])
        sent += room
        sock.sendall(conn.data_to_send())
    wait(lambda: len(echoed) >= big, limit=20.0)
    whole = bytes(echoed) == data
    if got["reset"] is not None:
        pass
    elif finish == "hold":
        wait(lambda: got["ended"] or got["reset"] is not None)
    elif finish == "reset":
        conn.reset_stream(sid, error_code=8)  # CANCEL
        sock.sendall(conn.data_to_send())
        wait(lambda: False, limit=0.5)
    else:
        conn.end_stream(sid)
        sock.sendall(conn.data_to_send())
        wait(lambda: got["ended"] or got["reset"] is not None)
    return {"enable_connect": settings.get(8), "status": got["status"], "echoes": echoes, "get": got["get"],
            "held": got["held"], "big_sent": sent, "big_echoed": len(echoed), "big_whole": whole, "ended": got["ended"],
            "reset": got["reset"], "closed": got["closed"]}


if __name__ == "__main__":
    main()
