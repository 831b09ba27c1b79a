"""HTTP/2 clients that read the server's frames raw (hyperframe), for test/wire/h2_hold_test.rb:
python3-h2 drops what comes after a GOAWAY, and these must see the answers that follow one.
Prints one JSON line of what it saw. PORT may be tls:PORT (ALPN h2, the certificate not checked).

  h2_raw.py PORT goaway PATH...       a GET of each PATH, all in one write, then reads until the
                                      server closes (or 10 s of silence): what came for each stream
                                      ("head", "data" for body bytes, "end", "reset"), by path; the
                                      GOAWAY's last stream id and code; the paths that got frames
                                      after it; whether the server closed
  h2_raw.py PORT stall SECONDS PATH...
                                      windows of 2^31-1, a GET of each PATH in one write, then
                                      SECONDS without reading; then reads until every stream ended or
                                      was reset, the server closed or 10 s of silence: each path's
                                      body bytes, the paths ended, those reset, the GOAWAY's code if
                                      one came, whether it closed, the seconds from the GETs
  h2_raw.py PORT churn N PATH...      N connections, each sending a GET of each PATH in one write
                                      and leaving at once, a different way a round: RST_STREAM of
                                      every other stream once the first body came, then reading
                                      on; a TCP reset once the first body came; a close right after
                                      the GETs. Then a last connection like goaway: its streams, and
                                      "stray": frames on a stream it did not open
"""
import json
import os
import socket
import ssl
import struct
import sys
import time

import h2.config
import h2.connection
import h2.settings
from hyperframe.frame import DataFrame, Frame, GoAwayFrame, HeadersFrame, RstStreamFrame, WindowUpdateFrame

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ left in the checkout
from h2_frames import connect, whole_frames  # noqa: E402 (the same client connection and framing as h2_frames.py's)

BIG_WINDOW = 2**31 - 1


def gets(conn, paths):
    """Queue a GET of each path: {stream id: path}."""
    sids = {}
    for path in paths:
        sid = conn.get_next_available_stream_id()
        sids[sid] = path
        conn.send_headers(sid, [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", "localhost")],
                          end_stream=True)
    return sids


def read_frames(sock, on_frame, limit=10.0):
    """Feed each frame the server sends to on_frame until it returns True (then False), the server
    closes (True) or +limit+ seconds of silence (None)."""
    buf = bytearray()
    sock.settimeout(limit)
    while True:
        try:
            data = sock.recv(262144)
        except socket.timeout:
            return None
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return True
        if not data:
            return True
        buf += data
        off = 0
        for start, off in whole_frames(buf):
            frame, _ = Frame.parse_frame_header(memoryview(buf)[start:start + 9])
            frame.parse_body(memoryview(bytes(buf[start + 9:off])))
            if on_frame(frame):
                return False
        del buf[:off]


def goaway(port, paths, until_ended=False):
    sock, conn = connect(port, send_preface=False)
    sids = gets(conn, paths)
    sock.sendall(conn.data_to_send())
    return watch(sock, sids, until_ended)


def watch(sock, sids, until_ended):
    """What came for each stream, until the server closes (or with +until_ended+: every stream ended)."""
    got = {sid: [] for sid in sids}
    out = {"goaway": None, "after_goaway": [], "stray": []}

    def on_frame(f):
        if isinstance(f, GoAwayFrame):
            out["goaway"] = [f.last_stream_id, f.error_code]
            return False
        if f.stream_id == 0:
            return False
        if f.stream_id not in got:
            out["stray"].append([type(f).__name__, f.stream_id])
            return False
        events = got[f.stream_id]
        if out["goaway"] is not None and sids[f.stream_id] not in out["after_goaway"]:
            out["after_goaway"].append(sids[f.stream_id])
        if isinstance(f, HeadersFrame):
            events.append("head")
        elif isinstance(f, DataFrame) and f.data and events[-1:] != ["data"]:
            events.append("data")
        elif isinstance(f, RstStreamFrame):
            events.append("reset")
        if "END_STREAM" in f.flags:
            events.append("end")
        return until_ended and all(e[-1:] in (["end"], ["reset"]) for e in got.values())

    out["closed"] = read_frames(sock, on_frame) is True
    out["streams"] = {sids[sid]: events for sid, events in got.items()}
    return out


def stall(port, seconds, paths):
    sock, conn = connect(port, send_preface=False)
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: BIG_WINDOW})
    sids = gets(conn, paths)
    start = time.monotonic()
    sock.sendall(conn.data_to_send() + WindowUpdateFrame(0, window_increment=BIG_WINDOW - 65535).serialize())
    time.sleep(seconds)
    body = {sid: 0 for sid in sids}
    ended, reset, goaway = [], [], []

    def on_frame(f):
        if isinstance(f, DataFrame) and f.stream_id in body:
            body[f.stream_id] += len(f.data)
        if f.stream_id in body and "END_STREAM" in f.flags:
            ended.append(sids[f.stream_id])
        if isinstance(f, RstStreamFrame) and f.stream_id in body:
            reset.append(sids[f.stream_id])
        if isinstance(f, GoAwayFrame):
            goaway.append(f.error_code)
        return len(ended) + len(reset) == len(sids)

    closed = read_frames(sock, on_frame) is True
    return {"body": {sids[sid]: n for sid, n in body.items()}, "ended": ended, "reset": reset, "goaway": goaway, "closed": closed,
            "seconds": round(time.monotonic() - start, 2)}


def churn(port, n, paths):
    for i in range(n):
        sock, conn = connect(port, send_preface=False)
        sids = gets(conn, paths)
        sock.sendall(conn.data_to_send())
        way = i % 3
        if way < 2:
            read_frames(sock, lambda f: isinstance(f, DataFrame), limit=5.0)
        if way == 0:
            try:
                sock.sendall(b"".join(RstStreamFrame(sid, error_code=8).serialize() for sid in list(sids)[::2]))
            except OSError:
                pass
            read_frames(sock, lambda f: False, limit=0.05)
        elif way == 1:  # SO_LINGER 0: the close sends a TCP reset
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    return goaway(port, paths, until_ended=True)


def main():
    port, what = sys.argv[1], sys.argv[2]
    if what == "goaway":
        out = goaway(port, sys.argv[3:])
    elif what == "stall":
        out = stall(port, float(sys.argv[3]), sys.argv[4:])
    elif what == "churn":
        out = churn(port, int(sys.argv[3]), sys.argv[4:])
    print(json.dumps(out), flush=True)


main()
