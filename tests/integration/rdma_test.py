#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The x-amz-rdma-token data plane across processes: a real `sluice serve --fabric P` and the sluice
CLI (or rdma_probe, a client that hand-makes one request) in other processes, on each libfabric
provider:  rdma_test.py SLUICE_BINARY RDMA_PROBE SCENARIO

Scenarios (each one CTest test):
  sizes.P       put and get --via rdma of 0, 1, 4095, 8 MiB + 1 and 256 MiB bytes, byte-exact, all by RDMA
  multipart.P   a 40 MiB object: several RDMA parts each way, ranged GETs by RDMA (rdma_probe range)
  decline       a server with --fabric off: --via auto falls back to HTTP, --via rdma fails and stores nothing
  interop.P     an object put by RDMA reads back byte-exact with curl --aws-sigv4, and the other way round
  probe.P       rdma_probe: ranges; expired, short, tampered and unsigned tokens are refused untouched
  vanish.P      clients that exit with a GET by RDMA in flight (mid-transfer, and right after sending it):
                the server keeps serving, gets its staging buffers back, stays bounded and stops on SIGTERM
  hostile.P     tokens with a garbage endpoint, a wrong key, an address outside the registration: each
                request fails or is declined, the server lives, the next GET goes by RDMA at once
  unreachable.P two senders of tokens naming one peer that refuses connections (127.0.0.1:1), for
                60 s: the server lives and serves GETs by RDMA throughout, and its memory stays within
                64 MiB of where it started across 25 and more endpoint replacements; shm: 12 senders
                naming an exited process's endpoint for 30 s do not stall other users' GETs
  gateway-probe.P, gateway-hostile.P
                probe.P and hostile.P against a gateway (`sluice serve --upstream` in front of a
                second `sluice serve`): the objects are cached by their write-through PUT, so each
                token meets a cache hit, whose copy moves while the upstream is asked
  netns         server and client in two network namespaces joined by a veth pair, tcp;ofi_rxm
  netns_multihomed  as netns, with a second interface on the client's side that the server cannot reach
P is tcp or shm. Exit 0: passed; 77: skipped (a missing tool or privilege, with the reason);
anything else: failed."""
import datetime
import glob
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (MIB, Server, admin_metrics, expect, gateway_counts, make_file, proc_status, sanitized,  # noqa: E402
                    sha256, status_kib)

AK, SK = "SLUICERDMAAK", "sluice-rdma-secret"
# Every server's --shutdown-grace: at a test's SIGTERM, what is still in flight (a transfer to a
# client that vanished) is cut after GRACE s; the stop then takes seconds, not operation_timeout.
GRACE = 2
ACCESS_LOG = "access.jsonl"  # the server's, in the test's directory (json lines)
UP_AK, UP_SK = "SLUICEUPSTREAMAK", "sluice-upstream-secret"  # a gateway's upstream (gateway-* scenarios)
SKIP = 77
PROVIDER = {"tcp": "tcp;ofi_rxm", "shm": "shm"}
REPORT = re.compile(r"rdma (\d+) bytes in (\d+) requests, http (\d+) bytes in (\d+) requests"
                    r"(?:, (\d+) declined by the server)?")


class Skip(Exception):
    pass


# Every process the test started. The shm provider names its shared memory after the process
# (/dev/shm/PID:EP:N) and removes it only when the endpoint closes: a process that exits with
# _exit (rdma_probe vanish), crashes or is killed leaves 16 MiB behind.
PIDS = []


def remove_shm_leftovers():
    for pid in PIDS:
        if not os.path.exists("/proc/%d" % pid):
            for path in glob.glob("/dev/shm/%d:*" % pid):
                print("  removing %s, left by process %d" % (path, pid))
                os.remove(path)


def clean_env():
    env = dict(os.environ)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION"):
        env.pop(name, None)
    return env


def paths_of(output):
    """The path report the CLI prints: dict rdma_bytes, rdma_requests, http_bytes, http_requests, declined."""
    m = REPORT.search(output)
    if not m:
        raise AssertionError("no path report in: " + output)
    names = ("rdma_bytes", "rdma_requests", "http_bytes", "http_requests", "declined")
    return {n: int(v or 0) for n, v in zip(names, m.groups())}


class Harness:
    """A server, the CLI against it, and rdma_probe. `prefix` runs the clients under another command."""

    def __init__(self, binary, probe, tmp, server, prefix=()):
        self.binary, self.probe, self.tmp, self.server, self.prefix = binary, probe, tmp, server, list(prefix)
        self.env = clean_env()

    def run(self, cmd, timeout, text):
        """subprocess.run, remembering the pid (see remove_shm_leftovers)."""
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text, env=self.env) as proc:
            PIDS.append(proc.pid)
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                stacks = self.server_stacks()  # while the server is still in whatever held the client
                proc.kill()
                out, err = proc.communicate()
                raise AssertionError("%s did not finish within %d s (killed): %s%s\nthe server's threads:\n%s" %
                                     (" ".join(cmd[:3]), timeout, out[-1000:], err[-1000:], stacks))
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

    def cli(self, *args, timeout=120):
        cmd = self.prefix + [self.binary] + list(args) + ["--endpoint", self.server.url, "--access-key", AK,
                                                          "--secret-key", SK, "--no-progress"]
        return self.run(cmd, timeout, True)

    def ok(self, *args, timeout=120):
        r = self.cli(*args, timeout=timeout)
        if r.returncode != 0:
            raise AssertionError("sluice %s failed (%d):\nstdout: %s\nstderr: %s\nserver: %s" %
                                 (" ".join(args), r.returncode, r.stdout[-2000:], r.stderr[-2000:], self.server_log()))
        return r

    def run_probe(self, provider, *args, timeout=60):
        cmd = self.prefix + [self.probe, "--provider", provider, "--access-key", AK, "--secret-key", SK] + list(args)
        return self.run(cmd, timeout, False)

    def probe_ok(self, provider, *args, timeout=60):
        r = self.run_probe(provider, *args, timeout=timeout)
        err = r.stderr.decode(errors="replace")
        if r.returncode != 0:
            raise AssertionError("rdma_probe %s failed (%d):\n%s\nserver: %s" %
                                 (" ".join(args), r.returncode, err[-3000:], self.server_log()))
        for line in err.splitlines():  # what the probe checked
            if line.startswith("  ok:"):
                print("    rdma_probe %s:%s" % (args[0], line[4:]))
        return r

    def served(self, key, since, count=1):
        """The server's access-log records (json) of the GETs of `key` that began at or after
        `since` (time.time()), at least `count` of them: what the server itself took
        (duration_us), apart from the clients' own start-up, which a loaded machine under
        AddressSanitizer stretches by seconds. Requests are told apart by their start time, not
        by where the file ended: the server writes its log out every second, so an earlier
        request's line may land after the file's end seen at a later moment. Waits up to 10 s for the lines."""
        log = os.path.join(self.tmp, ACCESS_LOG)
        deadline = time.monotonic() + 10
        while True:
            with open(log, "rb") as f:
                records = [json.loads(line) for line in f.read().decode().splitlines() if line.strip()]
            # "2026-11-25T04:18:00.123Z", truncated to the millisecond
            records = [r for r in records if r["method"] == "GET" and r["key"] == key and
                       datetime.datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                           tzinfo=datetime.timezone.utc).timestamp() >= since - 0.001]
            if len(records) >= count or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if len(records) < count:
            raise AssertionError("the server's access log holds %d GET(s) of %s since the client started, not %d" %
                                 (len(records), key, count))
        return records

    def server_stacks(self):
        """Every thread's stack of the running server (gdb, when there is one): what a client that
        hung was waiting for."""
        proc = self.server.proc if self.server else None
        if proc is None or proc.poll() is not None or not shutil.which("gdb"):
            return "(no stacks: no running server or no gdb)"
        try:
            r = subprocess.run(["gdb", "-p", str(proc.pid), "-batch", "-ex", "thread apply all bt 16"],
                               capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return "(gdb did not finish)"
        frames = [line[:240] for line in r.stdout.splitlines() if line.startswith(("Thread ", "#"))]
        return "\n".join(frames)[-12000:] or r.stderr[-2000:]

    def server_log(self):
        proc = self.server.proc
        if proc is None or proc.poll() is None:
            return "(running)"
        return "exited %d: %s" % (proc.returncode, proc.stdout.read()[-2000:])

    def put(self, src, url, via, fabric=None):
        return self.ok("put", src, url, "--via", via, *(["--fabric", fabric] if fabric else []))

    def get(self, url, out, via, fabric=None):
        return self.ok("get", url, out, "--via", via, *(["--fabric", fabric] if fabric else []))

    def round_trip(self, size, fabric, name=None, seed=None):
        """put --via rdma, get --via rdma: byte-exact, and every byte by RDMA."""
        name = name or "obj-%d" % size
        seed = size if seed is None else seed
        src = (make_big_file if size > 16 * MIB else make_file)(os.path.join(self.tmp, name), size, seed)
        url = "s3://rdma/%s/%s" % (fabric, name)
        start = time.monotonic()
        put = paths_of(self.put(src, url, "rdma", fabric).stdout)
        out = os.path.join(self.tmp, name + ".out")
        get = paths_of(self.get(url, out, "rdma", fabric).stdout)
        took = time.monotonic() - start
        expect(os.path.getsize(out) == size and sha256(out) == sha256(src),
               "%s: %d bytes put and got back byte-exact (%.1f s)" % (fabric, size, took))
        for what, paths in (("put", put), ("get", get)):
            expect(paths["rdma_bytes"] == size and paths["http_bytes"] == 0 and paths["declined"] == 0,
                   "%s: %s of %d bytes: %d by RDMA, none over HTTP: %s" % (fabric, what, size, size, paths))
            if size > 0:
                expect(paths["rdma_requests"] >= 1 and paths["http_requests"] == 0,
                       "%s: %s of %d bytes: %d RDMA requests, no HTTP body" % (fabric, what, size,
                                                                               paths["rdma_requests"]))
        os.remove(out)
        return src, put, get


def make_big_file(path, size, seed):
    """A file of `size` bytes quickly: windows of one random pool at different offsets, so that
    every MiB differs from the others (a part landing in the wrong place changes the digest)."""
    pool = random.Random(seed).randbytes(2 * MIB)
    with open(path, "wb") as f:
        for i in range(size // MIB):
            at = (i * 7919 + seed) % MIB
            f.write(pool[at:at + MIB])
        f.write(pool[:size % MIB])
    return path


# ------------------------------------------------------------------------------------------
def test_sizes(h, fabric):
    for size in (0, 1, 4095, 8 * MIB + 1):
        src, _, _ = h.round_trip(size, fabric)
        os.remove(src)
    # 256 MiB: 32 parts of 8 MiB, each its own token.
    src, put, get = h.round_trip(256 * MIB, fabric, name="big")
    expect(put["rdma_requests"] == 32, "%s: the 256 MiB put moved in 32 RDMA parts" % fabric)
    expect(get["rdma_requests"] >= 3, "%s: the 256 MiB get moved in several RDMA requests" % fabric)
    os.remove(src)


def test_multipart(h, fabric):
    size = 40 * MIB + 12345  # 6 parts of 8 MiB (the last short)
    src = make_big_file(os.path.join(h.tmp, "multi"), size, 40)
    url = "s3://rdma/multi"
    r = h.put(src, url, "rdma", fabric)
    put = paths_of(r.stdout)
    expect(put["rdma_bytes"] == size and put["http_bytes"] == 0 and put["rdma_requests"] >= 3,
           "%s: multipart put: %d RDMA parts, nothing over HTTP" % (fabric, put["rdma_requests"]))
    expect(re.search(r"etag [0-9a-f]{32}-6;", r.stdout) is not None, "the ETag is a 6-part multipart ETag")
    out = os.path.join(h.tmp, "multi.out")
    get = paths_of(h.get(url, out, "rdma", fabric).stdout)
    expect(sha256(out) == sha256(src), "%s: multipart get byte-exact" % fabric)
    expect(get["rdma_bytes"] == size and get["http_bytes"] == 0 and get["rdma_requests"] >= 3,
           "%s: multipart get: %d RDMA requests, nothing over HTTP" % (fabric, get["rdma_requests"]))
    with open(src, "rb") as f:
        data = f.read()
    # Across a part boundary, a whole part's span, the very last byte.
    ranges = [(8 * MIB - 100, 200), (16 * MIB + 5, 8 * MIB), (size - 1, 1)]
    for offset, length in ranges:
        got = os.path.join(h.tmp, "range.out")
        h.probe_ok(fabric, "range", h.server.url, "rdma", "multi", str(offset), str(length), got)
        with open(got, "rb") as f:
            expect(f.read() == data[offset:offset + length],
                   "%s: ranged GET by RDMA bytes=%d-%d: 206, byte-exact" % (fabric, offset, offset + length - 1))


def test_decline(h):
    expect(any("rdma: off" in line for line in h.server.banner), "the server says rdma: off")
    size = 1 * MIB + 7
    src = make_file(os.path.join(h.tmp, "small"), size, 1)
    url = "s3://rdma/small"
    put = paths_of(h.put(src, url, "auto", "tcp").stdout)
    expect(put["http_bytes"] == size and put["rdma_bytes"] == 0 and put["declined"] == 1,
           "put --via auto: declined once, stored over HTTP: %s" % put)
    out = os.path.join(h.tmp, "small.out")
    for fabric in ("tcp", "shm"):
        get = paths_of(h.get(url, out, "auto", fabric).stdout)
        expect(sha256(out) == sha256(src), "%s: get --via auto byte-exact" % fabric)
        expect(get["http_bytes"] == size and get["rdma_bytes"] == 0 and get["declined"] >= 1,
               "%s: get --via auto: declined, the bytes came over HTTP: %s" % (fabric, get))
        os.remove(out)
    r = h.cli("get", url, out, "--via", "rdma", "--fabric", "tcp")
    expect(r.returncode == 1 and ("RDMANotSupported" in r.stderr or "rdma_not_supported" in r.stderr),
           "get --via rdma fails with RDMANotSupported: %s" % r.stderr.strip())
    expect(not os.path.exists(out) and not os.path.exists(out + ".partial"), "and leaves no file")
    r = h.cli("put", src, "s3://rdma/strict", "--via", "rdma", "--fabric", "tcp")
    expect(r.returncode == 1 and ("RDMANotSupported" in r.stderr or "rdma_not_supported" in r.stderr),
           "put --via rdma fails with RDMANotSupported: %s" % r.stderr.strip())
    # Multipart: every part is declined; --via auto sends them over HTTP, --via rdma stores nothing.
    big = make_big_file(os.path.join(h.tmp, "big"), 20 * MIB + 1, 2)
    put = paths_of(h.put(big, "s3://rdma/big", "auto", "tcp").stdout)
    expect(put["http_bytes"] == 20 * MIB + 1 and put["rdma_bytes"] == 0 and put["declined"] == 3,
           "multipart put --via auto: each of the 3 parts declined, all over HTTP: %s" % put)
    r = h.cli("put", big, "s3://rdma/strict-big", "--via", "rdma", "--fabric", "tcp")
    expect(r.returncode == 1 and "RDMANotSupported" in r.stderr, "multipart put --via rdma fails with RDMANotSupported")
    listing = h.ok("ls", "--recursive", "s3://rdma").stdout.split()
    expect(listing[3::4] == ["big", "small"], "nothing stored by the --via rdma puts (ls: %s)" % listing[3::4])


def curl(server, *args):
    cmd = ["curl", "-sS", "--fail-with-body", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", AK + ":" + SK,
           "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"] + list(args)
    r = subprocess.run(cmd, capture_output=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError("curl %s failed (%d): %s %s" % (" ".join(args), r.returncode, r.stdout[-500:], r.stderr))
    return r


def test_interop(h, fabric):
    if shutil.which("curl") is None:
        raise Skip("curl is not installed")
    # Put by RDMA (3 parts, each its own token), read by plain HTTP.
    size = 20 * MIB + 5
    src = make_big_file(os.path.join(h.tmp, "parts"), size, 20)
    put = paths_of(h.put(src, "s3://rdma/by-rdma", "rdma", fabric).stdout)
    expect(put["rdma_bytes"] == size and put["http_bytes"] == 0 and put["rdma_requests"] == 3,
           "%s: a %d-byte object put in 3 RDMA parts" % (fabric, size))
    out = os.path.join(h.tmp, "parts.curl")
    curl(h.server, "-o", out, h.server.url + "/rdma/by-rdma")
    expect(sha256(out) == sha256(src), "%s: curl --aws-sigv4 reads it back byte-exact" % fabric)
    # Put by plain HTTP, read by RDMA.
    size = 5 * MIB + 1
    src = make_file(os.path.join(h.tmp, "curl-put"), size, 5)
    curl(h.server, "-T", src, h.server.url + "/rdma/by-http")
    out = os.path.join(h.tmp, "curl-put.rdma")
    get = paths_of(h.get("s3://rdma/by-http", out, "rdma", fabric).stdout)
    expect(sha256(out) == sha256(src), "%s: an object curl put reads back by RDMA byte-exact" % fabric)
    expect(get["rdma_bytes"] == size and get["http_bytes"] == 0, "%s: and all of it by RDMA: %s" % (fabric, get))


def test_probe(h, fabric):
    size = 3 * MIB + 5
    src = make_file(os.path.join(h.tmp, "obj"), size, 3)
    h.put(src, "s3://rdma/obj", "http")
    with open(src, "rb") as f:
        data = f.read()
    for offset, length in ((0, size), (12345, 1000)):
        r = h.probe_ok(fabric, "range", h.server.url, "rdma", "obj", str(offset), str(length))
        expect(r.stdout == data[offset:offset + length],
               "%s: probe range bytes=%d-%d: 206 by RDMA, byte-exact, nothing written past it" %
               (fabric, offset, offset + length - 1))
    for mode, what in (("expired", "expired tokens (an hour ago; this second): 400 InvalidRDMAToken"),
                       ("short", "a segment 1 byte short of the object: 400 InvalidRDMAToken"),
                       ("tampered", "a token swapped after signing: 403 SignatureDoesNotMatch"),
                       ("unsigned", "a token header outside SignedHeaders: 400 InvalidRDMAToken")):
        h.probe_ok(fabric, mode, h.server.url, "rdma", "obj")
        expect(True, "%s: %s, the buffer untouched" % (fabric, what))
    out = os.path.join(h.tmp, "obj.out")
    get = paths_of(h.get("s3://rdma/obj", out, "rdma", fabric).stdout)
    expect(sha256(out) == sha256(src) and get["rdma_bytes"] == size, "%s: the server still serves by RDMA" % fabric)


def test_cut(h, fabric):
    """SIGTERM while a GET by RDMA is stuck on a client that stopped taking bytes (alive, its
    endpoint open, every thread stopped), which meanwhile holds no other client's GET up: the
    shutdown's grace (GRACE s) ends, the cut aborts the transfer, and the server exits 0 at once;
    it does not wait out the transfer's operation_timeout (30 s), nor end by its 10 s stop alarm."""
    size = 64 * MIB  # far more than a tcp connection's socket buffers hold
    big = make_big_file(os.path.join(h.tmp, "big"), size, 65)
    h.put(big, "s3://rdma/big", "http")
    cmd = h.prefix + [h.probe, "--provider", fabric, "--access-key", AK, "--secret-key", SK,
                      "stall", h.server.url, "rdma", "big"]
    since = time.time()
    stalled = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    PIDS.append(stalled.pid)
    try:
        deadline = time.monotonic() + 30
        while not (proc_status(stalled.pid, "State") or "").startswith("T"):  # "T (stopped)"
            if stalled.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("%s: the stalling client did not stop itself after the first bytes (exit %s): %s" %
                                     (fabric, stalled.poll(), stalled.stderr.read() if stalled.poll() is not None else ""))
            time.sleep(0.05)
        print("  stalled client %d:%s" % (stalled.pid, stalled.stderr.readline().rstrip("\n")))
        # Meanwhile another client's GET by RDMA is served, byte-exact and by RDMA.
        small = make_file(os.path.join(h.tmp, "small"), 100 * 1024 + 1, 6)
        h.put(small, "s3://rdma/small", "http")
        out = os.path.join(h.tmp, "small.out")
        get = paths_of(h.get("s3://rdma/small", out, "rdma", fabric).stdout)
        expect(sha256(out) == sha256(small) and get["rdma_bytes"] == os.path.getsize(small),
               "%s: while the stalled client holds its transfer, another client's GET goes by RDMA, byte-exact" % fabric)
        start = time.monotonic()
        h.server.proc.send_signal(signal.SIGTERM)
        try:
            code = h.server.proc.wait(timeout=GRACE + 8)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - start
        said = h.server.proc.stdout.read() if code is not None else ""
        expect(code == 0 and "did not finish" not in said,
               "%s: SIGTERM with a GET stuck on a stalled client: the server exits 0 in %.1f s, the transfer cut at "
               "the grace's end (%d s), not by the stop alarm (exit %s; said: %s)" %
               (fabric, took, GRACE, code, said.strip()[-400:]))
        got = h.served("big", since)[-1]
        expect(got["error"] == "CutAtShutdown" and got["bytes_direct"] < size,
               "%s: the access log records the stalled GET as cut: %s" % (fabric, json.dumps(got)))
    finally:
        stalled.kill()
        stalled.wait()


def test_vanish(h, fabric):
    """Clients that exit with a GET by RDMA in flight: mid-transfer (after the first bytes
    landed) and right after sending the request (before the server reached them)."""
    size = 64 * MIB  # 16 staging buffers' worth
    big = make_big_file(os.path.join(h.tmp, "big"), size, 64)
    h.put(big, "s3://rdma/big", "http")
    small = make_file(os.path.join(h.tmp, "small"), 100 * 1024 + 1, 5)
    h.put(small, "s3://rdma/small", "http")
    out = os.path.join(h.tmp, "out")

    # libfabric 1.17 shm: writes to a shm peer that died mid-transfer never complete, and the
    # server's shm endpoint completes nothing else until it is replaced (when a transfer on it
    # gives up), so RDMA GETs over shm right after a vanish may be declined (x-amz-rdma-reply: 501)
    # and go over HTTP. What must hold on both providers: the server keeps answering, within
    # seconds, and `--via auto` gets the bytes; on shm, RDMA works again afterwards (below).
    vias = ("http", "rdma") if fabric == "tcp" else ("http", "auto")

    def still_serves(after):
        # Timed by the server (its access log), not by the clients: under AddressSanitizer on a
        # loaded 2-core machine a client's own start-up takes seconds. What must hold: the server
        # answers each GET without waiting out a deadline of the vanished transfer (tcp: at once;
        # shm: the auto get's RDMA attempt may wait out connect_timeout, 5 s, before its decline).
        limit = 2.5 if fabric == "tcp" else 8
        for via in vias:
            since, start = time.time(), time.monotonic()
            try:
                r = h.cli("get", "s3://rdma/small", out, "--via", via, "--fabric", fabric, timeout=30)
            except AssertionError as e:
                raise AssertionError("%s: after %s, get --via %s: %s" % (fabric, after, via, e))
            took = time.monotonic() - start
            expect(r.returncode == 0 and sha256(out) == sha256(small),
                   "%s: after %s, a get --via %s works (%.1f s) %s" %
                   (fabric, after, via, took, r.stderr.strip()[-300:]))
            served = [rec["duration_us"] / 1e6 for rec in h.served("small", since)]
            expect(max(served) < limit, "%s: after %s, the server answered the get --via %s within %.1f s (%s s)" %
                   (fabric, after, via, limit, ", ".join("%.2f" % t for t in served)))

    h.get("s3://rdma/big", out, "rdma", fabric)  # warm up: staging buffers touched, connections made
    baseline = status_kib(h.server.proc.pid, "RssAnon")
    # Four rounds hold more staging buffers than a provider has (16, 4 per transfer) if none came back.
    for mode in ("vanish", "vanish-now", "vanish", "vanish-now"):
        r = h.probe_ok(fabric, mode, h.server.url, "rdma", "big")
        said = r.stderr.decode(errors="replace").strip().splitlines()
        print("  %s: %s" % (mode, said[-1] if said else ""))
        still_serves("a client vanished (%s)" % mode)
    if fabric == "shm":
        # The endpoint that stopped completing is replaced once a transfer on it gives up
        # (operation_timeout after a vanished peer's first bytes, connect_timeout before them):
        # RDMA over shm works again without a restart.
        start = time.monotonic()
        while True:
            r = h.cli("get", "s3://rdma/small", out, "--via", "rdma", "--fabric", fabric, timeout=60)
            if r.returncode == 0 and paths_of(r.stdout)["rdma_bytes"] == os.path.getsize(small):
                break
            expect(time.monotonic() - start < 90, "shm: RDMA works again within 90 s (%s)" % r.stderr.strip()[-200:])
            time.sleep(1)
        expect(sha256(out) == sha256(small),
               "shm: after the vanished clients, a get --via rdma goes by RDMA again (%.1f s): the endpoint was "
               "replaced" % (time.monotonic() - start))
    start = time.monotonic()
    get = paths_of(h.get("s3://rdma/big", out, vias[1], fabric).stdout)
    moved = get["rdma_bytes"] if fabric == "tcp" else get["rdma_bytes"] + get["http_bytes"]
    expect(moved == size and sha256(out) == sha256(big),
           "%s: then the whole object again (--via %s), byte-exact (%.1f s): no staging buffer lost" %
           (fabric, vias[1], time.monotonic() - start))
    grown = status_kib(h.server.proc.pid, "RssAnon") - baseline
    if sanitized(h.binary):
        # ASan keeps freed memory in quarantine (256 MiB by default): RSS says nothing there.
        print("  (RSS bound not checked: the server is built with AddressSanitizer; grew %d KiB)" % grown)
    else:
        # What this bounds: memory kept per vanished client (its staging buffers, the 64 MiB
        # object's mapping): four of them would hold 256 MiB. What it allows: one endpoint's own
        # pools twice. A post that finds the transmit queue full past its deadline (a peer that
        # vanished right after its request) replaces the endpoint, and the old one closes once no
        # call uses it: measured on tcp;ofi_rxm, +87.6 MiB while both live, +1 MiB after the close,
        # and over 12 vanished clients never more than +91 MiB.
        expect(grown < 128 * 1024, "%s: the server's anonymous RSS grew by %d KiB over 4 vanished clients (< 128 MiB)" %
               (fabric, grown))
    start = time.monotonic()
    # Transfers still waiting on a vanished peer (shm may never complete them) are aborted by the
    # cut at the grace's end (GRACE s): the stop does not wait out operation_timeout (30 s).
    stop(h.server, 20)
    expect(True, "%s: the server stops on SIGTERM (%.1f s)" % (fabric, time.monotonic() - start))


def test_hostile(h, fabric):
    """Tokens the server cannot serve, each signed by a real user (a garbage endpoint name, a
    wrong key, an address outside the registered memory): the request fails or is declined,
    the server lives, and the next request (tokens of the fabric planes are not bound to a user)
    still goes by RDMA at once. A
    transfer whose operations never complete leaves its endpoint to a fresh one (reopened)."""
    size = 3 * MIB + 7
    src = make_file(os.path.join(h.tmp, "obj"), size, 9)
    h.put(src, "s3://rdma/obj", "http")
    out = os.path.join(h.tmp, "obj.out")
    for mode in ("garbage-endpoint", "wrong-key", "far-address", "garbage-endpoint"):
        r = h.probe_ok(fabric, mode, h.server.url, "rdma", "obj", timeout=90)
        said = r.stderr.decode(errors="replace").strip().splitlines()
        print("  %s" % (said[-1] if said else mode))
        expect(h.server.proc.poll() is None, "%s: the server lives after a %s token" % (fabric, mode))
        since, start = time.time(), time.monotonic()
        get = paths_of(h.get("s3://rdma/obj", out, "rdma", fabric).stdout)
        took = time.monotonic() - start
        # At once: the server's own time for it (its access log) is far below connect_timeout
        # (5 s), the deadline a GET stuck behind the bad token's transfer would wait out.
        served = [rec["duration_us"] / 1e6 for rec in h.served("obj", since)]
        expect(get["rdma_bytes"] == size and sha256(out) == sha256(src) and max(served) < 2.5,
               "%s: after a %s token, the next GET goes by RDMA at once (the server took %s s; the client %.1f s)" %
               (fabric, mode, ", ".join("%.2f" % t for t in served), took))
    # PUTs by RDMA the server cannot complete (it reads from an endpoint that answers nothing, from
    # 1 GiB past the granted memory, from a client that is gone): the object stays as it was, or,
    # for put-vanish on a loaded machine where the server read every byte before the client was
    # gone, is exactly the client's bytes; never a part of the PUT.
    for mode in ("put-garbage-endpoint", "put-far-address", "put-vanish"):
        r = h.probe_ok(fabric, mode, h.server.url, "rdma", "obj", timeout=90)
        said = r.stderr.decode(errors="replace").strip().splitlines()
        print("  %s" % (said[-1] if said else mode))
        expect(h.server.proc.poll() is None, "%s: the server lives after a %s PUT" % (fabric, mode))
        time.sleep(0.5 if mode != "put-vanish" else 6)  # put-vanish: the server's transfer gives up
        since = time.time()
        said = h.get("s3://rdma/obj", out, "rdma", fabric)
        get = paths_of(said.stdout)
        # put-vanish: when the server's reads win the race with the client's exit (a loaded machine),
        # the PUT is whole and is published: the object is then exactly the client's bytes (rdma_probe
        # fills them with 0x3c). Either way never a part of one, nor a mixture.
        whole_put = mode == "put-vanish" and sha256(out) == hashlib.sha256(b"\x3c" * size).hexdigest()
        if whole_put:
            print("  %s: the server read the whole PUT before the client was gone: published whole" % fabric)
        elif sha256(out) != sha256(src):  # which is wrong: the stored object, or the bytes the GET brought?
            h.get("s3://rdma/obj", out + ".http", "http")
            raise AssertionError("%s: after a %s PUT, the GET by RDMA brought other bytes than the object had (%s); "
                                 "over HTTP the object is %s" %
                                 (fabric, mode, said.stdout.strip(),
                                  "as it was" if sha256(out + ".http") == sha256(src) else "changed" +
                                  (" (as the RDMA GET brought)" if sha256(out + ".http") == sha256(out) else "")))
        if get["rdma_bytes"] != size:
            raise AssertionError("%s: after a %s PUT, a GET goes by RDMA (%s; the server's log of it: %s)" %
                                 (fabric, mode, said.stdout.strip(), h.served("obj", since)))
        print("  ok: %s: after a %s PUT, the object is %s and a GET goes by RDMA" %
              (fabric, mode, "the whole PUT's" if whole_put else "as it was"))
        up = paths_of(h.put(src, "s3://rdma/obj", "rdma", fabric).stdout)
        expect(up.get("rdma_bytes") == size, "%s: after a %s PUT, a PUT goes by RDMA (%s)" % (fabric, mode, up))


# ------------------------------------------------------------------------------------------
def ip(*args, check=True):
    r = subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError("ip %s: %s" % (" ".join(args), r.stderr.strip()))
    return r


class Namespaces:
    """Network namespaces and veth pairs between them, deleted again on exit (deleting a
    namespace deletes the veth ends in it). links: (ns_a, ip_a, ns_b, ip_b), /24 each."""

    def __init__(self, names, links):
        self.tag = str(os.getpid())
        self.names = {n: "sluice-%s-%s" % (n, self.tag) for n in names}
        self.links = links
        self.made = []

    def __enter__(self):
        if shutil.which("ip") is None:
            raise Skip("the ip tool (iproute2) is not installed")
        try:
            self.create()
        except BaseException:
            self.delete()
            raise
        return self

    def create(self):
        for short, name in self.names.items():
            r = ip("netns", "add", name, check=False)
            if r.returncode != 0:
                raise Skip("cannot create a network namespace (ip netns add %s: %s)" % (name, r.stderr.strip()))
            self.made.append(name)
            ip("-n", name, "link", "set", "lo", "up")
        devices = []
        for i, (a, a_ip, b, b_ip) in enumerate(self.links):
            a_dev, b_dev = "sl%d%s" % (i, self.tag[-6:]) + "a", "sl%d%s" % (i, self.tag[-6:]) + "b"
            ip("link", "add", a_dev, "netns", self[a], "type", "veth", "peer", "name", b_dev, "netns", self[b])
            for ns, dev, addr in ((a, a_dev, a_ip), (b, b_dev, b_ip)):
                ip("-n", self[ns], "addr", "add", addr + "/24", "dev", dev)
                ip("-n", self[ns], "link", "set", dev, "up")
                devices.append((ns, dev))
            print("  %s (%s) --veth-- %s (%s)" % (self[a], a_ip, self[b], b_ip))
        # A veth is usable (and reported as such to libfabric) once both ends are up and the
        # carrier is on; until then the tcp provider ranks it below loopback.
        deadline = time.monotonic() + 10
        for ns, dev in devices:
            while "LOWER_UP" not in ip("-n", self[ns], "link", "show", "dev", dev).stdout:
                if time.monotonic() > deadline:
                    raise RuntimeError("%s in %s has no carrier after 10 s" % (dev, self[ns]))
                time.sleep(0.05)

    def __getitem__(self, short):
        return self.names[short]

    def exec_prefix(self, short):
        return ["ip", "netns", "exec", self[short]]

    def delete(self):
        for name in self.made:
            ip("netns", "delete", name, check=False)
        left = ip("netns", "list").stdout
        return not any(name in left for name in self.made)

    def __exit__(self, *exc):
        expect(self.delete(), "the namespaces are deleted")
        return False


def netns_server(binary, tmp, ns, address):
    server = Server(binary, os.path.join(tmp, "root"), AK, SK, extra=["--fabric", "tcp"], listen=address + ":0",
                    prefix=ns.exec_prefix("srv")).start()
    expect(any("rdma: tcp;ofi_rxm" in line for line in server.banner),
           "the server in %s serves rdma on tcp;ofi_rxm, at %s" % (ns["srv"], server.url))
    return server


def stop_quietly(server):
    if server and server.proc.poll() is None:
        try:
            server.stop()
        except RuntimeError as e:
            print("and: sluice serve %s" % e)


def test_netns(binary, probe, tmp):
    """Two "hosts": network namespaces joined by a veth pair; the server in one, the clients in
    the other, on tcp;ofi_rxm."""
    server_ip, client_ip = "10.77.0.1", "10.77.0.2"
    server = None
    with Namespaces(["srv", "cli"], [("srv", server_ip, "cli", client_ip)]) as ns:
        try:
            server = netns_server(binary, tmp, ns, server_ip)
            h = Harness(binary, probe, tmp, server, prefix=ns.exec_prefix("cli"))
            # The address the client's tcp provider puts in its tokens (the CLI binds 127.0.0.1
            # only for a loopback endpoint, else lets the provider choose): the veth's, the only
            # one the server can reach.
            name = h.probe_ok("tcp", "name", server.url, "rdma", "x").stdout.decode().strip()
            expect(name.startswith(client_ip + ":"), "the client's fabric endpoint in %s is %s" % (ns["cli"], name))
            h.ok("mb", "s3://rdma")
            for size in (1, 1 * MIB + 3, 20 * MIB + 7):
                src, put, _ = h.round_trip(size, "tcp", name="netns-%d" % size)
                if size > 16 * MIB:
                    expect(put["rdma_requests"] == 3, "the %d-byte put moved in 3 RDMA parts across the veth" % size)
                os.remove(src)
            src = make_file(os.path.join(tmp, "ranged"), 2 * MIB, 9)
            h.put(src, "s3://rdma/ranged", "rdma", "tcp")
            r = h.probe_ok("tcp", "range", server.url, "rdma", "ranged", "1000", str(MIB))
            with open(src, "rb") as f:
                expect(r.stdout == f.read()[1000:1000 + MIB], "a ranged GET by RDMA across the veth, byte-exact")
            stop(server)
        finally:
            stop_quietly(server)


def test_netns_multihomed(binary, probe, tmp):
    """As netns, but the client's host has a second interface, on a network the server cannot
    reach (10.88.0.0/24, towards a third namespace). The tokens must name the client's address
    on the route to the server, whatever the order libfabric lists the interfaces in: both
    orders of creating the two links are tried."""
    server_ip, client_ip, other_client_ip = "10.77.0.1", "10.77.0.2", "10.88.0.2"
    to_server = ("srv", server_ip, "cli", client_ip)
    to_other = ("oth", "10.88.0.1", "cli", other_client_ip)
    for order, links in (("the link to the server first", [to_server, to_other]),
                         ("the link to the server last", [to_other, to_server])):
        print("%s:" % order)
        server = None
        with Namespaces(["srv", "cli", "oth"], links) as ns:
            try:
                server = netns_server(binary, tmp, ns, server_ip)
                h = Harness(binary, probe, tmp, server, prefix=ns.exec_prefix("cli"))
                h.ok("mb", "s3://rdma")
                name = h.probe_ok("tcp", "name", server.url, "rdma", "x").stdout.decode().strip()
                print("  the tcp provider's own choice of address in %s: %s" % (ns["cli"], name))
                size = 1 * MIB + 3
                src = make_file(os.path.join(tmp, "multihomed"), size, 11)
                r = h.cli("put", src, "s3://rdma/multihomed", "--via", "rdma", "--fabric", "tcp")
                expect(r.returncode == 0,
                       "%s: put --via rdma from a client with two interfaces works (exit %d: %s%s); the tokens "
                       "must carry the address the server can reach (%s); the provider on its own picks %s" %
                       (order, r.returncode, r.stdout.strip(), r.stderr.strip(), client_ip, name))
                out = os.path.join(tmp, "multihomed.out")
                get = paths_of(h.get("s3://rdma/multihomed", out, "rdma", "tcp").stdout)
                expect(sha256(out) == sha256(src) and get["rdma_bytes"] == size,
                       "%s: and get --via rdma, byte-exact" % order)
                stop(server)
            finally:
                stop_quietly(server)
                shutil.rmtree(os.path.join(tmp, "root"), ignore_errors=True)


def reopened_total(server, provider):
    """How many times the server replaced its endpoint of `provider` (its /metrics, --admin-listen)."""
    text = admin_metrics(server)
    m = re.search(r'^sluice_fabric_endpoint_reopened_total\{provider="%s"\} (\S+)$' % re.escape(provider), text, re.M)
    return int(float(m.group(1))) if m else -1


def test_unreachable(h, fabric):
    """Issue 37, finding 1 (tcp): two concurrent senders of signed GETs whose tokens name the same
    peer that nobody serves (127.0.0.1:1) crashed the server in libfabric within a minute: one
    transfer's failure removed the peer from the address vector under the other's operations. For
    60 s the server must live and serve a real client's GET by RDMA, byte-exact; the endpoint
    replacements the failures cause must give their memory back: anonymous RSS after 25 and more of
    them within 64 MiB of where it was after the first.
    60 s is enough: the server before the fix (the build of 19786dd, its 5 s connect deadline) died
    8-22 s into the attack in each of 7 runs on a loaded 2-core machine, and each replacement then
    kept ~45 MiB, so two of them pass the bound; the fixed server made 34 replacements in 60 s
    there (68 in 120 s before), so 25 is 50 scaled to the time, with the same margin.
    Finding 8 (shm): a stream of such tokens (12 at once, naming an endpoint of an exited process,
    whose posts find the queue full until they give up) held every thread of the server's RDMA pool
    in a post's wait: other users' GETs stalled 5.3 s each. For 30 s, the server's own time for each
    real client's GET (its access log) must stay under 2.5 s."""
    seconds, threads = (60, 2) if fabric == "tcp" else (30, 12)
    size = 1 * MIB + 5
    src = make_file(os.path.join(h.tmp, "obj"), size, 11)
    h.put(src, "s3://rdma/obj", "http")
    out = os.path.join(h.tmp, "obj.out")
    get = paths_of(h.get("s3://rdma/obj", out, "rdma", fabric).stdout)
    expect(get["rdma_bytes"] == size and sha256(out) == sha256(src), "a GET by RDMA before the attack")
    pid = h.server.proc.pid
    cmd = h.prefix + [h.probe, "--provider", fabric, "--access-key", AK, "--secret-key", SK, "unreachable",
                      h.server.url, "rdma", "obj", str(seconds), str(threads)]
    attack = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=h.env)
    PIDS.append(attack.pid)
    start, base, base_reopened, gets, by_rdma, samples, took = time.monotonic(), None, 0, 0, 0, [], []
    try:
        while attack.poll() is None:
            if h.server.proc.poll() is not None:
                raise AssertionError("the server died %.0f s into the attack: %s" % (time.monotonic() - start,
                                                                                    h.server_log()))
            reopened = reopened_total(h.server, PROVIDER[fabric])
            if base is None and reopened >= 1:
                base, base_reopened = status_kib(pid, "RssAnon"), reopened  # the first replacement's memory is the base
            # --via auto: a GET the server declines (its transfer waits on a fresh endpoint's first
            # connection longer than the 1 s deadline on a loaded machine) comes over HTTP; every
            # GET must bring the object's bytes, and most must go by RDMA (checked below).
            since = time.time()
            r = h.cli("get", "s3://rdma/obj", out, "--via", "auto", "--fabric", fabric, timeout=60)
            if r.returncode != 0 or sha256(out) != sha256(src):
                raise AssertionError("%.0f s into the attack, a GET failed (%d): %s %s; server: %s" %
                                     (time.monotonic() - start, r.returncode, r.stdout[-500:], r.stderr[-500:],
                                      h.server_log()))
            gets += 1
            by_rdma += paths_of(r.stdout)["rdma_bytes"] == size
            samples.append(status_kib(pid, "RssAnon"))
            took.extend(rec["duration_us"] / 1e6 for rec in h.served("obj", since))
            time.sleep(2)
    finally:
        if attack.poll() is None:
            attack.kill()
        err = attack.communicate()[1].decode(errors="replace")
    if h.server.proc.poll() is not None:
        raise AssertionError("the server died during %d s of concurrent unreachable tokens (%.0f s in): %s" %
                             (seconds, time.monotonic() - start, h.server_log()))
    print("  ok: the server lived through %d s of concurrent unreachable tokens" % seconds)
    expect(attack.returncode == 0, "every unreachable-token request was answered, none as moved by RDMA: %s" %
           err.strip().splitlines()[-2:])
    print("  " + next((line.strip() for line in err.splitlines() if "requests answered" in line), "?"))
    # A last GET: the server closes the endpoint the attack left retired when the next transfer
    # comes (then its memory is given back); measured a moment later.
    h.get("s3://rdma/obj", out, "rdma", fabric)
    time.sleep(1)
    reopened = reopened_total(h.server, PROVIDER[fabric])
    rss = status_kib(pid, "RssAnon")
    print("  anonymous RSS during the attack (MiB): %s" % " ".join(str(kib // 1024) for kib in samples))
    print("  %d GETs served during the attack, %d of them by RDMA, the server's time for each at most %.2f s; "
          "endpoint replaced %d times; anonymous RSS %d MiB after the first replacement, %d MiB now" %
          (gets, by_rdma, max(took), reopened, (base or 0) // 1024, rss // 1024))
    if sanitized(h.binary):
        expect(by_rdma >= 1, "GETs during the attack went by RDMA (%d of %d)" % (by_rdma, gets))
    else:
        expect(by_rdma * 2 >= gets, "most GETs during the attack went by RDMA (%d of %d)" % (by_rdma, gets))
    if fabric == "shm":
        expect(max(took) < 2.5, "shm: other users' GETs are not stalled by the stream of bad tokens (the server took "
               "at most %.2f s for one)" % max(took))
        return
    if sanitized(h.binary):
        # ASan keeps freed memory in quarantine (256 MiB by default): RSS says nothing there, and a
        # slower server may see fewer than 50 replacements; what it checks is every access.
        print("  (RSS bound not checked: the server is built with AddressSanitizer; %d replacements)" %
              (reopened - base_reopened))
    else:
        expect(reopened - base_reopened >= 25,
               "25 and more endpoint replacements during the attack (%d after the first)" % (reopened - base_reopened))
        expect(rss - base <= 64 * 1024, "RSS within 64 MiB of the start across %d replacements (+%d MiB)" %
               (reopened - base_reopened, (rss - base) // 1024))


# ------------------------------------------------------------------------------------------
def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    binary, probe, scenario = sys.argv[1:]
    sys.stdout.reconfigure(line_buffering=True)  # interleave with the tools' output in order
    test, _, fabric = scenario.partition(".")
    tmp = tempfile.mkdtemp(prefix="sluice-rdma-")
    server = upstream = None
    started = time.monotonic()
    try:
        if test == "netns":
            test_netns(binary, probe, tmp)
        elif test == "netns_multihomed":
            test_netns_multihomed(binary, probe, tmp)
        else:
            server_fabric = "off" if test == "decline" else fabric
            stale = live = None
            if server_fabric == "shm":
                # What a killed shm process leaves: regions named after its pid. The server removes
                # those of dead processes at start, never a live one's.
                dead = subprocess.Popen(["true"])
                dead.wait()
                stale = "/dev/shm/%d:sluice-test-stale" % dead.pid
                live = "/dev/shm/%d:sluice-test-live" % os.getpid()
                for path in (stale, live):
                    with open(path, "wb") as f:
                        f.write(b"x")
            gateway = []
            if test.startswith("gateway-"):
                test = test[len("gateway-"):]
                upstream = Server(binary, os.path.join(tmp, "upstream"), UP_AK, UP_SK,
                                  extra=["--fabric", "off", "--grant-socket", "off"]).start()
                gateway = ["--upstream", upstream.url, "--upstream-access-key", UP_AK, "--upstream-secret-key", UP_SK,
                           "--admin-listen", "127.0.0.1:0"]
            # unreachable: transfers to the dead peer give up after 1 s (not 5), so that 60 s
            # see 25 and more endpoint replacements.
            admin = ["--admin-listen", "127.0.0.1:0"] if test == "unreachable" else []
            if test == "unreachable" and fabric == "tcp":
                # Under AddressSanitizer a fresh endpoint's first connection may take longer than
                # 1 s on a loaded 2-core machine (the GETs meant to succeed would be declined).
                admin += ["--fabric-connect-timeout", "3" if sanitized(binary) else "1"]
            if test == "cut":
                # The stalled client's transfer would give up only after 30 s: past the stop alarm
                # (the grace + 10 s), so that only the cut can end it in time.
                admin += ["--fabric-connect-timeout", "30"]
            server = Server(binary, os.path.join(tmp, "root"), AK, SK,
                            extra=["--fabric", server_fabric, "--access-log", os.path.join(tmp, ACCESS_LOG),
                                   "--access-log-format", "json", "--shutdown-grace", str(GRACE)] + gateway + admin
                            ).start()
            PIDS.append(server.proc.pid)
            if gateway:
                expect("gateway to " + upstream.url in server.ready_line, "a gateway over %s: %s" % (upstream.url, server.ready_line))
            print("sluice serve --fabric %s on %s (%s)" % (server_fabric, server.url, "; ".join(server.banner)))
            if stale:
                expect(not os.path.exists(stale) and os.path.exists(live),
                       "the shm server removed a dead process's stale region, not a live one's")
                os.unlink(live)
            if test != "decline":
                expect(any(("rdma: " in line and PROVIDER[fabric] in line) for line in server.banner),
                       "the server serves rdma on " + PROVIDER[fabric])
            h = Harness(binary, probe, tmp, server)
            h.ok("mb", "s3://rdma")
            {"sizes": lambda: test_sizes(h, fabric),
             "multipart": lambda: test_multipart(h, fabric),
             "decline": lambda: test_decline(h),
             "interop": lambda: test_interop(h, fabric),
             "probe": lambda: test_probe(h, fabric),
             "vanish": lambda: test_vanish(h, fabric),
             "cut": lambda: test_cut(h, fabric),
             "hostile": lambda: test_hostile(h, fabric),
             "unreachable": lambda: test_unreachable(h, fabric)}[test]()
            if gateway:
                hits, misses = gateway_counts(server)
                expect(hits > 0 and misses == 0, "every GET met the gateway's cached copy: %d hits, %d misses" %
                       (hits, misses))
            stop(server)
        print("PASSED: rdma %s (%.1f s)" % (scenario, time.monotonic() - started))
        return 0
    except Skip as why:
        print("SKIPPED: rdma %s: %s" % (scenario, why))
        return SKIP
    finally:
        if server and server.proc.poll() is None:
            try:
                server.stop()
            except RuntimeError as e:  # killed; the test has failed already, keep its error
                print("and: sluice serve %s" % e)
            server.proc.wait()
        if upstream:
            upstream.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        remove_shm_leftovers()


def stop(server, timeout=20):
    """SIGTERM: the server must stop within `timeout` s (common.Server kills it otherwise)."""
    try:
        server.stop(timeout=timeout)
    except RuntimeError as e:
        raise AssertionError("SIGTERM: sluice serve %s (a thread is stuck in a transfer?)" % e)


if __name__ == "__main__":
    sys.exit(main())
