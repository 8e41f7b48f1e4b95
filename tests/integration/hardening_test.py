#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The server's front door, tried as an attacker on loopback would: raw sockets and requests
signed here (SigV4, standard library only) against a real `sluice serve`.
  hardening_test.py SLUICE_BINARY SCENARIO
SCENARIO: framing | limits | names | full | tls | config-fifo | config-zero | access-log-symlink
  framing  Transfer-Encoding (RFC 9112 §6): any coding list not ending in one chunked, or with
           Content-Length, is 400 (501 for codings not decoded) and closes the connection, so a
           request hidden in the body never runs; chunked, pipelining, HTTP/1.0 and bad
           Content-Lengths keep their answers; malformed presigned parameters are S3's
           AuthorizationQueryParametersError
  limits   a stalled header section is dropped after read_timeout, and so is a GET whose reader
           stops reading its 32 MiB body, while an idle connection lives until idle_timeout; one
           client address holds at most max_connections_per_address; readers that reset or
           half-close mid-body leave the server serving; the body's readers both by sendfile
           ("sendfile": "always") and written from the store's mapping (the loopback default);
           with four io threads: slowloris on every thread leaves requests beside it answered at
           once, a flood past max_connections is refused at once, 1,000 pipelined requests get
           1,000 answers
  names    keys a plain listing cannot carry (NUL, control characters, invalid UTF-8) are refused
           at PUT and the listing stays parseable; AWS's reserved bucket names are refused;
           `sluice ls` prints keys with control characters escaped
  full     a full disk (a small tmpfs in a mount namespace) answers InsufficientStorage to an
           RDMA PUT and an HTTP PUT, stores nothing, and the next PUT that fits succeeds
  tls      `sluice serve --tls-cert --tls-key` beside plain HTTP: curl, boto3, the AWS CLI (v1
           and v2) and sluice's own client (`sluice put/get/ls --ca-bundle`) with the test's CA
           round-trip objects over HTTPS and refuse the server without it; plain HTTP or a silent
           client on the TLS port is dropped, the server keeps serving
  config-fifo
           a FIFO put at the --config path: the SIGHUP reload refuses it at once (no writer is
           awaited), keeps the users, and SIGTERM then stops the server within 5 s; a FIFO as
           --config at start is refused at once
  config-zero
           a symbolic link to /dev/zero put at the --config path, then a file over 1 MiB: each
           SIGHUP refuses it with the path and the reason, RSS stays within 16 MiB of where it was,
           the users stay; a valid file is then taken. /dev/zero, a link to it and the large file
           as --config at start are refused at once, with a peak RSS at most 64 MiB over that of
           the server started normally before (the same binary: ASan's shadow memory is not a read)
  access-log-symlink
           --access-log naming a symbolic link (to a file, and dangling) is refused at start and
           nothing is written through it; a link put at the path after logrotate moved the log
           away is refused by the SIGHUP reopen, and the lines go on to the file already open
Exit 0: passed; 77: skipped (the reason printed); anything else: failed."""
import datetime
import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import struct
import sys
import tempfile
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MIB, Server, expect, status_kib  # noqa: E402

AK, SK = "HARDAK", "hard-secret-key"
SKIP = 77


def sign(method, host, path, query="", headers=None, payload_hash="UNSIGNED-PAYLOAD", ak=AK, sk=SK):
    """SigV4 header auth of a request by user `ak` (secret `sk`), computed independently of sluice.
    `path` is already URI-encoded; returns the header list (name, value) to send, Host first."""
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    date = amz_date[:8]
    hs = [("host", host), ("x-amz-content-sha256", payload_hash), ("x-amz-date", amz_date)]
    hs += [(k.lower(), v) for k, v in (headers or [])]
    hs.sort()
    signed = ";".join(k for k, _ in hs)
    params = sorted(urllib.parse.parse_qsl(query, keep_blank_values=True))
    cq = "&".join("%s=%s" % (urllib.parse.quote(k, safe="-_.~"), urllib.parse.quote(v, safe="-_.~")) for k, v in params)
    canonical = "\n".join([method, path, cq, "".join("%s:%s\n" % (k, v.strip()) for k, v in hs), signed, payload_hash])
    scope = "%s/us-east-1/s3/aws4_request" % date
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + sk).encode()
    for part in (date, "us-east-1", "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
    out = [("Host", host), ("x-amz-content-sha256", payload_hash), ("x-amz-date", amz_date)]
    out += list(headers or [])
    out.append(("Authorization", "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s" % (ak, scope, signed, sig)))
    return out


def raw(method, host, target, headers, body=b"", version="HTTP/1.1"):
    head = "%s %s %s\r\n" % (method, target, version) + "".join("%s: %s\r\n" % h for h in headers) + "\r\n"
    return head.encode("latin-1") + body


def signed(method, host, path, query="", headers=None, body=b"", version="HTTP/1.1", extra_unsigned=None, ak=AK, sk=SK):
    hs = sign(method, host, path, query, headers, ak=ak, sk=sk)
    hs += list(extra_unsigned or [])
    return raw(method, host, path + ("?" + query if query else ""), hs, body, version)


def exchange(port, data, wait=5.0):
    """Sends `data`, then reads until the server closes or `wait` seconds pass; returns (bytes,
    closed)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(data)
    s.settimeout(wait)
    got = b""
    closed = False
    deadline = time.time() + wait
    try:
        while time.time() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                closed = True
                break
            got += chunk
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    s.close()
    return got, closed


def read_response(sock):
    """One HTTP response with a Content-Length body from a kept-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head + b"\r\n\r\n" + rest


def seconds_until_dropped(sock, limit=15):
    """Waits for the server to close (or reset) `sock`; returns the seconds it took."""
    sock.settimeout(limit)
    start = time.time()
    try:
        sock.recv(4096)
    except (ConnectionResetError, socket.timeout):
        pass
    return time.time() - start


def statuses(reply):
    """The status of every response in `reply` (a body may end where the next status line starts)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.[01] (\d{3}) ", reply)]


def status_of(port, method, host, path, query="", headers=None, body=b"", ak=AK, sk=SK):
    reply, _ = exchange(port, signed(method, host, path, query, headers, body,
                                     extra_unsigned=[("Content-Length", str(len(body))), ("Connection", "close")],
                                     ak=ak, sk=sk))
    codes = statuses(reply)
    return (codes[0] if codes else None), reply


def test_framing(server):
    port, host = server.port, "127.0.0.1:%d" % server.port
    expect(status_of(port, "PUT", host, "/frame")[0] == 200, "CreateBucket")
    expect(status_of(port, "PUT", host, "/frame/victim", body=b"precious")[0] == 200, "PUT the victim object")
    smuggled = signed("DELETE", host, "/frame/victim", extra_unsigned=[("Content-Length", "0")])
    cases = [("identity", 400), ("gzip", 400), ("foo", 400), ("chunked, identity", 400), ("chunked, chunked", 400),
             ("gzip, chunked", 501), (",", 400)]
    for i, (coding, want) in enumerate(cases):
        key = "/frame/smuggle-%d" % i
        request = signed("PUT", host, key, extra_unsigned=[("Transfer-Encoding", coding)], body=smuggled)
        reply, closed = exchange(port, request)
        expect(statuses(reply) == [want] and closed,
               "Transfer-Encoding: %s → one answer, %d, and the connection closed (got %s)" % (coding, want, statuses(reply)))
        expect(status_of(port, "GET", host, key)[0] == 404, "Transfer-Encoding: %s → nothing stored" % coding)
        expect(status_of(port, "GET", host, "/frame/victim")[0] == 200,
               "Transfer-Encoding: %s → the DELETE in its body did not run" % coding)
    # Transfer-Encoding with Content-Length: no "Transfer-Encoding wins" leniency.
    body = b"5\r\nhello\r\n0\r\n\r\n"
    request = signed("PUT", host, "/frame/both", extra_unsigned=[("Transfer-Encoding", "chunked"),
                                                                 ("Content-Length", str(len(body)))], body=body)
    reply, closed = exchange(port, request)
    expect(statuses(reply) == [400] and closed, "Transfer-Encoding and Content-Length → 400 and close (got %s)" % statuses(reply))
    expect(status_of(port, "GET", host, "/frame/both")[0] == 404, "Transfer-Encoding and Content-Length → nothing stored")
    # A plain chunked PUT (no x-amz-decoded-content-length) is refused as S3 refuses it: 411.
    request = signed("PUT", host, "/frame/chunked", extra_unsigned=[("Transfer-Encoding", "chunked")],
                     body=b"6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n" + smuggled)
    reply, closed = exchange(port, request)
    expect(statuses(reply) == [411] and b"MissingContentLength" in reply and closed,
           "Transfer-Encoding: chunked without a decoded length → 411 MissingContentLength, and close")
    expect(status_of(port, "GET", host, "/frame/victim")[0] == 200, "the DELETE after that chunked body did not run")
    # Pipelining and HTTP/1.0 keep working.
    expect(status_of(port, "PUT", host, "/frame/second", body=b"second")[0] == 200, "PUT a second object")
    two = signed("GET", host, "/frame/victim") + signed("GET", host, "/frame/second", extra_unsigned=[("Connection", "close")])
    reply, _ = exchange(port, two)
    expect(statuses(reply) == [200, 200] and reply.index(b"precious") < reply.index(b"second"),
           "two pipelined GETs → two answers, in order")
    reply, closed = exchange(port, signed("GET", host, "/frame/victim", version="HTTP/1.0"))
    expect(statuses(reply) == [200] and reply.endswith(b"precious") and closed, "HTTP/1.0 GET → answered, then closed")
    # Content-Length: duplicate and different, negative, huge: refused, nothing stored.
    for i, lengths in enumerate([["3", "4"], ["-1"], ["99999999999999999999999"]]):
        key = "/frame/length-%d" % i
        reply, closed = exchange(port, signed("PUT", host, key, extra_unsigned=[("Content-Length", n) for n in lengths],
                                              body=b"abcd"))
        code = statuses(reply)[0] if statuses(reply) else None
        expect(code == 400 and closed, "Content-Length %s → 400 and close (got %s)" % (", ".join(lengths), code))
        expect(status_of(port, "GET", host, key)[0] == 404, "Content-Length %s → nothing stored" % ", ".join(lengths))
    # A malformed presigned URL: S3's AuthorizationQueryParametersError.
    reply, _ = exchange(port, raw("GET", host, "/frame/victim?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=x&X-Amz-Signature=y",
                                  [("Host", host), ("Connection", "close")]))
    expect(statuses(reply) == [400] and b"<Code>AuthorizationQueryParametersError</Code>" in reply,
           "malformed presigned parameters → 400 AuthorizationQueryParametersError")


def hold_then_one_more(port, host, count, what):
    """Opens `count` connections, each served and kept alive, then one more that the server must
    close at once (`what`); returns (held, the extra one)."""
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    for s_ in held:
        s_.settimeout(10)
        s_.sendall(signed("GET", host, "/"))
        expect(read_response(s_).startswith(b"HTTP/1.1 200"), "a held connection is served and kept alive")
    extra = socket.create_connection(("127.0.0.1", port))
    extra.settimeout(3)  # shorter than the idle timeout: an accepted connection would not close before
    try:
        refused = extra.recv(4096) == b""
    except ConnectionResetError:
        refused = True
    except socket.timeout:
        refused = False
    expect(refused, what)
    return held, extra


def test_limits(server):
    """The server runs with read_timeout 2 s, idle_timeout 8 s, max_connections_per_address 4."""
    port, host = server.port, "127.0.0.1:%d" % server.port
    stalled = socket.create_connection(("127.0.0.1", port))
    stalled.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n")  # never finishes its header section
    took = seconds_until_dropped(stalled)
    expect(took < 5, "a header section that stalls is dropped after read_timeout (2 s), not idle_timeout (8 s): %.1f s" % took)
    idle = socket.create_connection(("127.0.0.1", port))
    time.sleep(4)  # longer than read_timeout, shorter than idle_timeout
    idle.sendall(signed("GET", host, "/", extra_unsigned=[("Connection", "close")]))
    idle.settimeout(10)
    reply = b""
    while True:
        chunk = idle.recv(65536)
        if not chunk:
            break
        reply += chunk
    expect(statuses(reply) == [200], "an idle connection is still served after 4 s (idle_timeout 8 s)")
    idle.close()
    time.sleep(0.5)  # the server has ended the connections above
    # Each one accepted and served (kept alive): four counted for this address.
    held, extra = hold_then_one_more(port, host, 4, "a fifth connection from one address "
                                                    "(max_connections_per_address 4) is closed at once")
    held[0].sendall(signed("GET", host, "/"))
    expect(read_response(held[0]).startswith(b"HTTP/1.1 200"), "the four held connections are still served")
    for s_ in held + [extra]:
        s_.close()
    time.sleep(0.3)
    expect(status_of(port, "GET", host, "/")[0] == 200, "once they close, the address is served again")
    readers_that_stop(server)


def test_threads(server):
    """Hostile clients against every io thread: the server runs io_threads 4 (a connection is
    dealt to each loop in turn), read_timeout 2 s, max_connections 12."""
    port, host = server.port, "127.0.0.1:%d" % server.port
    # Slowloris on every loop: 8 header sections that never finish, two on each thread. A
    # well-formed request meanwhile is answered at once, and each stalled one is dropped after
    # read_timeout.
    stalled = []
    for _ in range(8):
        s_ = socket.create_connection(("127.0.0.1", port))
        s_.sendall(b"GET / HTTP/1.1\r\nHost: h\r\nX-Slow: ")
        stalled.append(s_)
    for _ in range(4):  # each lands on another loop
        start = time.time()
        code = status_of(port, "GET", host, "/")[0]
        expect(code == 200 and time.time() - start < 1.0,
               "a request beside 8 stalled header sections is answered at once (%d in %.2f s)" % (code, time.time() - start))
    start = time.time()
    took = max(seconds_until_dropped(s_, limit=10) for s_ in stalled)
    expect(took < 5, "each stalled header section is dropped after read_timeout (2 s): the last at %.1f s" % (time.time() - start))
    for s_ in stalled:
        s_.close()
    time.sleep(0.3)
    # A flood past max_connections, spread over the loops: 12 held and served, the 13th closed at once.
    held, extra = hold_then_one_more(port, host, 12, "a 13th connection (max_connections 12) is closed at once")
    for s_ in held + [extra]:
        s_.close()
    time.sleep(0.3)
    # 1,000 requests pipelined in one write: 1,000 answers, in order, and the next client is served.
    pipelined = socket.create_connection(("127.0.0.1", port))
    pipelined.sendall(b"".join(signed("GET", host, "/") for _ in range(1000)))
    pipelined.settimeout(30)
    reply, answered = b"", []
    while len(answered) < 1000:
        chunk = pipelined.recv(1 << 20)
        if not chunk:
            break
        reply += chunk
        answered = statuses(reply)
    pipelined.close()
    expect(answered == [200] * 1000, "1,000 pipelined requests: 1,000 answers of 200 (%d, %s)" %
           (len(answered), sorted(set(answered))))
    expect(status_of(port, "GET", host, "/")[0] == 200, "the next client is served")


def whole_get(port, host, path):
    """A GET on a connection of its own, read until the server closes it: the whole answer."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(signed("GET", host, path, extra_unsigned=[("Connection", "close")]))
        s.settimeout(30)
        reply = bytearray()  # read as fast as it comes (bytes += would copy it all at every chunk)
        while chunk := s.recv(1 << 20):
            reply += chunk
    return reply


def readers_that_stop(server):
    """Against a server with read_timeout 2 s."""
    port, host = server.port, "127.0.0.1:%d" % server.port
    # A GET whose reader stops reading: the body waits for room in the socket at most
    # read_timeout, then the connection is dropped; a reader that reads gets it all.
    big = os.urandom(32 << 20)  # more than loopback's socket buffers hold
    expect(status_of(port, "PUT", host, "/limits")[0] == 200, "CreateBucket")
    expect(status_of(port, "PUT", host, "/limits/big", body=big)[0] == 200, "PUT 32 MiB")
    lazy = socket.create_connection(("127.0.0.1", port))
    lazy.sendall(signed("GET", host, "/limits/big"))
    time.sleep(5)  # read_timeout 2 s
    lazy.settimeout(10)
    got, start = b"", time.time()
    try:
        while time.time() - start < 10:
            chunk = lazy.recv(1 << 20)
            if not chunk:
                break
            got += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    lazy.close()
    expect(b"HTTP/1.1 200" in got[:64] and len(got) < len(big) and time.time() - start < 10,
           "a reader that stops reading is dropped after read_timeout (%d of %d bytes came)" % (len(got), len(big)))
    reply = whole_get(port, host, "/limits/big")
    expect(statuses(bytes(reply[:64])) == [200] and reply.endswith(big), "the next reader of it gets all of it, byte-exact")
    # Readers that go away mid-body (a reset, with bytes unread): the server lives on and serves the
    # next (sendfile, which has no MSG_NOSIGNAL, raised SIGPIPE here before the server blocked it).
    # A half-closed one (its FIN first, then the reset) makes the next write fail with EPIPE.
    for half_closed in (False, True, False, True):
        gone = socket.create_connection(("127.0.0.1", port))
        gone.sendall(signed("GET", host, "/limits/big"))
        if half_closed:
            gone.shutdown(socket.SHUT_WR)
        expect(gone.recv(1 << 20).startswith(b"HTTP/1.1 200"), "a GET's answer begins")
        gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        gone.close()
    time.sleep(0.5)
    expect(server.proc.poll() is None, "the server lives after readers reset their connections mid-body")
    reply = whole_get(port, host, "/limits/big")
    expect(statuses(bytes(reply[:64])) == [200] and reply.endswith(big), "and serves the object whole to the next")


def test_names(server, binary):
    port, host = server.port, "127.0.0.1:%d" % server.port
    expect(status_of(port, "PUT", host, "/names")[0] == 200, "CreateBucket")
    for name in ["xn--bucket", "sthree-bucket", "bucket-s3alias", "bucket--ol-s3", "amzn-s3-demo-bucket"]:
        code, reply = status_of(port, "PUT", host, "/" + name)
        expect(code == 400 and b"InvalidBucketName" in reply, "reserved bucket name %s → 400 InvalidBucketName" % name)
    for encoded in ["a%00b", "a%01b", "esc%1B%5B31m", "bad%FF", "overlong%C0%AF", "surrogate%ED%A0%80", "nonchar%EF%BF%BE"]:
        code, reply = status_of(port, "PUT", host, "/names/" + encoded, body=b"x")
        expect(code == 400 and b"InvalidArgument" in reply, "key %s → 400 InvalidArgument" % encoded)
        expect(status_of(port, "GET", host, "/names/" + encoded)[0] == 404, "key %s → nothing stored" % encoded)
    for encoded in ["tab%09and%0Anewline%0D", "caf%C3%A9", "emoji%F0%9F%98%80", "plain"]:
        expect(status_of(port, "PUT", host, "/names/" + encoded, body=b"y")[0] == 200, "key %s is accepted" % encoded)
    code, reply = status_of(port, "GET", host, "/names", query="list-type=2")
    body = reply.split(b"\r\n\r\n", 1)[1]
    keys = [e.text for e in ET.fromstring(body).iter("{http://s3.amazonaws.com/doc/2006-03-01/}Key")]
    expect(code == 200 and "caf\u00e9" in keys and "emoji\U0001F600" in keys,
           "a plain listing (no encoding-type) is XML that parses, with every key (%d)" % len(keys))
    code, reply = status_of(port, "GET", host, "/names", query="encoding-type=url&list-type=2")
    expect(code == 200 and b"tab%09and%0Anewline%0D" in reply, "a listing with encoding-type=url URL-encodes the keys")
    r = subprocess.run([binary, "ls", "s3://names/", "--endpoint", server.url, "--access-key", AK, "--secret-key", SK],
                       capture_output=True, text=True, timeout=60)
    lines = r.stdout.splitlines()
    expect(r.returncode == 0 and any(l.endswith("tab\\x09and\\x0anewline\\x0d") for l in lines) and len(lines) == 4,
           "sluice ls prints the key with control characters escaped, one line per key: %r" % lines)


def test_full(binary, tmp):
    if not shutil.which("unshare"):
        return "unshare is not installed"
    root = os.path.join(tmp, "small")
    os.makedirs(root)
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", "mount -t tmpfs -o size=4m tmpfs %s" % root],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return "cannot mount a tmpfs in a mount namespace here: " + probe.stderr.strip()
    # The server runs in a mount namespace whose store is a 24 MiB tmpfs: sh mounts it ($0), then
    # execs the server command common.Server appends ("$@").
    mount_first = ["unshare", "--mount", "sh", "-c", 'mount -t tmpfs -o size=24m tmpfs "$0" && exec "$@"', root]
    server = Server(binary, os.path.join(root, "store"), AK, SK, ["--fabric", "tcp", "--grant-socket", "off"],
                    prefix=mount_first).start()
    url = server.url
    try:
        def cli(*args):
            return subprocess.run([binary] + list(args) + ["--endpoint", url, "--access-key", AK, "--secret-key", SK],
                                  capture_output=True, text=True, timeout=120)
        expect(cli("mb", "s3://full").returncode == 0, "CreateBucket on the small store")
        big = os.path.join(tmp, "big")
        with open(big, "wb") as f:
            f.write(os.urandom(40 * 1024 * 1024))
        for via in ("rdma", "http"):
            r = cli("put", big, "s3://full/big-" + via, "--via", via, "--fabric", "tcp")
            said = r.stdout + r.stderr
            expect(r.returncode != 0 and "InsufficientStorage" in said and "RDMANotSupported" not in said,
                   "a PUT --via %s that fills the disk fails with InsufficientStorage: %s" % (via, said.strip()[-200:]))
            expect(cli("ls", "s3://full/").stdout.strip() == "", "nothing was stored by the PUT --via %s" % via)
        small = os.path.join(tmp, "small-file")
        with open(small, "wb") as f:
            f.write(os.urandom(1024 * 1024))
        r = cli("put", small, "s3://full/small", "--via", "rdma", "--fabric", "tcp")
        expect(r.returncode == 0, "then a PUT that fits succeeds (the failed ones left no space taken): %s" % r.stderr[-300:])
    finally:
        server.stop()
    return None


def test_tls(binary, tmp):
    if not shutil.which("openssl") or not shutil.which("curl"):
        return "openssl or curl is not installed"
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    config = os.path.join(tmp, "server.json")
    with open(config, "w") as f:
        f.write('{"read_timeout_s": 2}')
    server = Server(binary, os.path.join(tmp, "root"), AK, SK,
                    ["--fabric", "off", "--grant-socket", "off", "--tls-cert", cert, "--tls-key", key,
                     "--tls-listen", "127.0.0.1:0", "--config", config]).start()
    try:
        line = [l for l in server.banner if "https on" in l][0]
        port = int(line.split("https on ")[1].split(" ")[0].rsplit(":", 1)[1])
        url = "https://localhost:%d" % port
        print("tls against sluice serve on %s (and %s)" % (url, server.url))
        curl = ["curl", "-sS", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", AK + ":" + SK,
                "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-o", "/dev/null", "-w", "%{http_code}"]
        expect(subprocess.run(curl + ["--cacert", cert, "-X", "PUT", url + "/tls-bucket"], capture_output=True,
                              text=True).stdout == "200", "curl over HTTPS: CreateBucket")
        src = os.path.join(tmp, "src")
        with open(src, "wb") as f:
            f.write(os.urandom(3 * 1024 * 1024 + 5))
        expect(subprocess.run(curl + ["--cacert", cert, "-T", src, url + "/tls-bucket/k"], capture_output=True,
                              text=True).stdout == "200", "curl over HTTPS: PutObject 3 MiB")
        out = os.path.join(tmp, "out")
        r = subprocess.run(curl[:-4] + ["--cacert", cert, "-o", out, url + "/tls-bucket/k"], capture_output=True)
        expect(r.returncode == 0 and open(out, "rb").read() == open(src, "rb").read(), "curl over HTTPS: GetObject byte-exact")
        r = subprocess.run(curl + [url + "/tls-bucket/k"], capture_output=True, text=True)
        expect(r.returncode == 60, "curl without the test's CA refuses the server's certificate (exit %d)" % r.returncode)
        r = subprocess.run(curl + ["--cacert", cert, "--resolve", "other.example:%d:127.0.0.1" % port,
                                   "https://other.example:%d/" % port], capture_output=True, text=True)
        expect(r.returncode == 60, "curl refuses a host name the certificate does not name (exit %d)" % r.returncode)
        # sluice's own client: put (single and multipart), get (whole and parallel ranged), ls over
        # HTTPS with --ca-bundle; without it (the system's CAs) the certificate is refused at once.
        def sluice(*args, ca=True):
            return subprocess.run([binary] + list(args) + ["--endpoint", url, "--access-key", AK, "--secret-key", SK,
                                                           "--no-progress"] + (["--ca-bundle", cert] if ca else []),
                                  capture_output=True, text=True, timeout=120)
        big = os.path.join(tmp, "big")
        with open(big, "wb") as f:
            f.write(os.urandom(20 * 1024 * 1024 + 7))
        for name, path in (("small", src), ("big", big)):
            r = sluice("put", path, "s3://tls-bucket/sluice-" + name)
            expect(r.returncode == 0, "sluice put over HTTPS with --ca-bundle (%s): %s" % (name, (r.stdout + r.stderr)[-300:]))
            back = os.path.join(tmp, "back-" + name)
            r = sluice("get", "s3://tls-bucket/sluice-" + name, back, "--via", "http")
            expect(r.returncode == 0 and open(back, "rb").read() == open(path, "rb").read(),
                   "sluice get over HTTPS (%s) byte-exact: %s" % (name, (r.stdout + r.stderr)[-300:]))
        r = sluice("ls", "s3://tls-bucket/")
        expect(r.returncode == 0 and "sluice-small" in r.stdout and "sluice-big" in r.stdout,
               "sluice ls over HTTPS lists both objects: %s" % (r.stdout + r.stderr)[-300:])
        start = time.time()
        r = sluice("ls", "s3://tls-bucket/", ca=False)
        expect(r.returncode != 0 and "TLS certificate verification failed" in r.stderr and time.time() - start < 10,
               "sluice ls without --ca-bundle refuses the certificate, at once: %s" % r.stderr.strip()[-300:])
        r = sluice("get", "s3://tls-bucket/sluice-small", os.path.join(tmp, "nope"), ca=False)
        expect(r.returncode != 0 and "TLS certificate verification failed" in r.stderr
               and not os.path.exists(os.path.join(tmp, "nope")),
               "sluice get without --ca-bundle refuses the certificate: %s" % r.stderr.strip()[-300:])
        r = subprocess.run([binary, "ls", "--endpoint", url, "--ca-bundle", os.path.join(tmp, "missing.pem")],
                           capture_output=True, text=True, timeout=60)
        expect(r.returncode == 2 and "ca_bundle" in r.stderr, "a --ca-bundle that cannot be read is a usage error: %s"
               % r.stderr.strip()[-300:])
        # boto3 with the CA bundle; then with no CA it fails verification.
        script = """
import sys, boto3, botocore
from botocore.config import Config
url, ak, sk, cert = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=url, aws_access_key_id=ak, aws_secret_access_key=sk, region_name="us-east-1",
                  verify=cert, config=Config(s3={"addressing_style": "path"}))
s3.put_object(Bucket="tls-bucket", Key="boto", Body=b"x" * 100000)
assert s3.get_object(Bucket="tls-bucket", Key="boto")["Body"].read() == b"x" * 100000
assert "boto" in [o["Key"] for o in s3.list_objects_v2(Bucket="tls-bucket")["Contents"]]
bad = boto3.client("s3", endpoint_url=url, aws_access_key_id=ak, aws_secret_access_key=sk, region_name="us-east-1",
                   config=Config(retries={"max_attempts": 1}))
try:
    bad.list_buckets()
    print("NOT REFUSED")
except botocore.exceptions.SSLError:
    print("refused")
"""
        if subprocess.run(["/usr/bin/python3", "-c", "import boto3"], capture_output=True).returncode == 0:
            r = subprocess.run(["/usr/bin/python3", "-c", script, url, AK, SK, cert], capture_output=True, text=True,
                               timeout=120)
            expect(r.returncode == 0 and r.stdout.strip() == "refused",
                   "boto3 over HTTPS with verify=CA: put, get, list; without the CA: SSLError (%s)" % (r.stdout + r.stderr)[-300:])
        else:
            print("  (boto3 is not installed: its part is not run)")
        env = dict(os.environ, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK, AWS_DEFAULT_REGION="us-east-1",
                   AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
        for aws in [shutil.which("aws", path=os.path.expanduser("~/.pyenv/shims") + ":/usr/local/bin"), "/usr/bin/aws"]:
            if not aws or not os.path.exists(aws):
                continue
            ep = [aws, "--endpoint-url", url, "--ca-bundle", cert]
            r = subprocess.run(ep + ["s3", "cp", src, "s3://tls-bucket/aws"], env=env, capture_output=True, text=True, timeout=120)
            expect(r.returncode == 0, "%s s3 cp over HTTPS with --ca-bundle: %s" % (aws, r.stderr[-300:]))
            r = subprocess.run(ep + ["s3", "cp", "s3://tls-bucket/aws", out], env=env, capture_output=True, text=True, timeout=120)
            expect(r.returncode == 0 and open(out, "rb").read() == open(src, "rb").read(),
                   "%s s3 cp back over HTTPS: byte-exact" % aws)
            # One attempt: the CLI's retries of a failed handshake (with backoff) add seconds, not a check.
            r = subprocess.run([aws, "--endpoint-url", url, "s3", "ls", "s3://tls-bucket/"],
                               env=dict(env, AWS_MAX_ATTEMPTS="1"), capture_output=True, text=True, timeout=120)
            expect(r.returncode != 0 and "SSL" in r.stderr, "%s without the CA refuses the server" % aws)
        # Plain HTTP to the TLS port, and a client that never starts its handshake: dropped.
        reply, closed = exchange(port, b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        expect(closed and not reply.startswith(b"HTTP/1.1 200"), "plain HTTP on the TLS port is dropped")
        silent = socket.create_connection(("127.0.0.1", port))
        expect(seconds_until_dropped(silent, 10) < 6, "a client that never sends its TLS hello is dropped after read_timeout")
        expect(subprocess.run(curl + ["--cacert", cert, url + "/tls-bucket/k"], capture_output=True, text=True).stdout == "200",
               "HTTPS still served afterwards")
        expect(status_of(server.port, "GET", "127.0.0.1:%d" % server.port, "/tls-bucket/k")[0] == 200,
               "the plain HTTP listener serves the same store")
    finally:
        server.stop()
    return None


# --- files the operator names (issue 37, finding 7) ------------------------------------------

class Watched:
    """`sluice serve ARGS` whose output (stdout and stderr) a thread reads into `lines`, so that a
    server stuck in a read can be watched (its RSS, its messages) and killed."""

    def __init__(self, binary, args):
        self.proc = subprocess.Popen([binary, "serve"] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines = []
        self.peak_rss = 0
        self.killed_for_rss = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def _settle(self):
        """Once the server has exited, waits for the reader to take its last lines (it ends at EOF):
        what it said is then all there, however loaded the machine."""
        if self.proc.poll() is not None:
            self.reader.join(timeout=10)

    def rss(self):
        return status_kib(self.proc.pid, "VmRSS") * 1024

    def output(self):
        self._settle()
        return "\n".join(self.lines)

    def wait(self, seconds, until, rss_limit=None):
        """Polls until `until()` holds (True) or `seconds` pass (False). A server whose RSS passes
        `rss_limit` bytes is killed at once (False): a read without a bound must not take the host."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            rss = self.rss()
            self.peak_rss = max(self.peak_rss, rss)
            if rss_limit is not None and rss > rss_limit:
                self.killed_for_rss = True
                self.kill()
                return False
            if until():
                return True
            time.sleep(0.02)
        return until()

    def said(self, needle):
        self._settle()
        return any(needle in line for line in self.lines)

    def wait_for_line(self, needle, seconds=5, rss_limit=None):
        return self.wait(seconds, lambda: self.said(needle), rss_limit)

    def exited_within(self, seconds, rss_limit=None):
        if self.wait(seconds, lambda: self.proc.poll() is not None, rss_limit) and not self.killed_for_rss:
            self._settle()
            return True
        return False

    def port(self):
        for line in self.lines:
            if "listening on " in line:
                return int(line.split("listening on ")[1].split(",")[0].rsplit(":", 1)[1])
        return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def serve_args(tmp, extra):
    return ["--root", os.path.join(tmp, "root"), "--listen", "127.0.0.1:0", "--access-key", AK, "--secret-key", SK,
            "--fabric", "off", "--grant-socket", "off"] + extra


def start_watched(binary, tmp, extra):
    server = Watched(binary, serve_args(tmp, extra))
    if not server.wait_for_line("listening on", 20) or server.port() is None:
        server.kill()
        raise AssertionError("server did not start: " + server.output())
    return server


def write_users(path, users):
    """The --config file with `users`, replaced in one rename (as an operator's tool would)."""
    with open(path + ".tmp", "w") as f:
        json.dump({"users": [{"access_key_id": a, "secret_access_key": s} for a, s in users]}, f)
    os.replace(path + ".tmp", path)


def place(path, make):
    """Puts what `make(tmp_path)` creates (a FIFO, a link) at `path` in one rename."""
    if os.path.lexists(path + ".new"):
        os.remove(path + ".new")
    make(path + ".new")
    os.replace(path + ".new", path)


def served_as(server, ak, sk):
    """The status of ListBuckets signed by `ak`: 200 while the server knows the user."""
    return status_of(server.port(), "GET", "127.0.0.1:%d" % server.port(), "/", ak=ak, sk=sk)[0]


def refused_at_start(binary, tmp, extra, needles, rss_limit=None):
    """Starts `sluice serve` with `extra`, expects it to exit non-zero within 5 s saying every
    one of `needles`; returns the watched process (for its peak RSS)."""
    server = Watched(binary, serve_args(tmp, extra))
    try:
        exited = server.exited_within(5, rss_limit)
        what = " ".join(extra)
        if server.killed_for_rss:
            raise AssertionError("%s: RSS passed %d MiB while reading (killed)" % (what, rss_limit // MIB))
        expect(exited, "%s: the server exits within 5 s instead of waiting (%s)" % (what, server.output()[-300:]))
        expect(server.proc.returncode != 0 and all(server.said(n) for n in needles),
               "%s: refused (exit %s) saying %s: %s" % (what, server.proc.returncode, needles, server.output()[-300:]))
    finally:
        server.kill()
    return server


def test_config_fifo(binary, tmp):
    config = os.path.join(tmp, "config.json")
    write_users(config, [("ALICE", "alice-secret")])
    server = start_watched(binary, tmp, ["--config", config])
    try:
        expect(served_as(server, "ALICE", "alice-secret") == 200, "ALICE of --config is served")
        place(config, os.mkfifo)
        server.proc.send_signal(signal.SIGHUP)
        said = server.wait_for_line("users unchanged", 3)
        # The server's io threads go on serving either way; what the FIFO took is the thread that
        # waits for signals, so SIGTERM is the test (before issue 37 the server never exited).
        alice = served_as(server, "ALICE", "alice-secret")
        server.proc.send_signal(signal.SIGTERM)
        stopped = server.exited_within(5)
        expect(stopped, "SIGHUP with a FIFO at --config, then SIGTERM: the server exits within 5 s")
        expect(said and server.said("not a regular file") and server.said(config),
               "the reload refused the FIFO at once, naming it: %s" % server.output()[-400:])
        expect(alice == 200, "ALICE, of the config before, was still served after the refused reload")
    finally:
        server.kill()
    refused_at_start(binary, tmp, ["--config", config], [config, "not a regular file"])
    return None


def test_config_zero(binary, tmp):
    config = os.path.join(tmp, "config.json")
    big = os.path.join(tmp, "big.json")
    with open(big, "w") as f:
        f.write("{}" + " " * MIB)  # 1 MiB + 2 bytes of valid JSON
    write_users(config, [("ALICE", "alice-secret")])
    server = start_watched(binary, tmp, ["--config", config])
    try:
        expect(served_as(server, "ALICE", "alice-secret") == 200, "ALICE of --config is served")
        start_rss = server.rss()
        limit = start_rss + 256 * MIB  # where the test stops a server that reads without a bound
        place(config, lambda p: os.symlink("/dev/zero", p))
        server.proc.send_signal(signal.SIGHUP)
        said = server.wait_for_line("users unchanged", 3, rss_limit=limit)
        server.wait(0.5, lambda: False, rss_limit=limit)  # a read still going on shows here
        # Before issue 37 the server read /dev/zero into memory for ever (20-90 MiB/s in the dev build).
        expect(not server.killed_for_rss and server.peak_rss < start_rss + 16 * MIB,
               "SIGHUP with a link to /dev/zero at --config: RSS stays within 16 MiB of where it was"
               " (%d MiB → peak %d MiB)" % (start_rss // MIB, server.peak_rss // MIB))
        expect(said and server.said("not a regular file"),
               "the reload refused the link to /dev/zero at once: %s" % server.output()[-400:])
        expect(served_as(server, "ALICE", "alice-secret") == 200, "ALICE is still served: the old users kept")

        count = len([line for line in server.lines if "users unchanged" in line])
        place(config, lambda p: shutil.copyfile(big, p))
        server.proc.send_signal(signal.SIGHUP)
        expect(server.wait(3, lambda: len([l for l in server.lines if "users unchanged" in l]) > count, limit)
               and server.said("larger than 1 MiB"),
               "a config file over 1 MiB is refused naming the limit: %s" % server.output()[-300:])
        expect(served_as(server, "ALICE", "alice-secret") == 200, "ALICE is still served")

        write_users(config, [("BOB", "bob-secret")])
        server.proc.send_signal(signal.SIGHUP)
        expect(server.wait_for_line("SIGHUP: 2 users", 3), "a valid file is then taken (BOB and the --access-key user)")
        expect(served_as(server, "BOB", "bob-secret") == 200 and served_as(server, "ALICE", "alice-secret") == 403,
               "BOB is served, ALICE no longer")
        server.proc.send_signal(signal.SIGTERM)
        expect(server.exited_within(5), "SIGTERM stops the server within 5 s")
    finally:
        server.kill()
    # At start the bound is relative to `start_rss`, the RSS of the server above (started normally
    # by the same binary, one request served): a build's own footprint is not the read's (under
    # AddressSanitizer, shadow memory alone makes a normal server's RSS about 220 MiB). A server
    # that reads /dev/zero goes past 64 MiB more within the 5 s it is given (or is killed at 256).
    zero_link = os.path.join(tmp, "zero.json")
    os.symlink("/dev/zero", zero_link)
    for path in ["/dev/zero", zero_link]:
        watched = refused_at_start(binary, tmp, ["--config", path], [path, "not a regular file"],
                                   rss_limit=start_rss + 256 * MIB)
        expect(watched.peak_rss - start_rss <= 64 * MIB,
               "--config %s: peak RSS %d MiB, at most 64 MiB over a normally started server's %d MiB"
               % (path, watched.peak_rss // MIB, start_rss // MIB))
    refused_at_start(binary, tmp, ["--config", big], [big, "larger than 1 MiB, the most a configuration file may hold"])
    return None


def test_access_log_symlink(binary, tmp):
    target = os.path.join(tmp, "precious")
    with open(target, "w") as f:
        f.write("precious\n")
    link, dangling = os.path.join(tmp, "access.log"), os.path.join(tmp, "dangling.log")
    os.symlink(target, link)
    os.symlink(os.path.join(tmp, "created-through-link"), dangling)
    for path in [link, dangling]:
        server = Watched(binary, serve_args(tmp, ["--access-log", path]))
        try:
            server.wait(5, lambda: server.proc.poll() is not None or server.port() is not None)
            if server.port() is not None:  # a server that takes the link (before issue 37): stop it
                served_as(server, AK, SK)
                server.proc.send_signal(signal.SIGTERM)
                server.exited_within(5)
            expect(server.proc.poll() is not None and server.proc.returncode != 0 and server.said(path)
                   and server.said("symbolic link"),
                   "--access-log %s (a symbolic link) is refused at start: %s" % (path, server.output()[-300:]))
        finally:
            server.kill()
    expect(open(target).read() == "precious\n", "the link's target is untouched")
    expect(not os.path.lexists(os.path.join(tmp, "created-through-link")), "nothing is created through a dangling link")

    # logrotate moves the log away; a link is put in its place before the SIGHUP that reopens it.
    log, rotated = os.path.join(tmp, "logs", "access.log"), os.path.join(tmp, "logs", "access.log.1")
    os.makedirs(os.path.dirname(log))
    server = start_watched(binary, tmp, ["--access-log", log])
    try:
        expect(served_as(server, AK, SK) == 200, "a request before the rotation")
        os.rename(log, rotated)
        os.symlink(target, log)
        server.proc.send_signal(signal.SIGHUP)
        expect(server.wait_for_line("SIGHUP: no --config file", 3), "the SIGHUP was handled")
        expect(server.said("symbolic link"), "the reopen refused the link: %s" % server.output()[-300:])
        expect(served_as(server, AK, SK) == 200, "a request after the refused reopen")
        server.proc.send_signal(signal.SIGTERM)
        expect(server.exited_within(5), "SIGTERM stops the server within 5 s")
    finally:
        server.kill()
    expect(open(target).read() == "precious\n", "the link's target is untouched after the reopen")
    lines = open(rotated).read().splitlines()
    expect(len(lines) == 2 and all("ListBuckets" in line for line in lines),
           "both requests are in the file open before: %s" % lines)
    return None


def main():
    binary, scenario = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="sluice-hardening-")
    try:
        if scenario == "full":
            skipped = test_full(binary, tmp)
        elif scenario == "tls":
            skipped = test_tls(binary, tmp)
        elif scenario in ("config-fifo", "config-zero", "access-log-symlink"):
            skipped = {"config-fifo": test_config_fifo, "config-zero": test_config_zero,
                       "access-log-symlink": test_access_log_symlink}[scenario](binary, tmp)
        else:
            extra = []
            if scenario == "limits":
                config = os.path.join(tmp, "server.json")
                with open(config, "w") as f:
                    # sendfile for every peer: this test's clients are on loopback, where the
                    # default (remote peers only) would write the body from the mapping.
                    f.write('{"read_timeout_s": 2, "idle_timeout_s": 8, "max_connections_per_address": 4, '
                            '"sendfile": "always"}')
                extra = ["--config", config]
            server = Server(binary, os.path.join(tmp, "root"), AK, SK, ["--fabric", "off", "--grant-socket", "off"] + extra).start()
            try:
                print("%s against sluice serve on %s" % (scenario, server.url))
                skipped = {"framing": lambda: test_framing(server), "limits": lambda: test_limits(server),
                           "names": lambda: test_names(server, binary)}[scenario]()
                if scenario == "limits":
                    # The same readers with the body written from the store's mapping (the default
                    # for loopback peers) instead of by sendfile.
                    server.stop()
                    with open(config, "w") as f:
                        f.write('{"read_timeout_s": 2}')
                    server = Server(binary, os.path.join(tmp, "root2"), AK, SK,
                                    ["--fabric", "off", "--grant-socket", "off", "--config", config]).start()
                    print("limits, bodies written from the mapping")
                    readers_that_stop(server)
                    server.stop()
                    with open(config, "w") as f:
                        f.write('{"read_timeout_s": 2, "max_connections": 12, "max_connections_per_address": 100, '
                                '"io_threads": 4}')
                    server = Server(binary, os.path.join(tmp, "root3"), AK, SK,
                                    ["--fabric", "off", "--grant-socket", "off", "--config", config]).start()
                    print("limits, four io threads")
                    test_threads(server)
            finally:
                server.stop()
        if skipped:
            print("SKIPPED: " + skipped)
            return SKIP
        print("PASSED: " + scenario)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
