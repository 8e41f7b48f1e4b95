#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Operating `sluice serve`: the access log, the admin listener, bucket ownership across restarts
and SIGHUP, against real server processes.
  operations_test.py SLUICE_BINARY SCENARIO
SCENARIO: log-text | log-json | metrics | metrics-planes | health | ownership | sighup
  log-text   --access-log FILE: every request of a mixed run (PUT, GET, HEAD, a 404, a 403, a
             multipart upload) is one line with its status, S3 code and the reply's request id;
             a key with a newline, spaces and quotes stays inside its field
  log-json   the same with --access-log stderr --access-log-format json: one object per line
  metrics    GET /metrics on --admin-listen, parsed as Prometheus text: # TYPE for every family,
             counters grow by what known requests add, histogram buckets cumulative up to +Inf
  metrics-planes  the data planes' counters the host (sluice serve) appends to /metrics: each
             libfabric provider's RMA operations, bytes, registrations and staging buffers
             (--fabric tcp), grow by what an RDMA PUT and GET of the sluice CLI move; the
             same-host grant plane's gauges; the CUDA grant opener's registration cache when the
             server opened one (a GPU host); skipped without the tcp provider
  health     /health and /ready answer 200; anything else on the admin port is 404, S3 paths too
  ownership  two users of a --config file each create a bucket; after a restart each still owns
             its own and gets 403 on the other's; a bucket.json without an owner (an older
             store) belongs to the first user
  sighup     a user added to the config file can create a bucket after SIGHUP; a removed one gets
             403 InvalidAccessKeyId; a PUT in flight during the SIGHUP completes
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
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MIB, Server, expect  # noqa: E402

AK, SK = "OPSAK", "ops-secret-key"
SKIP = 77


# --- requests signed here (SigV4, standard library only) -------------------------------------

def sign(ak, sk, method, host, path, query="", headers=None, payload_hash="UNSIGNED-PAYLOAD"):
    """SigV4 header auth; `path` is already URI-encoded. Returns the headers to send."""
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    date = amz_date[:8]
    hs = [("host", host), ("x-amz-content-sha256", payload_hash), ("x-amz-date", amz_date)]
    hs += [(k.lower(), v) for k, v in (headers or [])]
    hs.sort()
    signed_names = ";".join(k for k, _ in hs)
    params = sorted(urllib.parse.parse_qsl(query, keep_blank_values=True))
    cq = "&".join("%s=%s" % (urllib.parse.quote(k, safe="-_.~"), urllib.parse.quote(v, safe="-_.~")) for k, v in params)
    canonical = "\n".join([method, path, cq, "".join("%s:%s\n" % (k, v.strip()) for k, v in hs), signed_names,
                           payload_hash])
    scope = "%s/us-east-1/s3/aws4_request" % date
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + sk).encode()
    for part in (date, "us-east-1", "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
    out = [("Host", host), ("x-amz-content-sha256", payload_hash), ("x-amz-date", amz_date)]
    out += list(headers or [])
    out.append(("Authorization", "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s"
                % (ak, scope, signed_names, sig)))
    return out


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    @property
    def request_id(self):
        return self.headers.get("x-amz-request-id")

    @property
    def code(self):
        m = re.search(rb"<Code>([^<]*)</Code>", self.body)
        return m.group(1).decode() if m else None


def read_response(sock, head_request=False):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed before an answer: %r" % data)
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    length = 0 if head_request else int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return Response(status, headers, rest[:length])


def request(port, method, bucket="", key="", query="", body=b"", ak=AK, sk=SK, headers=None):
    """One signed request on a fresh connection; the Response."""
    path = "/" + urllib.parse.quote(bucket, safe="") if bucket else "/"
    if key:
        path += "/" + urllib.parse.quote(key, safe="/-_.~")
    host = "127.0.0.1:%d" % port
    hs = sign(ak, sk, method, host, path, query, headers)
    hs.append(("Content-Length", str(len(body))))
    target = path + ("?" + query if query else "")
    data = ("%s %s HTTP/1.1\r\n" % (method, target) + "".join("%s: %s\r\n" % h for h in hs) + "\r\n").encode() + body
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(data)
        return read_response(s, method == "HEAD")


# --- the access log --------------------------------------------------------------------------

HOSTILE_KEY = 'evil key\n2026-01-01T00:00:00.000Z 1.2.3.4 forged "line" \t%0A'
TEXT_FIELDS = ["time", "remote", "user", "method", "bucket", "key", "operation", "status", "error", "bytes_sent",
               "bytes_received", "bytes_direct", "path", "duration_us", "request_id"]


def mixed_run(port):
    """Requests of every kind; returns [(response, operation, status, code)] expected in the log."""
    out = []

    def note(resp, op, status, code=None):
        expect(resp.status == status, "%s answers %d (got %d %s)" % (op, status, resp.status, resp.code))
        expect(resp.request_id, "%s carries x-amz-request-id" % op)
        out.append((resp, op, status, code))
        return resp

    note(request(port, "PUT", "logs"), "CreateBucket", 200)
    note(request(port, "PUT", "logs", "a.txt", body=b"x" * 1000), "PutObject", 200)
    note(request(port, "GET", "logs", "a.txt"), "GetObject", 200)
    note(request(port, "HEAD", "logs", "a.txt"), "HeadObject", 200)
    note(request(port, "GET", "logs", "missing"), "GetObject", 404, "NoSuchKey")
    note(request(port, "GET", "logs", "a.txt", sk="wrong-secret"), "GetObject", 403, "SignatureDoesNotMatch")
    note(request(port, "GET", "logs", "a.txt", ak="NOBODY"), "GetObject", 403, "InvalidAccessKeyId")
    note(request(port, "PUT", "logs", HOSTILE_KEY, body=b"hostile"), "PutObject", 200)
    note(request(port, "GET", "logs", HOSTILE_KEY), "GetObject", 200)
    # A multipart upload: create, two parts (the first at the 5 MiB minimum), complete.
    created = note(request(port, "POST", "logs", "big", query="uploads"), "CreateMultipartUpload", 200)
    upload_id = re.search(rb"<UploadId>([^<]+)</UploadId>", created.body).group(1).decode()
    etags = []
    for number, size in ((1, 5 * MIB), (2, 1000)):
        r = note(request(port, "PUT", "logs", "big", query="partNumber=%d&uploadId=%s" % (number, upload_id),
                         body=b"p" * size), "UploadPart", 200)
        etags.append(r.headers["etag"])
    complete = ("<CompleteMultipartUpload>" + "".join(
        "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>" % (i + 1, e) for i, e in enumerate(etags))
        + "</CompleteMultipartUpload>").encode()
    note(request(port, "POST", "logs", "big", query="uploadId=" + upload_id, body=complete),
         "CompleteMultipartUpload", 200)
    note(request(port, "GET", "logs", "big"), "GetObject", 200)
    return out


def check_log(entries, expected):
    """`entries`: dicts by field name, one per log line."""
    by_id = {}
    for e in entries:
        by_id.setdefault(e["request_id"], []).append(e)
    for resp, op, status, code in expected:
        got = by_id.get(resp.request_id, [])
        expect(len(got) == 1, "request %s (%s %d) is logged exactly once (%d lines)"
               % (resp.request_id, op, status, len(got)))
        e = got[0]
        expect(e["operation"] == op and int(e["status"]) == status,
               "its line says %s %d (got %s %s)" % (op, status, e["operation"], e["status"]))
        expect(e["error"] == (code or "-"), "its error code is %s (got %s)" % (code or "-", e["error"]))
        expect(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["time"]), "its time is ISO 8601 UTC with ms")
        expect(int(e["duration_us"]) >= 0, "its duration is a number of microseconds")
        if status == 200 and op == "GetObject":
            expect(int(e["bytes_sent"]) == len(resp.body) and e["path"] == "http",
                   "a GET logs its %d body bytes over http" % len(resp.body))
        if op in ("PutObject", "UploadPart") and status == 200:
            expect(int(e["bytes_received"]) > 0 and e["path"] == "http", "a PUT logs its payload over http")
    for e in entries:
        if e["key"] == HOSTILE_KEY:
            expect(e["user"] == AK, "the hostile key's lines carry the user")
    expect(sum(1 for e in entries if e["key"] == HOSTILE_KEY) == 2, "both requests of the hostile key decode to it")
    users = {e["user"] for e in entries}
    expect("-" in users and AK in users, "failed authentication logs user '-' (users: %s)" % sorted(users))


def unescape_text(field):
    if field == "-":
        return ""
    return urllib.parse.unquote(field, errors="strict")


def scenario_log_text(binary, tmp):
    log = os.path.join(tmp, "access.log")
    server = Server(binary, os.path.join(tmp, "root"), AK, SK, extra=["--access-log", log, "--fabric", "off"]).start()
    try:
        expected = mixed_run(server.port)
    finally:
        server.stop()
    with open(log, "rb") as f:
        raw = f.read()
    lines = raw.decode("ascii").split("\n")
    expect(lines[-1] == "", "the log ends in a newline")
    entries = []
    for line in lines[:-1]:
        fields = line.split(" ")
        expect(len(fields) == len(TEXT_FIELDS), "a line has %d fields: %r" % (len(TEXT_FIELDS), line[:120]))
        entry = dict(zip(TEXT_FIELDS, fields))
        expect(fields[2] != "%2D", "a user not authenticated is written '-', not escaped")
        for name in ("user", "bucket", "key", "error", "request_id", "path"):
            entry[name] = unescape_text(entry[name]) or "-" if name in ("user", "error") else unescape_text(entry[name])
        entries.append(entry)
    expect(len(entries) == len(expected), "%d lines for %d requests" % (len(entries), len(expected)))
    check_log(entries, expected)
    return 0


def scenario_log_json(binary, tmp):
    server = Server(binary, os.path.join(tmp, "root"), AK, SK,
                    extra=["--access-log", "stderr", "--access-log-format", "json", "--fabric", "off"]).start()
    try:
        expected = mixed_run(server.port)
    finally:
        server.stop()
        rest = server.proc.stdout.read()
    entries = []
    for line in rest.split("\n"):
        if line.startswith("{"):
            entries.append(json.loads(line))
        else:
            expect(not line or line.startswith("sluice serve:"), "nothing but log lines and messages: %r" % line[:80])
    expect(len(entries) == len(expected), "%d JSON lines for %d requests" % (len(entries), len(expected)))
    check_log(entries, expected)
    return 0


# --- the admin listener ----------------------------------------------------------------------

def parse_prometheus(text):
    """Prometheus text format 0.0.4: ({family: type}, {(name, frozenset(labels)): value}, [names in order])."""
    types, samples, order = {}, {}, []
    for line in text.split("\n"):
        if not line:
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        if line.startswith("#"):
            continue
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)", line)
        if not m:
            raise AssertionError("not a sample line: %r" % line)
        labels = {}
        rest = m.group(2) or ""
        while rest:
            lm = re.match(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?', rest)
            if not lm:
                raise AssertionError("bad labels in %r" % line)
            labels[lm.group(1)] = re.sub(r"\\(.)", lambda x: "\n" if x.group(1) == "n" else x.group(1), lm.group(2))
            rest = rest[lm.end():]
        value = float(m.group(3))
        key = (m.group(1), frozenset(labels.items()))
        expect_unique = key not in samples
        if not expect_unique:
            raise AssertionError("sample twice: %r" % line)
        samples[key] = value
        order.append((m.group(1), labels, value))
    return types, samples, order


def scrape(admin_port, path="/metrics"):
    r = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "http://127.0.0.1:%d%s" % (admin_port, path)],
                       capture_output=True, text=True, timeout=30)
    body, _, code = r.stdout.rpartition("\n")
    return int(code), body[:-1] if body.endswith("\n") else body


def admin_port_of(server):
    for line in server.banner:
        m = re.search(r"admin on [^ ]+:(\d+)", line)
        if m:
            return int(m.group(1))
    raise AssertionError("no admin line in %r" % server.banner)


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def scenario_metrics(binary, tmp):
    if not shutil.which("curl"):
        print("skipped: curl is not installed")
        return SKIP
    server = Server(binary, os.path.join(tmp, "root"), AK, SK,
                    extra=["--admin-listen", "127.0.0.1:0", "--fabric", "off"]).start()
    try:
        admin = admin_port_of(server)
        expect(request(server.port, "PUT", "metrics-b").status == 200, "a bucket")
        code, before_text = scrape(admin)
        expect(code == 200, "GET /metrics is 200")
        types, before, _ = parse_prometheus(before_text)
        for family, kind in (("sluice_requests_total", "counter"), ("sluice_request_errors_total", "counter"),
                             ("sluice_bytes_total", "counter"), ("sluice_request_duration_seconds", "histogram"),
                             ("sluice_rdma_declines_total", "counter"), ("sluice_open_connections", "gauge")):
            expect(types.get(family) == kind, "# TYPE %s %s" % (family, kind))
        for i in range(3):
            expect(request(server.port, "PUT", "metrics-b", "k%d" % i, body=b"y" * 1000).status == 200, "PUT k%d" % i)
        for i in range(2):
            expect(request(server.port, "GET", "metrics-b", "k%d" % i).status == 200, "GET k%d" % i)
        expect(request(server.port, "GET", "metrics-b", "nope").status == 404, "GET of a missing key")
        expect(request(server.port, "GET", "metrics-b", "k0", ak="NOBODY").status == 403, "GET by an unknown key")
        _, after_text = scrape(admin)
        _, after, order = parse_prometheus(after_text)

        def delta(name, **labels):
            return value(after, name, **labels) - value(before, name, **labels)

        expect(delta("sluice_requests_total", operation="PutObject", code="200") == 3, "3 PutObject 200")
        expect(delta("sluice_requests_total", operation="GetObject", code="200") == 2, "2 GetObject 200")
        expect(delta("sluice_requests_total", operation="GetObject", code="404") == 1, "1 GetObject 404")
        expect(delta("sluice_requests_total", operation="GetObject", code="403") == 1, "1 GetObject 403")
        expect(delta("sluice_request_errors_total", operation="GetObject", code="NoSuchKey") == 1, "1 NoSuchKey")
        expect(delta("sluice_request_errors_total", operation="GetObject", code="InvalidAccessKeyId") == 1,
               "1 InvalidAccessKeyId")
        expect(delta("sluice_bytes_total", direction="in", path="http") == 3000, "3000 bytes in over http")
        expect(delta("sluice_bytes_total", direction="out", path="http") >= 2000, "at least 2000 bytes out over http")
        expect(delta("sluice_request_duration_seconds_count", operation="PutObject") == 3, "3 PutObject durations")
        expect(value(after, "sluice_open_connections") >= 0, "sluice_open_connections is there")
        # Histograms: per operation, buckets cumulative, the last le="+Inf", equal to _count.
        buckets = {}
        for name, labels, v in order:
            if name == "sluice_request_duration_seconds_bucket":
                buckets.setdefault(labels["operation"], []).append((labels["le"], v))
        expect("GetObject" in buckets and "PutObject" in buckets, "histograms for GetObject and PutObject")
        for op, series in buckets.items():
            values = [v for _, v in series]
            expect(values == sorted(values), "%s buckets are cumulative" % op)
            expect(series[-1][0] == "+Inf", "%s buckets end in +Inf" % op)
            bounds = [float(le) for le, _ in series[:-1]]
            expect(bounds == sorted(bounds), "%s bucket bounds increase" % op)
            expect(series[-1][1] == value(after, "sluice_request_duration_seconds_count", operation=op),
                   "%s +Inf equals _count" % op)
    finally:
        server.stop()
    return 0


def scenario_metrics_planes(binary, tmp):
    if not shutil.which("curl"):
        print("skipped: curl is not installed")
        return SKIP
    server = Server(binary, os.path.join(tmp, "root"), AK, SK,
                    extra=["--admin-listen", "127.0.0.1:0", "--fabric", "tcp",
                           "--grant-socket", os.path.join(tmp, "grants.sock")])
    try:
        server.start()
    except RuntimeError as e:
        print("skipped: sluice serve --fabric tcp did not start (no libfabric tcp provider here?): %s" % e)
        return SKIP
    try:
        admin = admin_port_of(server)
        provider = "tcp;ofi_rxm"
        expect(any(provider in line for line in server.banner), "the server opened %s" % provider)
        code, before_text = scrape(admin)
        expect(code == 200, "GET /metrics is 200")
        types, before, _ = parse_prometheus(before_text)
        for family, kind in (("sluice_fabric_rma_operations_total", "counter"),
                             ("sluice_fabric_rma_bytes_total", "counter"),
                             ("sluice_fabric_rma_errors_total", "counter"),
                             ("sluice_fabric_registrations_total", "counter"),
                             ("sluice_fabric_registration_cache_hits_total", "counter"),
                             ("sluice_fabric_registration_cache_misses_total", "counter"),
                             ("sluice_fabric_registration_cache_entries", "gauge"),
                             ("sluice_fabric_registration_cache_bytes", "gauge"),
                             ("sluice_fabric_staging_buffers", "gauge"),
                             ("sluice_fabric_staging_buffers_in_use", "gauge"),
                             ("sluice_grant_sessions", "gauge"), ("sluice_grant_buffers", "gauge"),
                             ("sluice_open_connections", "gauge")):
            expect(types.get(family) == kind, "# TYPE %s %s" % (family, kind))
        staging = value(before, "sluice_fabric_staging_buffers", provider=provider)
        expect(staging > 0, "%d staging buffers registered on %s" % (staging, provider))
        expect(value(before, "sluice_fabric_staging_buffers_in_use", provider=provider) == 0, "none in use when idle")
        expect(value(before, "sluice_fabric_registrations_total", provider=provider) >= staging,
               "every staging buffer counts as a registration")
        expect(value(before, "sluice_grant_sessions") == 0 and value(before, "sluice_grant_buffers") == 0,
               "no grant sessions or grants yet")
        # The CUDA grant opener's registration cache: there when the server opened one (a GPU host).
        cuda = any("cuda-ipc" in line and "no cuda-ipc" not in line for line in server.banner)
        grant_families = ("sluice_grant_registered_bytes", "sluice_grant_registrations_total",
                          "sluice_grant_cache_hits_total", "sluice_grant_evictions_total", "sluice_grant_open_handles")
        if cuda:
            for family in grant_families:
                expect(family in types, "%s (the CUDA grant opener)" % family)
        else:
            expect(not any(f in types for f in grant_families), "no CUDA grant opener, none of its families")

        src = os.path.join(tmp, "one-mib")
        with open(src, "wb") as f:
            f.write(os.urandom(MIB))
        env = dict(os.environ, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK)
        common = ["--endpoint", server.url, "--via", "rdma", "--fabric", "tcp", "--no-progress"]
        for args in (["mb", "s3://planes", "--endpoint", server.url], ["put", src, "s3://planes/k"] + common,
                     ["get", "s3://planes/k", os.path.join(tmp, "back")] + common):
            r = subprocess.run([binary] + args, capture_output=True, text=True, env=env, timeout=120)
            expect(r.returncode == 0, "sluice %s (%s)" % (args[0], (r.stdout + r.stderr).strip()))
        _, after_text = scrape(admin)
        _, after, _ = parse_prometheus(after_text)

        def delta(name, **labels):
            return value(after, name, **labels) - value(before, name, **labels)

        expect(delta("sluice_bytes_total", direction="in", path="rdma") == MIB, "1 MiB in by RDMA (the PUT)")
        expect(delta("sluice_bytes_total", direction="out", path="rdma") == MIB, "1 MiB out by RDMA (the GET)")
        expect(delta("sluice_fabric_rma_bytes_total", provider=provider) == 2 * MIB,
               "the provider's RMAs moved 2 MiB (%d)" % delta("sluice_fabric_rma_bytes_total", provider=provider))
        expect(delta("sluice_fabric_rma_operations_total", provider=provider) >= 2, "at least one RMA each way")
        expect(delta("sluice_fabric_rma_errors_total", provider=provider) == 0, "no RMA errors")
        expect(delta("sluice_fabric_registrations_total", provider=provider) >= 1,
               "the GET registered its source (%d)" % delta("sluice_fabric_registrations_total", provider=provider))
        expect(value(after, "sluice_fabric_staging_buffers_in_use", provider=provider) == 0,
               "the staging buffers went back to the pool")
        with open(src, "rb") as f, open(os.path.join(tmp, "back"), "rb") as g:
            expect(f.read() == g.read(), "the GET by RDMA brought the object's bytes")
        expect(delta("sluice_fabric_registration_cache_misses_total", provider=provider) == 1,
               "the GET's source was registered and kept for its version")
        expect(value(after, "sluice_fabric_registration_cache_entries", provider=provider) == 1
               and value(after, "sluice_fabric_registration_cache_bytes", provider=provider) == MIB,
               "one version of 1 MiB kept")

        # The same version again: sent from the registration kept, no fi_mr_reg. Then the key
        # replaced: its new bytes (a new version, registered anew), never the kept ones.
        def get(target):
            r = subprocess.run([binary, "get", "s3://planes/k", target] + common, capture_output=True, text=True,
                               env=env, timeout=120)
            expect(r.returncode == 0, "sluice get (%s)" % (r.stdout + r.stderr).strip())
            with open(target, "rb") as f:
                return f.read()

        with open(src, "rb") as f:
            first = f.read()
        expect(get(os.path.join(tmp, "again")) == first, "the second GET brought the same bytes")
        _, again_text = scrape(admin)
        _, again, _ = parse_prometheus(again_text)
        expect(value(again, "sluice_fabric_registration_cache_hits_total", provider=provider)
               - value(after, "sluice_fabric_registration_cache_hits_total", provider=provider) == 1,
               "the second GET of the version hit the registration cache")
        expect(value(again, "sluice_fabric_registrations_total", provider=provider)
               == value(after, "sluice_fabric_registrations_total", provider=provider),
               "and registered nothing")
        replaced = os.path.join(tmp, "replaced")
        with open(replaced, "wb") as f:
            f.write(os.urandom(MIB))
        r = subprocess.run([binary, "put", replaced, "s3://planes/k"] + common, capture_output=True, text=True,
                           env=env, timeout=120)
        expect(r.returncode == 0, "sluice put (%s)" % (r.stdout + r.stderr).strip())
        with open(replaced, "rb") as f:
            expect(get(os.path.join(tmp, "new")) == f.read(), "the GET after the PUT brought the new bytes")
        _, last_text = scrape(admin)
        _, last, _ = parse_prometheus(last_text)
        expect(value(last, "sluice_fabric_registration_cache_misses_total", provider=provider)
               - value(again, "sluice_fabric_registration_cache_misses_total", provider=provider) == 1,
               "the new version was registered anew")
    finally:
        server.stop()
    return 0


def scenario_health(binary, tmp):
    if not shutil.which("curl"):
        print("skipped: curl is not installed")
        return SKIP
    server = Server(binary, os.path.join(tmp, "root"), AK, SK,
                    extra=["--admin-listen", "127.0.0.1:0", "--fabric", "off"]).start()
    try:
        admin = admin_port_of(server)
        expect(scrape(admin, "/health") == (200, "ok"), "/health is 200 ok")
        expect(scrape(admin, "/ready") == (200, "ready"), "/ready is 200 once serving")
        expect(request(server.port, "PUT", "health-b").status == 200, "a bucket")
        expect(request(server.port, "PUT", "health-b", "k", body=b"secret bytes").status == 200, "an object")
        for path in ("/", "/health-b", "/health-b/k", "/metrics/x", "/healthz", "/health-b/k?X-Amz-Signature=x"):
            code, body = scrape(admin, path)
            expect(code == 404 and "secret" not in body, "admin %s is 404" % path)
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
                            "http://127.0.0.1:%d/metrics" % admin], capture_output=True, text=True, timeout=30)
        expect(r.stdout == "404", "POST /metrics is 404")
        r = request(admin, "GET", "health-b", "k")  # a signed S3 request to the admin port
        expect(r.status == 404 and b"secret" not in r.body, "a signed S3 GET on the admin port is 404")
        # The admin port is not the S3 port.
        expect(request(server.port, "GET", "", "", query="").status == 200, "S3 still answers on its port")
        # A scraper's kept-alive connection, idle, does not hold the server when it stops.
        kept = socket.create_connection(("127.0.0.1", admin))
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: admin\r\n\r\n")
        expect(read_response(kept).status == 200, "/health on a kept-alive connection")
        started = time.time()
        server.stop()
        expect(time.time() - started < 3, "stop is not held by an idle admin connection (%.1f s)" % (time.time() - started))
        kept.close()
    finally:
        server.stop()
    return 0


# --- ownership and SIGHUP --------------------------------------------------------------------

def write_config(path, users):
    with open(path + ".tmp", "w") as f:
        json.dump({"users": [{"access_key_id": a, "secret_access_key": s} for a, s in users]}, f)
    os.rename(path + ".tmp", path)


def scenario_ownership(binary, tmp):
    root, config = os.path.join(tmp, "root"), os.path.join(tmp, "config.json")
    users = [("ALICE", "alice-secret"), ("BOB", "bob-secret")]
    write_config(config, users)
    server = Server(binary, root, AK, SK, extra=["--config", config, "--fabric", "off"]).start()
    try:
        expect(request(server.port, "PUT", "alice-b", ak="ALICE", sk="alice-secret").status == 200, "ALICE creates")
        expect(request(server.port, "PUT", "bob-b", ak="BOB", sk="bob-secret").status == 200, "BOB creates")
    finally:
        server.stop()
    # A bucket of an older store: bucket.json without an owner.
    old = os.path.join(root, "buckets", "old-b")
    os.makedirs(os.path.join(old, "objects"))
    os.makedirs(os.path.join(old, "uploads"))
    with open(os.path.join(old, "bucket.json"), "w") as f:
        f.write('{"v":1,"created":%d}' % (time.time_ns()))
    with open(os.path.join(root, "buckets", "bob-b", "bucket.json")) as f:
        expect(json.load(f).get("owner") == "BOB", "bob-b's bucket.json names its owner")
    server = Server(binary, root, AK, SK, extra=["--config", config, "--fabric", "off"]).start()
    try:
        p = server.port
        expect(request(p, "PUT", "alice-b", "k", body=b"a", ak="ALICE", sk="alice-secret").status == 200,
               "after a restart ALICE still writes to alice-b")
        expect(request(p, "PUT", "bob-b", "k", body=b"b", ak="BOB", sk="bob-secret").status == 200,
               "after a restart BOB still writes to bob-b")
        r = request(p, "GET", "bob-b", "k", ak="ALICE", sk="alice-secret")
        expect(r.status == 403 and r.code == "AccessDenied", "ALICE gets 403 on bob-b")
        r = request(p, "GET", "alice-b", "k", ak="BOB", sk="bob-secret")
        expect(r.status == 403 and r.code == "AccessDenied", "BOB gets 403 on alice-b")
        listed = request(p, "GET", ak="BOB", sk="bob-secret").body
        expect(b"bob-b" in listed and b"alice-b" not in listed, "BOB lists only bob-b")
        expect(request(p, "HEAD", "old-b", ak="ALICE", sk="alice-secret").status == 200,
               "a bucket.json without an owner belongs to the first user")
        expect(request(p, "HEAD", "old-b", ak="BOB", sk="bob-secret").status == 403, "... and not to another")
    finally:
        server.stop()
    return 0


def wait_for_line(server, needle, timeout=10):
    """Reads the server's output until a line contains `needle`."""
    result = []

    def reader():
        for line in server.proc.stdout:
            if needle in line:
                result.append(line)
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        raise AssertionError("the server did not say %r" % needle)
    return result[0]


def scenario_sighup(binary, tmp):
    root, config = os.path.join(tmp, "root"), os.path.join(tmp, "config.json")
    write_config(config, [("ALICE", "alice-secret")])
    server = Server(binary, root, AK, SK, extra=["--config", config, "--fabric", "off"]).start()
    try:
        p = server.port
        r = request(p, "PUT", "carol-b", ak="CAROL", sk="carol-secret")
        expect(r.status == 403 and r.code == "InvalidAccessKeyId", "CAROL is unknown before the reload")
        expect(request(p, "PUT", "alice-b", ak="ALICE", sk="alice-secret").status == 200, "ALICE creates a bucket")

        # A PUT by ALICE whose body is still arriving while ALICE is removed.
        size = 8 * MIB
        path = "/alice-b/slow"
        hs = sign("ALICE", "alice-secret", "PUT", "127.0.0.1:%d" % p, path)
        hs.append(("Content-Length", str(size)))
        slow = socket.create_connection(("127.0.0.1", p))
        slow.sendall(("PUT %s HTTP/1.1\r\n" % path + "".join("%s: %s\r\n" % h for h in hs) + "\r\n").encode())
        slow.sendall(b"z" * (size // 2))
        time.sleep(0.3)

        write_config(config, [("CAROL", "carol-secret")])
        server.proc.send_signal(signal.SIGHUP)
        wait_for_line(server, "SIGHUP")
        slow.sendall(b"z" * (size - size // 2))
        r = read_response(slow)
        slow.close()
        expect(r.status == 200, "the PUT in flight during the SIGHUP completes (got %d %s)" % (r.status, r.code))

        expect(request(p, "PUT", "carol-b", ak="CAROL", sk="carol-secret").status == 200,
               "CAROL, added to the file, creates a bucket after SIGHUP")
        r = request(p, "GET", "alice-b", "slow", ak="ALICE", sk="alice-secret")
        expect(r.status == 403 and r.code == "InvalidAccessKeyId", "ALICE, removed, gets 403 InvalidAccessKeyId")
        r = request(p, "HEAD", "alice-b", ak=AK, sk=SK)
        expect(r.status == 403, "the --access-key user stays a user, and does not own alice-b")
        # Back again: ALICE still owns her bucket and its object is whole.
        write_config(config, [("CAROL", "carol-secret"), ("ALICE", "alice-secret")])
        server.proc.send_signal(signal.SIGHUP)
        wait_for_line(server, "SIGHUP")
        r = request(p, "GET", "alice-b", "slow", ak="ALICE", sk="alice-secret")
        expect(r.status == 200 and len(r.body) == size, "ALICE, added back, reads the whole object")
    finally:
        server.stop()
    return 0


SCENARIOS = {"log-text": scenario_log_text, "log-json": scenario_log_json, "metrics": scenario_metrics,
             "metrics-planes": scenario_metrics_planes, "health": scenario_health, "ownership": scenario_ownership, "sighup": scenario_sighup}


def main():
    binary, scenario = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="sluice-ops-")
    try:
        return SCENARIOS[scenario](binary, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
