"""Shared by the integration tests: a `sluice serve` process on an ephemeral loopback port, and
small helpers (assertions that print, deterministic test files, MD5 of a file)."""
import hashlib
import random
import signal
import socket
import subprocess

MIB = 1024 * 1024


class Server:
    """`sluice serve` on 127.0.0.1:0 with one user (and `extra` arguments); start() reads the port."""

    def __init__(self, binary, root, access_key, secret_key, extra=()):
        self.binary, self.root, self.extra = binary, root, list(extra)
        self.access_key, self.secret_key = access_key, secret_key
        self.proc = None
        self.port = None

    def start(self):
        self.proc = subprocess.Popen([self.binary, "serve", "--root", self.root, "--listen", "127.0.0.1:0",
                                      "--access-key", self.access_key, "--secret-key", self.secret_key] + self.extra,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError("server did not start: " + line + self.proc.stdout.read())
        self.port = int(line.split("listening on ")[1].split(",")[0].rsplit(":", 1)[1])
        return self

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise RuntimeError("server did not stop within 20 s")


def expect(cond, what):
    if not cond:
        raise AssertionError(what)
    print("  ok:", what)


def make_file(path, size, seed):
    rnd = random.Random(seed)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, MIB)
            f.write(rnd.randbytes(n))
            left -= n
    return path


def md5(path):
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            h.update(block)
    return h.hexdigest()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
