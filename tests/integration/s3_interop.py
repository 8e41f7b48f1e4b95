#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Interop tests: a real `sluice serve` process on an ephemeral loopback port, driven by real S3
clients. One client per run:  s3_interop.py SLUICE_BINARY CLIENT
CLIENT: curl | awscli-v1 | awscli-v2 | boto3 | s3cmd | rclone | negative | crash
Exit 0: passed; 77: the client is not installed (CTest reports skipped, with the reason printed);
anything else: failed."""
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import urllib.error

AK, SK = "SLUICEAK", "sluice-secret-key"
SKIP = 77

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server as _Server, expect, make_file, md5  # noqa: E402


def Server(binary, root, extra=()):
    return _Server(binary, root, AK, SK, extra)




def run(cmd, env=None, check=True, input=None):
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run(cmd, env=e, capture_output=True, text=True, input=input)
    if check and r.returncode != 0:
        raise AssertionError("command failed (%d): %s\nstdout: %s\nstderr: %s" %
                             (r.returncode, " ".join(cmd), r.stdout[-2000:], r.stderr[-2000:]))
    return r


def same(a, b):
    return md5(a) == md5(b)


# ------------------------------------------------------------------------------------------
def curl_args(server, extra=()):
    return ["curl", "-sS", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", AK + ":" + SK,
            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"] + list(extra)


def curl_status(server, args):
    sink = [] if "-o" in args else ["-o", "/dev/null"]
    r = run(curl_args(server, sink + ["-w", "%{http_code}"] + args), check=False)
    return r.stdout.strip()


def test_curl(server, tmp):
    if not shutil.which("curl"):
        return "curl is not installed"
    u = server.url
    expect(curl_status(server, ["-X", "PUT", u + "/curl-bucket"]) == "200", "curl: CreateBucket")
    for size in (0, 1, 4095, 5 * 1024 * 1024 + 3):
        src = make_file(os.path.join(tmp, "in-%d" % size), size, size)
        expect(curl_status(server, ["-T", src, u + "/curl-bucket/obj-%d" % size]) == "200", "curl: PutObject %d bytes" % size)
        out = os.path.join(tmp, "out-%d" % size)
        open(out, "wb").close()  # curl writes no file for an empty body
        expect(curl_status(server, ["-o", out, u + "/curl-bucket/obj-%d" % size]) == "200", "curl: GetObject %d bytes" % size)
        expect(same(src, out), "curl: %d bytes round-trip byte-exact" % size)
    src = os.path.join(tmp, "in-%d" % (5 * 1024 * 1024 + 3))
    out = os.path.join(tmp, "range")
    expect(curl_status(server, ["-r", "1000-1999", "-o", out, u + "/curl-bucket/obj-%d" % (5 * 1024 * 1024 + 3)]) == "206",
           "curl: ranged GetObject answers 206")
    with open(src, "rb") as f:
        f.seek(1000)
        expect(open(out, "rb").read() == f.read(1000), "curl: range bytes exact")
    head = run(curl_args(server, ["-I", u + "/curl-bucket/obj-1"])).stdout
    expect("Content-Length: 1" in head and "ETag:" in head, "curl: HeadObject has length and ETag")
    expect(curl_status(server, ["-H", "x-amz-meta-color: blue", "-H", "Content-Type: text/plain", "-T",
                                os.path.join(tmp, "in-1"), u + "/curl-bucket/meta"]) == "200", "curl: PutObject with metadata")
    head = run(curl_args(server, ["-I", u + "/curl-bucket/meta"])).stdout.lower()
    expect("x-amz-meta-color: blue" in head and "content-type: text/plain" in head, "curl: metadata and Content-Type returned")
    etag = [l.split(":", 1)[1].strip() for l in head.splitlines() if l.startswith("etag:")][0]
    expect(curl_status(server, ["-H", "If-None-Match: " + etag, u + "/curl-bucket/meta"]) == "304",
           "curl: If-None-Match with the ETag → 304")
    expect(curl_status(server, ["-H", 'If-Match: "00000000000000000000000000000000"', u + "/curl-bucket/meta"]) == "412",
           "curl: If-Match with another ETag → 412")
    expect(curl_status(server, ["-H", "If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT", u + "/curl-bucket/meta"]) == "200",
           "curl: If-Modified-Since in the past → 200")
    expect(curl_status(server, ["-H", "If-Unmodified-Since: Sat, 01 Jan 2000 00:00:00 GMT", u + "/curl-bucket/meta"]) == "412",
           "curl: If-Unmodified-Since in the past → 412")
    vhost = "http://curl-bucket.localhost:%d/meta" % server.port  # curl resolves *.localhost to loopback
    out = os.path.join(tmp, "vhost")
    expect(curl_status(server, ["-o", out, vhost]) == "200" and same(out, os.path.join(tmp, "in-1")),
           "curl: virtual-host-style GET (bucket in the Host header)")
    expect(curl_status(server, ["-X", "DELETE", u + "/curl-bucket/meta"]) == "204", "curl: DeleteObject")
    expect(curl_status(server, [u + "/curl-bucket/meta"]) == "404", "curl: deleted object is gone")
    return None


def test_negative(server, tmp):
    u = server.url
    run(curl_args(server, ["-X", "PUT", u + "/neg"]))
    src = make_file(os.path.join(tmp, "neg"), 1000, 7)
    run(curl_args(server, ["-T", src, u + "/neg/k"]))
    bad = ["curl", "-sS", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", AK + ":wrong",
           "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-o", "/dev/stderr", "-w", "%{http_code}", u + "/neg/k"]
    r = run(bad, check=False)
    expect(r.stdout.strip() == "403" and "SignatureDoesNotMatch" in r.stderr, "wrong secret: 403 SignatureDoesNotMatch")
    expect(curl_status(server, [u + "/missing-bucket/k"]) == "404", "missing bucket: 404")
    r = run(curl_args(server, [u + "/missing-bucket/k"]), check=False)
    expect("NoSuchBucket" in r.stdout, "missing bucket: NoSuchBucket")
    expect(curl_status(server, ["-r", "5000-6000", u + "/neg/k"]) == "416", "bad range: 416")
    r = run(curl_args(server, ["-H", "Content-MD5: AAAAAAAAAAAAAAAAAAAAAA==", "-T", src, "-w", "%{http_code}", u + "/neg/bad-md5"]),
            check=False)
    expect(r.stdout.strip().endswith("400") and "BadDigest" in r.stdout, "bad Content-MD5: 400 BadDigest")
    expect(curl_status(server, [u + "/neg/bad-md5"]) == "404", "bad Content-MD5: nothing stored")
    expect(curl_status(server, [u + "/neg/k?retention="]) == "501",
           "unimplemented sub-resource: 501 NotImplemented")
    anonymous = run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", u + "/neg/k"], check=False)
    expect(anonymous.stdout.strip() == "403", "anonymous access is off: 403")
    return None


def presign(method, url_base, bucket, key, expires, when):
    """SigV4 presigned URL, computed here independently of sluice (standard library only)."""
    import hmac
    import urllib.parse
    host = url_base.split("//")[1]
    amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when))
    date = amz_date[:8]
    scope = "%s/us-east-1/s3/aws4_request" % date
    path = "/%s/%s" % (bucket, urllib.parse.quote(key, safe="/~"))
    q = {"X-Amz-Algorithm": "AWS4-HMAC-SHA256", "X-Amz-Credential": "%s/%s" % (AK, scope), "X-Amz-Date": amz_date,
         "X-Amz-Expires": str(expires), "X-Amz-SignedHeaders": "host"}
    query = "&".join("%s=%s" % (urllib.parse.quote(k, safe="~"), urllib.parse.quote(v, safe="~")) for k, v in sorted(q.items()))
    canonical = "\n".join([method, path, query, "host:%s\n" % host, "host", "UNSIGNED-PAYLOAD"])
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key_ = ("AWS4" + SK).encode()
    for part in (date, "us-east-1", "s3", "aws4_request"):
        key_ = hmac.new(key_, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(key_, sts.encode(), hashlib.sha256).hexdigest()
    return "%s%s?%s&X-Amz-Signature=%s" % (url_base, path, query, sig)


def http(method, url, data=None):
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_presign(server, tmp):
    run(curl_args(server, ["-X", "PUT", server.url + "/pre"]))
    body = os.urandom(100000)
    status, _ = http("PUT", presign("PUT", server.url, "pre", "up load+key", 300, time.time()), body)
    expect(status == 200, "presigned PUT: 200")
    status, got = http("GET", presign("GET", server.url, "pre", "up load+key", 300, time.time()))
    expect(status == 200 and got == body, "presigned GET: byte-exact")
    status, got = http("GET", presign("GET", server.url, "pre", "up load+key", 60, time.time() - 7200))
    expect(status == 403 and b"AccessDenied" in got, "expired presigned URL: 403 AccessDenied")
    url = presign("GET", server.url, "pre", "up load+key", 300, time.time())
    status, _ = http("GET", url[:-1] + ("0" if url[-1] != "0" else "1"))
    expect(status == 403, "tampered presigned URL: 403")
    return None


def aws_env(server):
    return {"AWS_ACCESS_KEY_ID": AK, "AWS_SECRET_ACCESS_KEY": SK, "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_PAGER": ""}


def test_awscli(server, tmp, aws):
    if not aws:
        return "the AWS CLI is not installed"
    env = aws_env(server)
    ep = ["--endpoint-url", server.url]
    version = run([aws, "--version"], env=env).stdout.strip() or run([aws, "--version"], env=env).stderr.strip()
    print("  using", aws, version)
    run([aws] + ep + ["s3", "mb", "s3://aws-bucket"], env=env)
    small = make_file(os.path.join(tmp, "small"), 12345, 1)
    big = make_file(os.path.join(tmp, "big"), 21 * 1024 * 1024 + 7, 2)  # multipart: 8 MiB parts
    run([aws] + ep + ["s3", "cp", small, "s3://aws-bucket/dir/small"], env=env)
    run([aws] + ep + ["s3", "cp", big, "s3://aws-bucket/dir/big"], env=env)
    out = run([aws] + ep + ["s3", "ls", "s3://aws-bucket/dir/"], env=env).stdout
    expect("small" in out and "big" in out, "aws s3 ls lists both objects")
    run([aws] + ep + ["s3", "cp", "s3://aws-bucket/dir/big", os.path.join(tmp, "big.out")], env=env)
    expect(same(big, os.path.join(tmp, "big.out")), "aws s3 cp: multipart upload + download byte-exact")
    head = run([aws] + ep + ["s3api", "head-object", "--bucket", "aws-bucket", "--key", "dir/big"], env=env).stdout
    expect('-3\\"' in head or '-3"' in head, "multipart ETag has the -3 suffix")
    run([aws] + ep + ["s3api", "put-object", "--bucket", "aws-bucket", "--key", "meta", "--body", small,
                      "--metadata", "owner=sluice", "--content-type", "application/x-test"], env=env)
    head = run([aws] + ep + ["s3api", "head-object", "--bucket", "aws-bucket", "--key", "meta"], env=env).stdout
    expect('"owner": "sluice"' in head and "application/x-test" in head, "s3api put-object metadata round-trip")
    run([aws] + ep + ["s3", "rm", "--recursive", "s3://aws-bucket/"], env=env)
    run([aws] + ep + ["s3", "rb", "s3://aws-bucket"], env=env)
    out = run([aws] + ep + ["s3", "ls"], env=env).stdout
    expect("aws-bucket" not in out, "aws s3 rb removed the bucket")
    return None


def test_boto3(server, tmp):
    r = subprocess.run(["/usr/bin/python3", "-c", "import boto3"], capture_output=True)
    if r.returncode != 0:
        return "Debian's python3-boto3 is not installed"
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boto3_client.py")
    r = run(["/usr/bin/python3", script, server.url, AK, SK, tmp], check=False)
    print(r.stdout)
    if r.returncode != 0:
        raise AssertionError("boto3 client failed:\n" + r.stderr[-4000:])
    return None


def test_s3cmd(server, tmp):
    if not shutil.which("s3cmd"):
        return "s3cmd is not installed"
    host = server.url.split("//")[1]
    base = ["s3cmd", "-c", "/dev/null", "--access_key=" + AK, "--secret_key=" + SK, "--host=" + host,
            "--host-bucket=" + host, "--no-ssl", "--region=us-east-1"]
    run(base + ["mb", "s3://s3cmd-bucket"])
    big = make_file(os.path.join(tmp, "s3cmd-big"), 20 * 1024 * 1024 + 11, 3)  # multipart: 15 MiB parts
    run(base + ["put", big, "s3://s3cmd-bucket/big"])
    out = run(base + ["ls", "s3://s3cmd-bucket"]).stdout
    expect("s3://s3cmd-bucket/big" in out, "s3cmd ls")
    run(base + ["get", "--force", "s3://s3cmd-bucket/big", os.path.join(tmp, "s3cmd-big.out")])
    expect(same(big, os.path.join(tmp, "s3cmd-big.out")), "s3cmd multipart put/get byte-exact")
    run(base + ["del", "s3://s3cmd-bucket/big"])
    run(base + ["rb", "s3://s3cmd-bucket"])
    return None


def test_rclone(server, tmp):
    if not shutil.which("rclone"):
        return "rclone is not installed"
    remote = ":s3,provider=Other,endpoint='%s',access_key_id=%s,secret_access_key=%s,region=us-east-1:" % (server.url, AK, SK)
    base = ["rclone", "--config", "/dev/null"]
    env = {"AWS_CA_BUNDLE": ""}
    os.environ.pop("AWS_CA_BUNDLE", None)
    src = os.path.join(tmp, "rclone-src")
    os.makedirs(src)
    make_file(os.path.join(src, "a.bin"), 7 * 1024 * 1024 + 1, 4)  # rclone multipart: 5 MiB chunks
    make_file(os.path.join(src, "b.bin"), 100, 5)
    run(base + ["copy", src, remote + "rclone-bucket/data"], env=env)
    out = run(base + ["lsl", remote + "rclone-bucket"], env=env).stdout
    expect("data/a.bin" in out and "data/b.bin" in out, "rclone lsl")
    dst = os.path.join(tmp, "rclone-dst")
    run(base + ["copy", remote + "rclone-bucket/data", dst], env=env)
    expect(same(os.path.join(src, "a.bin"), os.path.join(dst, "a.bin")), "rclone multipart copy round-trip byte-exact")
    run(base + ["check", src, remote + "rclone-bucket/data"], env=env)
    print("  ok: rclone check (sizes and hashes)")
    run(base + ["purge", remote + "rclone-bucket"], env=env)
    return None


def test_crash(server, tmp):
    """SIGKILL the server in the middle of a PUT that replaces an object: after a restart the old
    object is intact and nothing partial is visible."""
    run(curl_args(server, ["-X", "PUT", server.url + "/crash"]))
    old = make_file(os.path.join(tmp, "old"), 3 * 1024 * 1024, 8)
    run(curl_args(server, ["-T", old, server.url + "/crash/k"]))
    # A slow PUT of a larger replacement: curl sends at 2 MiB/s; kill the server after a second.
    new = make_file(os.path.join(tmp, "new"), 64 * 1024 * 1024, 9)
    slow = subprocess.Popen(curl_args(server, ["--limit-rate", "2M", "-T", new, server.url + "/crash/k"]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    server.stop(signal.SIGKILL)
    slow.wait(timeout=30)
    server.start()
    out = os.path.join(tmp, "after")
    expect(curl_status(server, ["-o", out, server.url + "/crash/k"]) == "200", "after SIGKILL: the object is readable")
    expect(same(old, out), "after SIGKILL: the old object is intact byte-for-byte")
    listing = run(curl_args(server, [server.url + "/crash?list-type=2"])).stdout
    expect(listing.count("<Key>") == 1, "after SIGKILL: no partial object is listed")
    return None


def test_users(server, tmp):
    """Two users from a config file: each sees and touches only its own buckets."""
    other = ["curl", "-sS", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "OTHERAK:other-secret",
             "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
    run(curl_args(server, ["-X", "PUT", server.url + "/first-users-bucket"]))
    run(other + ["-X", "PUT", server.url + "/second-users-bucket"])
    mine = run(curl_args(server, [server.url + "/"])).stdout
    theirs = run(other + [server.url + "/"]).stdout
    expect("first-users-bucket" in mine and "second-users-bucket" not in mine, "user 1 lists only its bucket")
    expect("second-users-bucket" in theirs and "first-users-bucket" not in theirs, "user 2 lists only its bucket")
    r = run(other + ["-o", "/dev/null", "-w", "%{http_code}", server.url + "/first-users-bucket?list-type=2"], check=False)
    expect(r.stdout.strip() == "403", "user 2 cannot list user 1's bucket: 403 AccessDenied")
    r = run(other + ["-o", "/dev/null", "-w", "%{http_code}", "-X", "PUT", server.url + "/first-users-bucket"], check=False)
    expect(r.stdout.strip() == "409", "user 2 cannot take user 1's bucket name: 409")
    return None


def test_js_sdk(server, tmp):
    """@aws-sdk/client-s3 v3 from npm (installed on first use into the build tree's npm cache)."""
    if not shutil.which("node") or not shutil.which("npm"):
        return "node/npm are not installed"
    cache = os.environ.get("SLUICE_NPM_CACHE", os.path.join(tempfile.gettempdir(), "sluice-npm"))
    if not os.path.isdir(os.path.join(cache, "node_modules", "@aws-sdk", "client-s3")):
        os.makedirs(cache, exist_ok=True)
        r = run(["npm", "install", "--prefix", cache, "--no-save", "--no-audit", "--no-fund", "@aws-sdk/client-s3@3"],
                check=False)
        if r.returncode != 0:
            return "npm could not install @aws-sdk/client-s3: " + r.stderr[-500:]
    script = os.path.join(cache, "js_sdk.mjs")
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "js_sdk.mjs"), script)
    r = run(["node", script, server.url, AK, SK], check=False)
    print(r.stdout)
    if r.returncode != 0:
        raise AssertionError("js sdk failed:\n" + r.stderr[-4000:])
    return None


def test_limits(server, tmp):
    """A silent or slow client cannot pin a connection; oversize headers and too many connections
    are refused. The server runs with read/idle timeouts of 2 s and at most 4 connections."""
    import socket
    host, port = "127.0.0.1", server.port
    slow = socket.create_connection((host, port))
    slow.sendall(b"GET /x HTTP/1.1\r\nHost: h\r\n")  # never finishes its header
    start = time.time()
    slow.settimeout(10)
    closed = slow.recv(4096)
    expect(time.time() - start < 6, "a client that stalls mid-header is dropped after the read timeout (%.1f s)" % (time.time() - start))
    idle = socket.create_connection((host, port))
    idle.settimeout(10)
    start = time.time()
    expect(idle.recv(4096) == b"" and time.time() - start < 6, "an idle connection is closed after the idle timeout")
    big = socket.create_connection((host, port))
    big.sendall(b"GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
    big.settimeout(10)
    reply = big.recv(4096)
    expect(reply.startswith(b"HTTP/1.1 400") and b"RequestHeaderSectionTooLarge" in reply, "a 20 KB header is refused with 400")
    held = [socket.create_connection((host, port)) for _ in range(4)]
    time.sleep(0.3)
    extra = socket.create_connection((host, port))
    extra.settimeout(5)
    try:
        refused = extra.recv(4096) == b""
    except ConnectionResetError:
        refused = True
    expect(refused, "a fifth connection beyond max_connections=4 is closed at once")
    for s_ in held:
        s_.close()
    time.sleep(0.3)
    expect(curl_status(server, [server.url + "/"]) == "200", "the server keeps serving after all that")
    return None


def main():
    binary, client = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="sluice-interop-")
    extra = []
    if client == "users":
        config = os.path.join(tmp, "server.json")
        with open(config, "w") as f:
            f.write('{"server": {"users": [{"access_key_id": "OTHERAK", "secret_access_key": "other-secret"}]}}')
        extra = ["--config", config]
    if client == "limits":
        config = os.path.join(tmp, "server.json")
        with open(config, "w") as f:
            f.write('{"read_timeout_s": 2, "idle_timeout_s": 2, "max_connections": 4}')
        extra = ["--config", config]
    server = Server(binary, os.path.join(tmp, "root"), extra).start()
    try:
        tests = {
            "curl": lambda: test_curl(server, tmp),
            "negative": lambda: test_negative(server, tmp) or test_presign(server, tmp),
            "awscli-v1": lambda: test_awscli(server, tmp, shutil.which("aws", path=os.path.expanduser("~/.pyenv/shims") + ":/usr/local/bin")),
            "awscli-v2": lambda: test_awscli(server, tmp, "/usr/bin/aws" if os.path.exists("/usr/bin/aws") else None),
            "boto3": lambda: test_boto3(server, tmp),
            "s3cmd": lambda: test_s3cmd(server, tmp),
            "rclone": lambda: test_rclone(server, tmp),
            "crash": lambda: test_crash(server, tmp),
            "users": lambda: test_users(server, tmp),
            "limits": lambda: test_limits(server, tmp),
            "js-sdk": lambda: test_js_sdk(server, tmp),
        }
        print("%s against sluice serve on %s" % (client, server.url))
        skipped = tests[client]()
        if skipped:
            print("SKIPPED: " + skipped)
            return SKIP
        print("PASSED: " + client)
        return 0
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
