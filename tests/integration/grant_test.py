#!/usr/bin/env python3
"""Same-host grants across processes, spoken by a second, independent implementation: this
script is the client. It opens sessions on `sluice serve`'s grant socket (SOCK_SEQPACKET, HMAC
proofs), passes memfds with SCM_RIGHTS, writes x-amz-rdma-token by hand and signs the S3 requests
with botocore's SigV4. Then it tries what a hostile local user would.

usage: grant_test.py SLUICE_BINARY [gateway]
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
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MIB, Server, expect, gateway_counts  # noqa: E402

SKIP = 77
USERS = {"alice": "alice-secret-key", "bob": "bob-secret-key"}
UP_AK, UP_SK = "SLUICEUPSTREAMAK", "sluice-upstream-secret"  # the upstream of `grant_test.py BINARY gateway`
HELLO, CHALLENGE, AUTH, WELCOME, MEMFD, DEVICE, GRANTED, RELEASE, ERROR = 1, 2, 3, 4, 5, 6, 7, 8, 0x7F


def proof(label, key, secret, client_nonce, server_nonce):
    msg = label + struct.pack("<H", len(key)) + key.encode() + client_nonce + server_nonce
    return hmac.new(secret.encode(), msg, hashlib.sha256).digest()


class Session:
    """One grant session: the handshake, then registrations."""

    def __init__(self, path, key, secret):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(5)
        self.sock.connect(path)
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
    status, _, body = part(etag)
    expect(status == 412 and error_code(body) == "PreconditionFailed",
           "If-Match of the version the gateway still holds: 412 PreconditionFailed, the upstream's answer (%d %s)" %
           (status, error_code(body)))
    status, headers, _ = part(new_etag)
    expect(status == 206 and headers.get("x-amz-rdma-reply") == "206" and a_map[4096:4096 + n] == newer[first:first + n],
           "If-Match of the upstream's version: 206 by grant, the new bytes (%d)" % status)


def main():
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
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.settimeout(5)
            s.connect(sock_path)
            s.send(packet)
            try:
                answer = s.recv(2048)
            except (ConnectionResetError, socket.timeout):
                answer = b""
            s.close()
            print("  ok: %s: answered %r, session dropped" % (what, answer[:1]))
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(sock_path)
        socket.send_fds(s, [b"\x01\x01\x05\x00alice" + bytes(32)], [a_fd, b_fd])  # descriptors with a hello
        s.settimeout(5)
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
