# SPDX-License-Identifier: Apache-2.0
"""Shared by the integration tests: a `sluice serve` process on an ephemeral loopback port, and
small helpers (assertions that print, deterministic test files, MD5 of a file)."""
import hashlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

MIB = 1024 * 1024


class Server:
    """`sluice serve` on 127.0.0.1:0 (or `listen`) with one user (and `extra` arguments); start()
    reads the port, and what the server said before it (e.g. "sluice serve: rdma: shm, tcp;ofi_rxm")
    into `banner`. `prefix` runs the server under another command (e.g. ip netns exec NS)."""

    def __init__(self, binary, root, access_key, secret_key, extra=(), listen="127.0.0.1:0", prefix=()):
        self.binary, self.root, self.extra = binary, root, list(extra)
        self.access_key, self.secret_key = access_key, secret_key
        self.listen, self.prefix = listen, list(prefix)
        self.proc = None
        self.port = None
        self.banner = []

    def start(self):
        self.proc = subprocess.Popen(self.prefix + [self.binary, "serve", "--root", self.root, "--listen", self.listen,
                                                    "--access-key", self.access_key, "--secret-key", self.secret_key]
                                     + self.extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # The server may say other things first (the RDMA providers it opened).
        self.banner = []
        while True:
            line = self.proc.stdout.readline()
            if not line or "listening on" in line:
                break
            self.banner.append(line.rstrip("\n"))
        if "listening on" not in line:
            raise RuntimeError("server did not start: " + "\n".join(self.banner) + line + self.proc.stdout.read())
        self.port = int(line.split("listening on ")[1].split(",")[0].rsplit(":", 1)[1])
        self.ready_line = line.rstrip("\n")  # "... listening on HOST:PORT, <store or gateway>, ..."
        return self

    @property
    def host(self):
        return self.listen.rsplit(":", 1)[0]

    @property
    def url(self):
        return "http://%s:%d" % (self.host, self.port)

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("server did not stop within %d s" % timeout)


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
    return file_digest(path, hashlib.md5)


def sha256(path):
    return file_digest(path, hashlib.sha256)


def file_digest(path, algorithm):
    h = algorithm()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            h.update(block)
    return h.hexdigest()


def admin_metrics(server):
    """The text of a server's /metrics on its --admin-listen port (the port its banner names)."""
    port = next(int(m.group(1)) for m in (re.search(r"admin on [^ ]+:(\d+)", line) for line in server.banner) if m)
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as r:
        return r.read().decode()


def gateway_counts(server, everything=False):
    """(hits, misses) from a gateway's /metrics on its --admin-listen port; everything: and passthroughs."""
    text = admin_metrics(server)
    counts = {m.group(1): float(m.group(2))
              for m in re.finditer(r"^sluice_gateway_(hits|misses|passthroughs)_total (\S+)$", text, re.M)}
    if everything:
        return counts.get("hits", -1), counts.get("misses", -1), counts.get("passthroughs", -1)
    return counts.get("hits", -1), counts.get("misses", -1)


def sanitized(binary):
    """Whether `binary` is built with AddressSanitizer (GCC and clang's -shared-libsan link libasan
    dynamically)."""
    r = subprocess.run(["ldd", binary], capture_output=True, text=True)
    return "libasan" in r.stdout or "libclang_rt.asan" in r.stdout


def proc_status(pid, field):
    """A field of /proc/PID/status as text ("State" gives "T (stopped)"), or None once the process
    is gone (or has no such field)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def status_kib(pid, field):
    """A memory figure of /proc/PID/status in KiB ("RssAnon": the process's anonymous resident
    memory, not the file pages it maps; "RssShmem": its resident shared memory, mappings of memfds;
    "VmRSS", "VmHWM"); 0 once the process is gone."""
    value = proc_status(pid, field)
    return int(value.split()[0]) if value else 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_s3rver(script, data_dir, log_path, env=None, timeout=30):
    """npm s3rver on a port the kernel picks (`-p 0`), read back from its own "listening on" line:
    (process, url). Not a port chosen first and probed later (free_port), which another server
    could take in between and then answer the probe for it. Raises RuntimeError (with its log)
    when it exits or says nothing within `timeout` seconds."""
    log = open(log_path, "w")
    proc = subprocess.Popen(["node", script, "-d", data_dir, "-a", "127.0.0.1", "-p", "0"], stdout=log,
                            stderr=subprocess.STDOUT, env=env)
    log.close()
    deadline = time.time() + timeout
    while True:
        with open(log_path) as f:
            found = re.search(r"S3rver listening on 127\.0\.0\.1:(\d+)", f.read())
        if found:
            return proc, "http://127.0.0.1:%d" % int(found.group(1))
        if proc.poll() is not None or time.time() > deadline:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            with open(log_path) as f:
                raise RuntimeError("s3rver did not start: " + f.read()[-3000:])
        time.sleep(0.1)


def ensure_s3rver():
    """The path of npm s3rver's CLI script (client_vs_s3rver.py, gateway_test.py), installing it into
    $SLUICE_S3RVER_CACHE when missing; or (None, why)."""
    if not shutil.which("node") or not shutil.which("npm"):
        return None, "node and npm are not installed"
    cache = os.environ.get("SLUICE_S3RVER_CACHE", os.path.join(tempfile.gettempdir(), "sluice-npm-s3rver"))
    script = os.path.join(cache, "node_modules", "s3rver", "bin", "s3rver.js")
    if not os.path.exists(script):
        os.makedirs(cache, exist_ok=True)
        try:
            r = subprocess.run(["npm", "install", "--prefix", cache, "--no-save", "--no-audit", "--no-fund",
                                "s3rver@3.7"], capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return None, "npm install s3rver@3.7 timed out"
        if r.returncode != 0 or not os.path.exists(script):
            return None, "npm could not install s3rver@3.7: " + (r.stderr or r.stdout)[-800:]
    return script, None


def run_in_tmp(scenario, prefix, body):
    """Runs body(tmp) in a new temporary folder, removed after: 0 when it passed, 77 when it
    returned a reason to skip (printed)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        skipped = body(tmp)
        if skipped:
            print("SKIPPED: " + skipped)
            return 77
        print("PASSED: " + scenario)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_scenario(binary, scenario, prefix, access_key, secret_key, body):
    """Runs body(server, tmp) against a new `sluice serve` (no RDMA or grant plane) in a new
    temporary folder (run_in_tmp)."""
    def against_server(tmp):
        server = Server(binary, os.path.join(tmp, "root"), access_key, secret_key,
                        ["--fabric", "off", "--grant-socket", "off"]).start()
        try:
            print("%s against sluice serve on %s" % (scenario, server.url))
            return body(server, tmp)
        finally:
            server.stop()
    return run_in_tmp(scenario, prefix, against_server)
