#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""`sluice serve`'s stop and its multipart uploads (issue 40, item 8), against a real server on loopback:
SIGTERM during a slow GET (curl --limit-rate) that finishes within --shutdown-grace, then exit 0; one
cut by a short grace, or by a second SIGTERM, and logged as cut; new connections refused and idle ones
closed once SIGTERM came; `sluice uploads ls|abort` on uploads the AWS CLI or boto3 created; uploads
idle longer than --upload-expiry aborted while an active one stays.
lifecycle_test.py SLUICE_BINARY SCENARIO   (SCENARIO: grace, cut, second-signal, uploads, expiry)
Exit 0: passed; 77: skipped (printed why); anything else: failed."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MIB, Server, expect, make_file, md5, run_in_tmp  # noqa: E402

AK, SK = "SLUICELIFEAK", "sluice-lifecycle-secret"
SIZE = 48 * MIB
RATE = "6M"  # curl --limit-rate: 48 MiB take about 8 s


class Cli:
    def __init__(self, binary, server, tmp):
        self.binary, self.server = binary, server
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.env["HOME"] = tmp

    def run(self, *args, timeout=120):
        cmd = [self.binary] + list(args) + ["--endpoint", self.server.url, "--access-key", AK, "--secret-key", SK]
        return subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=timeout)

    def ok(self, *args, **kw):
        r = self.run(*args, **kw)
        if r.returncode != 0:
            raise AssertionError("sluice %s failed (%d):\nstdout: %s\nstderr: %s" % (
                " ".join(args), r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
        return r


def start(binary, tmp, extra):
    log = os.path.join(tmp, "access.log")
    server = Server(binary, os.path.join(tmp, "root"), AK, SK,
                    ["--fabric", "off", "--grant-socket", "off", "--access-log", log] + list(extra)).start()
    return server, log


def slow_get(binary, server, tmp):
    """An object of SIZE bytes, and a curl reading it at RATE (a presigned URL): (process, target, source md5)."""
    cli = Cli(binary, server, tmp)
    cli.ok("mb", "s3://life")
    source = make_file(os.path.join(tmp, "big"), SIZE, 7)
    cli.ok("put", source, "s3://life/big")
    url = cli.ok("presign", "s3://life/big").stdout.strip()
    target = os.path.join(tmp, "got")
    curl = subprocess.Popen(["curl", "-sS", "--limit-rate", RATE, "-o", target, "-w", "%{http_code}", url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return curl, target, md5(source)


def wait_for_bytes(path, n, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and os.path.getsize(path) >= n:
            return
        time.sleep(0.05)
    raise AssertionError("curl did not receive %d bytes in %d s" % (n, timeout))


def get_lines(log):
    """The access log's GetObject lines, each split into its fields (docs/s3.md)."""
    with open(log) as f:
        return [line.split() for line in f if " GetObject " in line]


def refused(port):
    with socket.socket() as s:
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
        return False


def wait_exit(server, timeout):
    t0 = time.monotonic()
    try:
        rc = server.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
        raise AssertionError("the server did not exit within %d s" % timeout)
    return rc, time.monotonic() - t0


def scenario_grace(binary, tmp):
    server, log = start(binary, tmp, ["--shutdown-grace", "60"])
    try:
        curl, target, want = slow_get(binary, server, tmp)
        wait_for_bytes(target, 4 * MIB)
        idle = socket.create_connection(("127.0.0.1", server.port))  # kept open, no request
        idle.settimeout(10)
        sent = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        expect(refused(server.port), "a new connection is refused once SIGTERM came")
        try:
            eof = idle.recv(1) == b""
        except ConnectionResetError:
            eof = True
        expect(eof, "an idle connection is closed once SIGTERM came")
        idle.close()
        expect(server.proc.poll() is None, "the server still runs while the GET is in flight")
        out, _ = curl.communicate(timeout=60)
        took = time.monotonic() - sent
        expect(curl.returncode == 0 and out == "200", "the GET completes within the grace (curl %d, HTTP %s, %.1f s "
               "after SIGTERM)" % (curl.returncode, out, took))
        expect(md5(target) == want, "with every byte of the object")
        rc, _ = wait_exit(server, 30)
        expect(rc == 0, "then the server exits 0 (%d)" % rc)
        expect(took > 3, "it waited for the GET (%.1f s after SIGTERM)" % took)
        rest = server.proc.stdout.read()
        expect("stopping (signal 15)" in rest, "it said why it stopped")
        lines = get_lines(log)
        expect(len(lines) == 1, "one GetObject line in the access log")
        # time remote user method bucket key operation status error bytes_sent ...
        expect(lines[0][7] == "200" and lines[0][8] == "-" and int(lines[0][9]) == SIZE,
               "logged as 200, no error, %d bytes: %s" % (SIZE, " ".join(lines[0][7:10])))
    finally:
        server.stop(signal.SIGKILL)


def scenario_cut(binary, tmp, second_signal=False):
    grace = "60" if second_signal else "1"
    server, log = start(binary, tmp, ["--shutdown-grace", grace])
    try:
        curl, target, _ = slow_get(binary, server, tmp)
        wait_for_bytes(target, 4 * MIB)
        sent = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        if second_signal:
            time.sleep(1)
            expect(server.proc.poll() is None, "after the first SIGTERM the server waits for the GET")
            server.proc.send_signal(signal.SIGTERM)
        rc, _ = wait_exit(server, 20)
        took = time.monotonic() - sent
        expect(rc == 0, "the server exits 0 (%d), %.1f s after the first SIGTERM" % (rc, took))
        expect(took < 6, "without waiting for the GET (%.1f s)" % took)
        curl.communicate(timeout=30)
        got = os.path.getsize(target)
        expect(curl.returncode != 0 and got < SIZE, "the client got a cut body (curl %d, %d of %d bytes)" % (
            curl.returncode, got, SIZE))
        lines = get_lines(log)
        expect(len(lines) == 1, "one GetObject line in the access log")
        fields = lines[0]
        expect(fields[7] == "200" and fields[8] == "CutAtShutdown",
               "logged with the status sent and as cut: %s %s" % (fields[7], fields[8]))
        expect(got <= int(fields[9]) < SIZE,
               "with the bytes that went (%s; the client read %d, of %d)" % (fields[9], got, SIZE))
    finally:
        server.stop(signal.SIGKILL)


def scenario_uploads(binary, tmp):
    aws = shutil.which("aws")
    try:
        import boto3  # noqa: F401
        import botocore.config  # noqa: F401
    except ImportError:
        boto3 = None
    if not aws and boto3 is None:
        return "neither the AWS CLI nor boto3 is installed"
    server, _ = start(binary, tmp, [])
    try:
        cli = Cli(binary, server, tmp)
        cli.ok("mb", "s3://ups")
        env = dict(cli.env, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK, AWS_DEFAULT_REGION="us-east-1")
        ids = {}
        for key in ("logs/a.bin", "logs/b.bin", "other/c.bin"):
            if aws:
                r = subprocess.run([aws, "--endpoint-url", server.url, "s3api", "create-multipart-upload",
                                    "--bucket", "ups", "--key", key, "--query", "UploadId", "--output", "text"],
                                   capture_output=True, text=True, env=env, timeout=120)
                expect(r.returncode == 0, "aws s3api create-multipart-upload %s: %s" % (key, r.stderr[-300:]))
                ids[key] = r.stdout.strip()
            else:
                s3 = boto3.client("s3", endpoint_url=server.url, aws_access_key_id=AK, aws_secret_access_key=SK,
                                  region_name="us-east-1")
                ids[key] = s3.create_multipart_upload(Bucket="ups", Key=key)["UploadId"]
        listed = cli.ok("uploads", "ls", "s3://ups").stdout
        for key, upload_id in ids.items():
            expect(any(key in line and upload_id in line for line in listed.splitlines()),
                   "uploads ls shows %s %s" % (key, upload_id))
        as_json = [json.loads(line) for line in cli.ok("uploads", "ls", "--json", "s3://ups").stdout.splitlines()]
        expect(sorted((u["key"], u["upload_id"]) for u in as_json) == sorted(ids.items()) and
               all(u["initiated"].endswith("Z") for u in as_json), "uploads ls --json: key, upload_id, initiated")
        prefixed = cli.ok("uploads", "ls", "s3://ups/logs/").stdout
        expect("other/c.bin" not in prefixed and "logs/a.bin" in prefixed, "uploads ls with a prefix lists only it")
        cli.ok("uploads", "abort", "s3://ups/logs/a.bin", ids["logs/a.bin"])
        after = cli.ok("uploads", "ls", "s3://ups").stdout
        expect(ids["logs/a.bin"] not in after and ids["logs/b.bin"] in after,
               "after uploads abort, ls no longer shows it (and still the others)")
        r = cli.run("uploads", "abort", "s3://ups/logs/a.bin", ids["logs/a.bin"])
        expect(r.returncode == 1 and "NoSuchUpload" in r.stderr, "aborting it again: NoSuchUpload, exit 1 (%d: %s)" % (
            r.returncode, r.stderr.strip()[-200:]))
        r = cli.ok("uploads", "abort", "--all", "s3://ups/logs/")
        left = cli.ok("uploads", "ls", "s3://ups").stdout
        expect("logs/b.bin" not in left and "other/c.bin" in left, "abort --all under a prefix aborts only those")
    finally:
        server.stop()


def scenario_expiry(binary, tmp):
    expiry = 4  # seconds; the server looks every 2 s
    server, _ = start(binary, tmp, ["--upload-expiry", str(expiry)])
    try:
        cli = Cli(binary, server, tmp)
        cli.ok("mb", "s3://exp")
        try:
            import boto3
        except ImportError:
            return "boto3 is not installed"
        s3 = boto3.client("s3", endpoint_url=server.url, aws_access_key_id=AK, aws_secret_access_key=SK,
                          region_name="us-east-1")
        idle = s3.create_multipart_upload(Bucket="exp", Key="idle")["UploadId"]
        active = s3.create_multipart_upload(Bucket="exp", Key="active")["UploadId"]
        s3.upload_part(Bucket="exp", Key="idle", UploadId=idle, PartNumber=1, Body=b"i" * (5 * MIB))
        created = time.monotonic()
        root = os.path.join(tmp, "root")
        expect(any(idle in p for p in _walk(root)), "the idle upload's directory is on disk at first")
        # A part every second keeps "active" busy past the expiry plus a look and a margin, while
        # "idle" gets nothing after its first part.
        n = 0
        while time.monotonic() - created < expiry + 2 + 2:
            n += 1
            s3.upload_part(Bucket="exp", Key="active", UploadId=active, PartNumber=n, Body=b"x" * (5 * MIB))
            time.sleep(1)
        listed = cli.ok("uploads", "ls", "s3://exp").stdout
        expect(idle not in listed, "the idle upload expired (uploads ls: %s)" % listed.strip())
        expect(active in listed, "the active one did not")
        parts = s3.list_parts(Bucket="exp", Key="active", UploadId=active)["Parts"]
        expect(len(parts) == n, "and kept its %d parts (%d)" % (n, len(parts)))
        leftover = [p for p in _walk(root) if idle in p]
        expect(not leftover, "nothing of the idle upload (its part included) is left on disk (%s)" % leftover[:3])
    finally:
        server.stop()


def _walk(root):
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            yield os.path.join(base, name)


def main():
    binary, scenario = sys.argv[1], sys.argv[2]
    if scenario in ("grace", "cut", "second-signal") and not shutil.which("curl"):
        print("SKIPPED: curl is not installed")
        return 77
    print("%s with %s" % (scenario, binary))
    scenarios = {
        "grace": lambda tmp: scenario_grace(binary, tmp),
        "cut": lambda tmp: scenario_cut(binary, tmp),
        "second-signal": lambda tmp: scenario_cut(binary, tmp, second_signal=True),
        "uploads": lambda tmp: scenario_uploads(binary, tmp),
        "expiry": lambda tmp: scenario_expiry(binary, tmp),
    }
    return run_in_tmp(scenario, "sluice-lifecycle-", scenarios[scenario])

if __name__ == "__main__":
    sys.exit(main())
