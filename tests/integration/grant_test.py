#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Same-host grants across processes, spoken by a second, independent implementation: this
script is the client. It opens sessions on `sluice serve`'s grant socket (SOCK_SEQPACKET, HMAC
proofs), passes memfds with SCM_RIGHTS, writes x-amz-rdma-token by hand and signs the S3 requests
with botocore's SigV4. Then it tries what a hostile local user would.

usage: grant_test.py SLUICE_BINARY [gateway|starve|sparse|toctou|socket-dir]
The scenarios of issue 37 (a hostile local process): `starve` (silent connections and one user's
sessions must not keep another user out), `sparse` (a sparse 4 GiB memfd allocates nothing in
the server and holds no one up), `toctou` (a PUT by grant stores what it hashed while the client
flips its memory), `socket-dir` (the default socket's private directory).
With `gateway`, the server is a gateway (`--upstream`) in front of a second `sluice serve`: every
object is cached by its write-through PUT, so each token meets a cache hit, whose copy moves into
the granted memory while the upstream is asked.
Exit 0: passed; 77: skipped (with the reason).
"""
import base64
import fcntl
import hashlib
import hmac
import http.client
import json
import mmap
import os
import random
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import stat
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MIB, Server, expect, gateway_counts, status_kib  # noqa: E402

SKIP = 77
USERS = {"alice": "alice-secret-key", "bob": "bob-secret-key"}
UP_AK, UP_SK = "SLUICEUPSTREAMAK", "sluice-upstream-secret"  # the upstream of `grant_test.py BINARY gateway`
HELLO, CHALLENGE, AUTH, WELCOME, MEMFD, DEVICE, GRANTED, RELEASE, ERROR = 1, 2, 3, 4, 5, 6, 7, 8, 0x7F


def proof(label, key, secret, client_nonce, server_nonce):
    msg = label + struct.pack("<H", len(key)) + key.encode() + client_nonce + server_nonce
    return hmac.new(secret.encode(), msg, hashlib.sha256).digest()


def grant_socket(path, timeout=5):
    """A connection to the grant socket as the library's client makes it: connect waits while
    the listen backlog is full, for `timeout` at most (SO_SNDTIMEO; a socket timeout would make
    Python's connect fail at once with EAGAIN)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", timeout, 0))
    try:
        s.connect(path)
    except OSError:
        s.close()
        raise
    s.settimeout(timeout)
    return s


class Session:
    """One grant session: the handshake, then registrations."""

    def __init__(self, path, key, secret):
        self.sock = grant_socket(path)
        nonce = secrets.token_bytes(32)
        self.sock.send(bytes([HELLO, 1]) + struct.pack("<H", len(key)) + key.encode() + nonce)
        answer = self.sock.recv(2048)
        if answer[0] != CHALLENGE:
            raise PermissionError("no challenge: %r" % answer[:64])
        server_nonce, server_proof = answer[1:33], answer[33:65]
        if not hmac.compare_digest(server_proof, proof(b"sluice-grant/1 server", key, secret, nonce, server_nonce)):
            raise PermissionError("the server did not prove it holds the secret")
        self.sock.send(bytes([AUTH]) + proof(b"sluice-grant/1 client", key, secret, nonce, server_nonce))
        if self.sock.recv(2048)[:1] != bytes([WELCOME]):
            raise PermissionError("not welcome")

    def register(self, fd, size):
        """The grant id, or raises with the server's error message."""
        socket.send_fds(self.sock, [struct.pack("<BQ", MEMFD, size)], [fd])
        answer = self.sock.recv(2048)
        if answer[0] != GRANTED:
            raise ValueError(answer[5:].decode(errors="replace"))
        return answer[1:17]

    def close(self):
        self.sock.close()


def shared_memory(size, name, seal=True):
    """A memfd of `size` bytes (sealed against shrinking, as the server requires) and its mapping."""
    fd = os.memfd_create(name, os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    os.ftruncate(fd, size)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd, mmap.mmap(fd, size)


def token(op, provider, grant, segments, expires=None):
    """x-amz-rdma-token, version 1 (docs/protocol.md): op 1 write (GET), 2 read (PUT)."""
    expires = expires or int(time.time()) + 600
    raw = bytes([1, op, 0, len(provider)]) + provider.encode() + struct.pack("<H", len(grant)) + grant
    raw += struct.pack("<QB", expires, len(segments))
    for address, length in segments:
        raw += struct.pack("<QQQ", address, length, 0)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def signed(server, method, path, key, headers, body=b""):
    """Sends a SigV4-signed request (every header signed, the token included): status, headers, body."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    request = AWSRequest(method=method, url=server.url + path, headers=dict(headers), data=body)
    S3SigV4Auth(Credentials(key, USERS.get(key) or UP_SK), "s3", "us-east-1").add_auth(request)
    conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
    conn.request(method, path, body=body, headers=dict(request.headers.items()))
    res = conn.getresponse()
    data = res.read()
    conn.close()
    return res.status, {k.lower(): v for k, v in res.getheaders()}, data


def headers_etag(headers):
    return headers.get("etag", headers.get("ETag", "")).strip('"')


def crc32c_b64(data):
    crc = 0xFFFFFFFF
    table = crc32c_b64.table
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return base64.b64encode((crc ^ 0xFFFFFFFF).to_bytes(4, "big")).decode()


crc32c_b64.table = [0] * 256
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    crc32c_b64.table[_i] = _c


def error_code(body):
    return body.split(b"<Code>")[1].split(b"</Code>")[0].decode() if b"<Code>" in body else body[:80].decode()


def mapped_memfds(pid, name):
    """How many mappings of memfds called `name` process `pid` holds."""
    with open("/proc/%d/maps" % pid) as f:
        return sum(1 for line in f if "/memfd:%s " % name in line or line.rstrip().endswith("/memfd:" + name)
                   or ("/memfd:%s (deleted)" % name) in line)


def if_match(server, upstream, alice_grant, a_map, data, etag):
    """A gateway's cache hit with If-Match, as every part of a parallel download after the first
    carries it: the copy moves while the upstream is asked, and the answer is the upstream's
    version's. The object is replaced behind the gateway's back (same size, other bytes)."""
    path, first, n = "/bucket-alice/obj", MIB, MIB
    tok = token(1, "local:memfd", alice_grant, [(4096, n)])

    def part(etag):
        return signed(server, "GET", path, "alice", {"x-amz-rdma-token": tok, "range": "bytes=%d-%d" % (first, first + n - 1),
                                                    "if-match": '"%s"' % etag})
    status, headers, _ = part(etag)
    expect(status == 206 and headers.get("x-amz-rdma-reply") == "206" and a_map[4096:4096 + n] == data[first:first + n],
           "a ranged GET with If-Match of the cached version: 206 by grant, byte-exact (%d)" % status)
    newer = random.Random(3).randbytes(len(data))
    status, headers, _ = signed(upstream, "PUT", path, UP_AK, {"x-amz-content-sha256": hashlib.sha256(newer).hexdigest()}, newer)
    expect(status == 200, "the object is replaced on the upstream, behind the gateway's back")
    new_etag = headers_etag(headers)
    time.sleep(1.2)  # past the gateway's if_match_trust_ms (1 s): If-Match of the old version asks again
    status, _, body = part(etag)
    expect(status == 412 and error_code(body) == "PreconditionFailed",
           "If-Match of the version the gateway still holds: 412 PreconditionFailed, the upstream's answer (%d %s)" %
           (status, error_code(body)))
    status, headers, _ = part(new_etag)
    expect(status == 206 and headers.get("x-amz-rdma-reply") == "206" and a_map[4096:4096 + n] == newer[first:first + n],
           "If-Match of the upstream's version: 206 by grant, the new bytes (%d)" % status)


def main():
    if len(sys.argv) == 3 and sys.argv[2] in SCENARIOS:
        return hostile(sys.argv[1], sys.argv[2])
    if len(sys.argv) not in (2, 3) or sys.argv[2:] not in ([], ["gateway"]):
        print(__doc__)
        return 2
    binary, gateway = sys.argv[1], sys.argv[2:] == ["gateway"]
    try:
        import botocore  # noqa: F401
    except ImportError:
        print("SKIPPED: grants: botocore is not installed")
        return SKIP
    sys.stdout.reconfigure(line_buffering=True)
    tmp = tempfile.mkdtemp(prefix="sluice-grants-")
    config = os.path.join(tmp, "server.json")
    with open(config, "w") as f:
        json.dump({"users": [{"access_key_id": k, "secret_access_key": v} for k, v in USERS.items()]}, f)
    sock_path = os.path.join(tmp, "grants.sock")
    upstream, extra = None, []
    if gateway:
        upstream = Server(binary, os.path.join(tmp, "upstream"), UP_AK, UP_SK,
                          extra=["--fabric", "off", "--grant-socket", "off"]).start()
        extra = ["--upstream", upstream.url, "--upstream-access-key", UP_AK, "--upstream-secret-key", UP_SK,
                 "--admin-listen", "127.0.0.1:0"]
    server = Server(binary, os.path.join(tmp, "root"), "alice", USERS["alice"],
                    extra=["--config", config, "--grant-socket", sock_path, "--fabric", "tcp"] + extra).start()
    try:
        if gateway:
            expect("gateway to " + upstream.url in server.ready_line, "a gateway: " + server.ready_line)
        print("sluice serve on %s (%s)" % (server.url, "; ".join(server.banner)))
        expect(any("grants: " + sock_path in line for line in server.banner), "the server announces its grant socket")
        expect(oct(os.stat(sock_path).st_mode & 0o777) == "0o666", "any local user may try to authenticate")
        for user in USERS:
            status, _, _ = signed(server, "PUT", "/bucket-" + user, user, {})
            expect(status == 200, "%s creates a bucket" % user)
        size = 8 * MIB + 5
        data = random.Random(1).randbytes(size)
        status, _, _ = signed(server, "PUT", "/bucket-alice/obj", "alice", {"x-amz-content-sha256": hashlib.sha256(data).hexdigest()}, data)
        expect(status == 200, "alice PUTs an 8 MiB object over HTTP")

        # -- handshakes ------------------------------------------------------------------
        try:
            Session(sock_path, "alice", "wrong-secret")
            raise AssertionError("a session with a wrong secret was accepted")
        except (PermissionError, ConnectionError, OSError):
            print("  ok: a wrong secret gets no session")
        try:
            Session(sock_path, "mallory", "x")
            raise AssertionError("an unknown key got a session")
        except (PermissionError, ConnectionError, OSError):
            print("  ok: an unknown access key gets no session")

        alice = Session(sock_path, "alice", USERS["alice"])
        bob = Session(sock_path, "bob", USERS["bob"])
        a_fd, a_map = shared_memory(16 * MIB, "grant-alice")
        a_grant = alice.register(a_fd, 16 * MIB)
        b_fd, b_map = shared_memory(4 * MIB, "grant-bob")
        b_map[:] = b"\x5a" * (4 * MIB)
        b_grant = bob.register(b_fd, 4 * MIB)
        expect(len(a_grant) == 16 and a_grant != b_grant, "each registration answers its own 16-byte grant id")

        # -- GET and PUT by grant ---------------------------------------------------------
        tok = token(1, "local:memfd", a_grant, [(4096, size)])
        status, headers, body = signed(server, "GET", "/bucket-alice/obj", "alice", {"x-amz-rdma-token": tok})
        expect(status == 200 and headers.get("x-amz-rdma-reply") == "200" and body == b"" and
               headers.get("x-amz-rdma-bytes-transferred") == str(size),
               "GET by memfd grant: 200, x-amz-rdma-reply 200, no body (%d %s)" % (status, headers.get("x-amz-rdma-reply")))
        expect(a_map[4096:4096 + size] == data and a_map[:4096] == bytes(4096) and
               a_map[4096 + size:4096 + size + 4096] == bytes(4096),
               "the object's bytes are exactly in the granted range, nothing around it touched")
        if gateway:
            if_match(server, upstream, a_grant, a_map, data, headers_etag(headers))

        put_payload = random.Random(2).randbytes(3 * MIB)
        a_map[0:len(put_payload)] = put_payload
        put_tok = token(2, "local:memfd", a_grant, [(0, len(put_payload))])
        md5 = base64.b64encode(hashlib.md5(put_payload).digest()).decode()
        status, headers, body = signed(server, "PUT", "/bucket-alice/put", "alice",
                                       {"x-amz-rdma-token": put_tok, "x-amz-decoded-content-length": str(len(put_payload)),
                                        "content-md5": md5, "x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
        expect(status == 200 and headers.get("x-amz-rdma-reply") == "200", "PUT by memfd grant: 200 (%d %s)" % (status, body[:200]))
        status, _, body = signed(server, "GET", "/bucket-alice/put", "alice", {})
        expect(status == 200 and body == put_payload, "the PUT stored exactly the granted bytes")
        expect(headers_etag(headers) == hashlib.md5(put_payload).hexdigest(), "with Content-MD5 the ETag is the MD5")
        # Without Content-MD5 (what a PUT from device memory sends) the server keeps a CRC32C
        # and answers an opaque ETag that no client mistakes for an MD5.
        status, headers, body = signed(server, "PUT", "/bucket-alice/put-nomd5", "alice",
                                       {"x-amz-rdma-token": put_tok, "x-amz-decoded-content-length": str(len(put_payload)),
                                        "x-amz-content-sha256": hashlib.sha256(put_tok.encode()).hexdigest()})
        etag = headers_etag(headers)
        expect(status == 200 and headers.get("x-amz-rdma-reply") == "200", "PUT by grant without Content-MD5: 200 (%d %s)" % (status, body[:200]))
        if gateway:  # the upstream's ETag: it received the bytes over HTTP and took their MD5
            expect(etag == hashlib.md5(put_payload).hexdigest(), "through a gateway its ETag is the upstream's (%r)" % etag)
        else:
            expect(len(etag) == 26 and all(c in "abcdefghijklmnopqrstuvwxyz234567" for c in etag) and any(c > "f" for c in etag),
                   "its ETag is 26 base32 characters, not an MD5 (%r)" % etag)
        status, headers, body = signed(server, "GET", "/bucket-alice/put-nomd5", "alice", {"x-amz-checksum-mode": "ENABLED"})
        crc = headers.get("x-amz-checksum-crc32c", "")
        expect(status == 200 and body == put_payload and headers_etag(headers) == etag, "it stored exactly the granted bytes")
        expect(crc and crc == crc32c_b64(put_payload), "and the CRC32C of them (%r)" % crc)

        # -- what a hostile local user tries ---------------------------------------------------
        before = bytes(a_map)
        bob_tok = token(1, "local:memfd", a_grant, [(0, size)])
        status, _, body = signed(server, "PUT", "/bucket-bob/x", "bob", {"x-amz-content-sha256": hashlib.sha256(data).hexdigest()}, data)
        status, _, body = signed(server, "GET", "/bucket-bob/x", "bob", {"x-amz-rdma-token": bob_tok})
        expect(status == 400 and error_code(body) == "InvalidRDMAToken" and bytes(a_map) == before,
               "bob's GET naming alice's grant: 400 InvalidRDMAToken, alice's buffer untouched (%d %s)" % (status, error_code(body)))
        steal = token(2, "local:memfd", a_grant, [(0, 4096)])
        status, _, body = signed(server, "PUT", "/bucket-bob/stolen", "bob",
                                 {"x-amz-rdma-token": steal, "x-amz-decoded-content-length": "4096",
                                  "x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
        status2, _, _ = signed(server, "GET", "/bucket-bob/stolen", "bob", {})
        expect(status == 400 and error_code(body) == "InvalidRDMAToken" and status2 == 404,
               "bob's PUT reading alice's grant: 400, nothing stored (%d, then GET %d)" % (status, status2))
        for what, segments in (("past the end", [(16 * MIB - 4096, size)]), ("an offset that wraps", [(2**64 - 4096, 4095)]),
                               ("a segment list shorter than the object", [(0, 4096)])):
            status, _, body = signed(server, "GET", "/bucket-alice/obj", "alice",
                                     {"x-amz-rdma-token": token(1, "local:memfd", a_grant, segments)})
            expect(status == 400 and error_code(body) == "InvalidRDMAToken" and bytes(a_map) == before,
                   "alice's GET with %s: 400 InvalidRDMAToken, nothing touched (%d %s)" % (what, status, error_code(body)))
        status, _, body = signed(server, "GET", "/bucket-alice/obj", "alice",
                                 {"x-amz-rdma-token": token(1, "local:memfd", secrets.token_bytes(16), [(0, size)])})
        expect(status == 400 and error_code(body) == "InvalidRDMAToken", "a forged grant id: 400 InvalidRDMAToken")
        expect(bytes(b_map) == b"\x5a" * (4 * MIB), "bob's granted buffer was never written by alice's requests")

        # Registrations the server must refuse: an unsealed memfd (a client could shrink it under
        # the server's mapping), a file under /dev/shm, a regular file, a size beyond the file.
        u_fd, _ = shared_memory(MIB, "grant-unsealed", seal=False)
        shm_path = "/dev/shm/sluice-grant-test-%d" % os.getpid()
        with open(shm_path, "wb") as f:
            f.write(b"\0" * MIB)
        plain = os.path.join(tmp, "plain")
        with open(plain, "wb") as f:
            f.write(b"\0" * MIB)
        for what, fd, n in (("an unsealed memfd", u_fd, MIB), ("a file under /dev/shm", os.open(shm_path, os.O_RDWR), MIB),
                            ("a regular file", os.open(plain, os.O_RDWR), MIB), ("a size beyond the memfd", a_fd, 32 * MIB)):
            try:
                alice.register(fd, n)
                raise AssertionError("the server granted " + what)
            except ValueError as e:
                print("  ok: %s is refused (%s)" % (what, e))
        os.unlink(shm_path)

        # Garbage on fresh sessions: the server drops them and lives.
        for what, packet in (("random bytes", secrets.token_bytes(64)), ("an oversized packet", b"\x01" * 5000),
                             ("a registration before the handshake", struct.pack("<BQ", MEMFD, 4096)), ("an empty packet", b"")):
            s = grant_socket(sock_path)
            s.send(packet)
            try:
                answer = s.recv(2048)
            except (ConnectionResetError, socket.timeout):
                answer = b""
            s.close()
            print("  ok: %s: answered %r, session dropped" % (what, answer[:1]))
        s = grant_socket(sock_path)
        socket.send_fds(s, [b"\x01\x01\x05\x00alice" + bytes(32)], [a_fd, b_fd])  # descriptors with a hello
        try:
            s.recv(2048)
        except (ConnectionResetError, socket.timeout):
            pass
        s.close()

        # After all that, another user's request still goes by grant.
        b2_fd, b2_map = shared_memory(size, "grant-bob2")
        b2_grant = bob.register(b2_fd, size)
        status, headers, _ = signed(server, "GET", "/bucket-bob/x", "bob",
                                    {"x-amz-rdma-token": token(1, "local:memfd", b2_grant, [(0, size)])})
        expect(status == 200 and headers.get("x-amz-rdma-reply") == "200" and bytes(b2_map) == data,
               "after every refusal, bob's next GET still moves by grant, byte-exact")

        # A released grant is unmapped; a client killed mid-transfer leaves nothing mapped.
        pid = server.proc.pid
        expect(mapped_memfds(pid, "grant-bob2") == 1, "the server maps a live grant once")
        bob.sock.send(bytes([RELEASE]) + b2_grant)
        time.sleep(0.3)
        expect(mapped_memfds(pid, "grant-bob2") == 0, "a released grant is unmapped by the server")
        big = 256 * MIB
        status, _, _ = signed(server, "PUT", "/bucket-alice/big", "alice", {"x-amz-content-sha256": "UNSIGNED-PAYLOAD"},
                              os.urandom(big))
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--victim", sock_path, server.url],
                                 stdout=subprocess.PIPE, text=True)
        line = child.stdout.readline()
        expect(line.startswith("registered") and mapped_memfds(pid, "grant-victim") == 1,
               "a second client process registers its buffer: the server maps it")
        time.sleep(0.05)  # its GET is under way
        child.kill()
        child.wait()
        deadline = time.monotonic() + 30
        while mapped_memfds(pid, "grant-victim") and time.monotonic() < deadline:
            time.sleep(0.1)
        expect(mapped_memfds(pid, "grant-victim") == 0, "the killed client's grant is freed by the server")
        status, headers, _ = signed(server, "GET", "/bucket-alice/obj", "alice", {"x-amz-rdma-token": tok})
        expect(status == 200 and headers.get("x-amz-rdma-reply") == "200", "and the server keeps serving grants")
        alice.close()
        time.sleep(0.3)
        expect(mapped_memfds(pid, "grant-alice") == 0, "a closed session's grants are unmapped")
        expect(server.proc.poll() is None, "the server is alive")
        if gateway:  # the objects were cached by their write-through PUTs: every GET met its copy
            hits, misses = gateway_counts(server)
            expect(hits >= 8 and misses == 1, "every GET but the replaced version's first met the cached copy: %d hits, %d misses" % (hits, misses))
        server.stop()
        print("PASSED: grants")
        return 0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
        if upstream:
            upstream.stop()
        shutil.rmtree(tmp, ignore_errors=True)


# -- issue 37: what a hostile local process tries against the grant socket ----------------------

NOBODY = 65534


def as_other_user():
    """The uid a second local user's processes run as: nobody when this test runs as root (as CI
    does), else this same uid (then the attacks come from the victim's own uid, the harder case
    for the handshake slots; the per-user session cap needs a second uid and is then skipped)."""
    return NOBODY if os.geteuid() == 0 else None


def start_server(binary, tmp, extra=()):
    config = os.path.join(tmp, "server.json")
    with open(config, "w") as f:
        json.dump({"users": [{"access_key_id": k, "secret_access_key": v} for k, v in USERS.items()]}, f)
    sock_path = os.path.join(tmp, "grants.sock")
    os.chmod(tmp, 0o755)  # another local user's processes reach the socket, as they would in /tmp
    server = Server(binary, os.path.join(tmp, "root"), "alice", USERS["alice"],
                    extra=["--config", config, "--grant-socket", sock_path, "--fabric", "off"] + list(extra)).start()
    return server, sock_path


def timed_session(sock_path, key):
    """Seconds to a working session of `key`, or raises."""
    started = time.monotonic()
    s = Session(sock_path, key, USERS[key])
    took = time.monotonic() - started
    s.close()
    return took


# What another local user's processes run: self-contained (the other user may not read this
# checkout), with the system's python3 (it may not reach this interpreter either).
CHILD = r"""
import hashlib, hmac, secrets, socket, struct, sys, time


def proof(label, key, secret, a, b):
    return hmac.new(secret.encode(), label + struct.pack("<H", len(key)) + key.encode() + a + b, hashlib.sha256).digest()


def session(path, key, secret):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 5, 0))  # connect waits, 5 s at most
    s.connect(path)
    s.settimeout(5)
    nonce = secrets.token_bytes(32)
    s.send(bytes([1, 1]) + struct.pack("<H", len(key)) + key.encode() + nonce)
    answer = s.recv(2048)
    if answer[:1] != b"\x02":
        raise PermissionError("no challenge: %r" % answer[5:80])
    s.send(b"\x03" + proof(b"sluice-grant/1 client", key, secret, nonce, answer[1:33]))
    answer = s.recv(2048)
    if answer[:1] != b"\x04":
        raise PermissionError("not welcome: %r" % answer[5:80])
    return s


def connect(path):
    # Connected once the server accepted it; None when the listen backlog is full (EAGAIN at once:
    # the flood tries again on its next round).
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(2)
    try:
        s.connect(path)
    except OSError:
        s.close()
        return None
    s.setblocking(False)
    return s


def flood(path, count):
    # Holds `count` connections that never speak, and opens a new one for each the server closes.
    conns = []
    while len(conns) < count:
        c = connect(path)
        if c is not None:
            conns.append(c)
    print("flooding %d" % len(conns), flush=True)
    while True:
        time.sleep(0.05)
        for i, c in enumerate(conns):
            try:
                if c.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) != b"":
                    continue
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                pass
            c.close()
            conns[i] = connect(path) or conns[i]


def hog(path, key, secret):
    # Opens sessions until the server refuses one; holds them.
    held, why = [], ""
    while len(held) < 1000:
        try:
            held.append(session(path, key, secret))
        except Exception as e:
            why = "%s: %s" % (type(e).__name__, e)
            break
    print("holding %d (%s)" % (len(held), why), flush=True)
    time.sleep(600)


if sys.argv[1] == "flood":
    flood(sys.argv[2], int(sys.argv[3]))
else:
    hog(sys.argv[2], sys.argv[3], sys.argv[4])
"""


def spawn(args, user=None):
    """CHILD in a process of its own (as `user` when given); its first line."""
    python = "/usr/bin/python3" if user is not None and os.path.exists("/usr/bin/python3") else sys.executable
    child = subprocess.Popen([python, "-c", CHILD] + args, stdout=subprocess.PIPE, text=True, user=user, cwd="/")
    return child, child.stdout.readline().strip()


def scenario_starve(binary, tmp):
    """Finding 2: 300 silent connections (no credentials) must not keep another user out, and one
    local user cannot hold every session."""
    server, sock_path = start_server(binary, tmp)
    children = []
    try:
        other = as_other_user()
        flood, line = spawn(["flood", sock_path, "300"], user=other)
        children.append(flood)
        expect(line == "flooding 300", "another local process holds 300 silent connections (%s, uid %s)" %
               (line, other if other is not None else "the same"))
        times, failures = [], []
        for attempt in range(18):
            key = "bob" if attempt % 2 else "alice"
            try:
                times.append(timed_session(sock_path, key))
            except Exception as e:  # noqa: BLE001
                failures.append("%s: %s" % (type(e).__name__, e))
        expect(not failures, "18 of 18 sessions opened while the silent connections stay (%d refused: %s)" %
               (len(failures), failures[:3]))
        expect(max(times) < 1.0, "each within 1 s (slowest %.3f s)" % max(times))
        if other is None:
            print("  skipped: the per-user session cap needs a second uid (run as root)")
        else:
            flood.kill()  # the cap, alone
            hog, line = spawn(["hog", sock_path, "alice", USERS["alice"]], user=other)
            children.append(hog)
            held = int(line.split()[1]) if line.startswith("holding ") else -1
            expect(0 < held < 256, "one local user holds only its own share of the sessions: %s" % line)
            took = timed_session(sock_path, "bob")
            expect(took < 1.0, "another local user still opens a session, in %.3f s" % took)
        expect(server.proc.poll() is None, "the server is alive")
    finally:
        for c in children:
            c.kill()
            c.wait()
        server.stop()


def scenario_sparse(binary, tmp):
    """Finding 3: registering a sparse 4 GiB memfd allocates nothing in the server, holds no one
    up, and counts against the mapped-bytes budgets."""
    server, sock_path = start_server(binary, tmp)
    try:
        pid = server.proc.pid
        alice = Session(sock_path, "alice", USERS["alice"])
        fd, _ = shared_memory(4 << 30, "grant-sparse")  # ftruncate only: no page written
        before = status_kib(pid, "RssShmem")
        result = {}

        def register():
            started = time.monotonic()
            try:
                result["grant"] = alice.register(fd, 4 << 30)
            except Exception as e:  # noqa: BLE001
                result["error"] = e
            result["took"] = time.monotonic() - started
        worker = threading.Thread(target=register)
        worker.start()
        time.sleep(0.005)  # the registration is on its way to the server
        took = timed_session(sock_path, "bob")
        worker.join(60)
        grown = status_kib(pid, "RssShmem") - before
        expect("grant" in result, "a 4 GiB sparse memfd is granted (%r)" % result.get("error"))
        expect(grown < 64 * 1024, "the server allocated none of it: its shared memory grew %d MiB" % (grown // 1024))
        expect(result["took"] < 1.0, "the registration is answered within 1 s (%.3f s)" % result["took"])
        expect(took < 1.0, "another user's session opened meanwhile within 1 s (%.3f s)" % took)
        # The mapped size counts whether or not it was written: past the per-user budget (16 GiB
        # by default) the server refuses, and nothing more is mapped.
        granted, refused = 1, ""
        while granted < 8 and not refused:
            try:
                alice.register(fd, 4 << 30)
                granted += 1
            except ValueError as e:
                refused = str(e)
        expect(granted == 4 and "maps too much" in refused,
               "4 x 4 GiB fill alice's local user's budget; the fifth is refused (%d, %r)" % (granted, refused))
        expect(status_kib(pid, "RssShmem") - before < 64 * 1024, "and still nothing of them is allocated by the server")
        # The budget is the local user's (this uid's): its grants end with alice's session, and
        # bob's buffer of the same uid is then granted.
        alice.close()
        bob = Session(sock_path, "bob", USERS["bob"])
        b_fd, _ = shared_memory(MIB, "grant-bob-after")
        deadline, answer = time.monotonic() + 5, None
        while answer is None and time.monotonic() < deadline:
            try:
                answer = bob.register(b_fd, MIB)
            except ValueError:
                time.sleep(0.05)
        expect(answer is not None, "once alice's session closed, its budget is free again: bob's buffer is granted")
        bob.close()
        expect(server.proc.poll() is None, "the server is alive")
    finally:
        server.stop()


def scenario_toctou(binary, tmp):
    """Finding 4: a client flips a page of its memfd while it PUTs by grant; every object stored
    must be exactly the bytes its ETag (the MD5 the server computed) says."""
    server, sock_path = start_server(binary, tmp)
    stop = threading.Event()
    try:
        status, _, _ = signed(server, "PUT", "/bucket-alice", "alice", {})
        expect(status == 200, "alice creates a bucket")
        alice = Session(sock_path, "alice", USERS["alice"])
        size = 16 * MIB
        fd, m = shared_memory(size, "grant-toctou")
        data = random.Random(5).randbytes(size)
        m[:] = data
        grant = alice.register(fd, size)
        md5 = hashlib.md5(data)
        headers = {"x-amz-rdma-token": token(2, "local:memfd", grant, [(0, size)]),
                   "x-amz-decoded-content-length": str(size), "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
                   "content-md5": base64.b64encode(md5.digest()).decode()}
        # One byte in each 8 MiB piece flips between its value and its complement, all the time.
        spots = [(at, data[at]) for at in range(4096 + 17, size, 8 * MIB)]

        def flip():
            while not stop.is_set():
                for at, v in spots:
                    m[at] = v ^ 0xFF
                for at, v in spots:
                    m[at] = v
        flipper = threading.Thread(target=flip, daemon=True)
        flipper.start()
        stored, bad_digest, wrong = 0, 0, []
        for i in range(40):
            status, answer, body = signed(server, "PUT", "/bucket-alice/o%d" % i, "alice", headers)
            if status == 400 and error_code(body) == "BadDigest":
                bad_digest += 1  # the server saw a flipped byte in what it hashed: refused
                continue
            if status != 200:
                raise AssertionError("a PUT by grant is stored or refused BadDigest, not %d %s" % (status, body[:200]))
            stored += 1
            status, got, body = signed(server, "GET", "/bucket-alice/o%d" % i, "alice", {})
            if status != 200 or hashlib.md5(body).hexdigest() != headers_etag(got) or body != data:
                wrong.append(i)
        stop.set()
        flipper.join()
        print("  %d stored, %d refused BadDigest" % (stored, bad_digest))
        expect(not wrong, "every stored object is exactly the bytes its ETag says, the client's own (%d of %d wrong: %s)" %
               (len(wrong), stored, wrong))
        expect(stored > 0, "some PUTs were stored (%d)" % stored)
        expect(server.proc.poll() is None, "the server is alive")
    finally:
        stop.set()
        server.stop()


def scenario_socket_dir(binary, tmp):
    """Finding 5: the default socket lives in a private directory; another local user cannot stop
    `sluice serve` from starting, nor have it use a directory that is not its own."""
    users = os.path.join(tmp, "users.json")
    with open(users, "w") as f:
        json.dump({"users": [{"access_key_id": k, "secret_access_key": v} for k, v in USERS.items()]}, f)
    with socket.socket() as s:  # a free port, so that the old default path can be taken first
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    old = "/tmp/sluice-%d.sock" % port
    runtime = os.path.join(tmp, "run")
    os.mkdir(runtime, 0o700)
    saved = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = runtime

    def serve():
        return Server(binary, os.path.join(tmp, "root"), "alice", USERS["alice"], listen="127.0.0.1:%d" % port,
                      extra=["--config", users, "--fabric", "off"]).start()
    try:
        # Another local user takes the old default path first.
        with open(old, "w") as f:
            f.write("not a socket")
        if os.geteuid() == 0:
            os.chown(old, NOBODY, NOBODY)
        try:
            server = serve()
        except RuntimeError as e:
            raise AssertionError("sluice serve did not start with %s taken: %s" % (old, e))
        want = os.path.join(runtime, "sluice", "sluice-%d.sock" % port)
        expect(any(("grants: " + want) in line for line in server.banner),
               "it starts, with its grant socket in $XDG_RUNTIME_DIR/sluice/: %s" % server.banner)
        st = os.lstat(os.path.dirname(want))
        expect(stat.S_ISDIR(st.st_mode) and st.st_mode & 0o777 == 0o700 and st.st_uid == os.geteuid(),
               "which it made, mode 0700, its own (%o)" % (st.st_mode & 0o777))
        Session(want, "bob", USERS["bob"]).close()
        print("  ok: a client finds it there and opens a session")
        server.stop()
        # Directories that are not the server's own private one are refused, never used; the
        # server still starts, without grants, and says why.
        private = os.path.join(runtime, "sluice")
        shutil.rmtree(private)
        elsewhere = os.path.join(tmp, "elsewhere")
        os.mkdir(elsewhere, 0o700)
        cases = [("a symlink to a directory", lambda: os.symlink(elsewhere, private)),
                 ("a directory of mode 0777", lambda: (os.mkdir(private), os.chmod(private, 0o777)))]
        if os.geteuid() == 0:
            cases.append(("a directory of another user", lambda: (os.mkdir(private, 0o700), os.chown(private, NOBODY, NOBODY))))
        for what, make in cases:
            make()
            server = serve()
            expect(any("grants off" in line and "0700" in line for line in server.banner) and
                   not os.path.exists(os.path.join(private, "sluice-%d.sock" % port)),
                   "%s is refused; the server starts without grants and says why" % what)
            server.stop()
            if os.path.islink(private):
                os.unlink(private)
            else:
                shutil.rmtree(private)
        expect(not os.listdir(elsewhere), "nothing was made through the symlink")
        # Without $XDG_RUNTIME_DIR: /tmp/sluice-UID/.
        del os.environ["XDG_RUNTIME_DIR"]
        server = serve()
        want = "/tmp/sluice-%d/sluice-%d.sock" % (os.geteuid(), port)
        expect(any(("grants: " + want) in line for line in server.banner), "without $XDG_RUNTIME_DIR: %s" % want)
        st = os.lstat(os.path.dirname(want))
        expect(st.st_mode & 0o777 == 0o700 and st.st_uid == os.geteuid(), "a 0700 directory of the server's user")
        server.stop()
        expect(not os.path.exists(want), "the socket is removed when the server stops")
    finally:
        if saved is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = saved
        if os.path.exists(old):
            os.unlink(old)


SCENARIOS = {"starve": scenario_starve, "sparse": scenario_sparse, "toctou": scenario_toctou,
             "socket-dir": scenario_socket_dir}


def hostile(binary, scenario):
    try:
        import botocore  # noqa: F401  (toctou signs its requests with it)
    except ImportError:
        if scenario == "toctou":
            print("SKIPPED: grants.toctou: botocore is not installed")
            return SKIP
    sys.stdout.reconfigure(line_buffering=True)
    tmp = tempfile.mkdtemp(prefix="sluice-grants-%s-" % scenario)
    try:
        SCENARIOS[scenario](binary, tmp)
        print("PASSED: grants.%s" % scenario)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def victim(sock_path, url):
    """A client that registers a buffer, starts a 256 MiB GET into it and waits to be killed."""
    host, port = url[len("http://"):].rsplit(":", 1)
    server = Server.__new__(Server)
    server.listen, server.port = host + ":0", int(port)
    s = Session(sock_path, "alice", USERS["alice"])
    fd, _ = shared_memory(256 * MIB, "grant-victim")
    grant = s.register(fd, 256 * MIB)
    print("registered", flush=True)
    signed(server, "GET", "/bucket-alice/big", "alice", {"x-amz-rdma-token": token(1, "local:memfd", grant, [(0, 256 * MIB)])})
    time.sleep(60)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--victim":
        victim(sys.argv[2], sys.argv[3])
        sys.exit(0)

    sys.exit(main())
