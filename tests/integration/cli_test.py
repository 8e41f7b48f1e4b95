#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The client commands of the `sluice` CLI (mb, rb, put, get, ls, rm, presign) against a real `sluice serve`
on an ephemeral loopback port, and its command line: --help of every command, usage errors (exit 2,
the unknown option named, "did you mean --X?" for a close one), --json of put, get and ls parsed and
checked against the objects on the server.  cli_test.py SLUICE_BINARY
Exit 0: passed; anything else: failed."""
import datetime
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server as _Server  # noqa: E402

AK, SK = "SLUICECLIAK", "sluice-cli-secret"
from common import MIB, expect, free_port, make_file, md5  # noqa: F401


class Server(_Server):
    def __init__(self, binary, root):
        super().__init__(binary, root, AK, SK)




# Each command's options, as its --help must list them.
OPTIONS = {
    "serve": ["--root", "--config", "--listen", "--region", "--anonymous", "--no-sigv2", "--access-key", "--secret-key",
              "--fabric", "--grant-socket", "--grant-copy-threads", "--tls-cert", "--tls-key", "--tls-listen",
              "--access-log", "--access-log-format", "--admin-listen"],
    "mb": [], "rb": [], "rm": [],
    "put": ["--content-type", "--via", "--fabric", "--json"],
    "get": ["--via", "--fabric", "--json"],
    "ls": ["--recursive", "--json"],
    "presign": ["--expires"],
}
CONNECTION = ["--endpoint", "--ca-bundle", "--access-key", "--secret-key", "--region", "--no-progress"]


def command_line(binary, env):
    """--help of the tool and of every command; usage errors name what is wrong, exit 2."""
    def run(*args):
        return subprocess.run([binary] + list(args), capture_output=True, text=True, env=env, timeout=60)

    for args in (["--help"], ["-h"], ["help"]):
        r = run(*args)
        expect(r.returncode == 0 and "usage: sluice" in r.stdout and r.stderr == "", "sluice %s: exit 0" % args[0])
        expect(all(re.search(r"^\s+%s\s" % c, r.stdout, re.M) for c in OPTIONS), "sluice %s lists every command" % args[0])
    for command, options in OPTIONS.items():
        for args in ([command, "--help"], ["help", command]):
            r = run(*args)
            expect(r.returncode == 0 and "usage: sluice %s" % command in r.stdout,
                   "sluice %s: exit 0 and the usage line" % " ".join(args))
        listed = re.findall(r"^\s+(--[a-z0-9-]+)", r.stdout, re.M)
        wanted = options + (CONNECTION if command != "serve" else [])
        expect(all(o in listed for o in wanted), "sluice %s --help lists %s" % (command, " ".join(wanted) or "its URL"))
        expect("--help" in r.stdout, "sluice %s --help lists --help" % command)

    # Unknown options: exit 2, named, with the closest option of that command when there is one.
    for args, named, guess in ((["ls", "--recursiv", "s3://cli"], "--recursiv", "--recursive"),
                               (["get", "s3://cli/k", "--jsn"], "--jsn", "--json"),
                               (["put", "f", "s3://cli/k", "--content-typ=x"], "--content-typ", "--content-type"),
                               (["ls", "--endpoint-url", "http://127.0.0.1:1"], "--endpoint-url", "--endpoint"),
                               (["serve", "--root", "/nonexistent", "--admin-listn", "127.0.0.1:0"], "--admin-listn",
                                "--admin-listen"),
                               (["mb", "s3://cli", "--acess-key", "x"], "--acess-key", "--access-key")):
        r = run(*args)
        expect(r.returncode == 2 and ("unknown option %s" % named) in r.stderr
               and ("did you mean %s?" % guess) in r.stderr and "usage: sluice %s" % args[0] in r.stderr,
               "sluice %s: exit 2, %s named, did you mean %s?" % (" ".join(args), named, guess))
        expect(r.stdout == "", "nothing on stdout for %s" % named)
    r = run("ls", "--bogus", "s3://cli")
    expect(r.returncode == 2 and "unknown option --bogus" in r.stderr and "did you mean" not in r.stderr,
           "an option close to none: named, no suggestion")
    r = run("ls", "--via", "http")
    expect(r.returncode == 2 and "unknown option --via" in r.stderr and "get" in r.stderr and "put" in r.stderr,
           "an option of other commands: says which")
    r = run("srve", "--root", "x")
    expect(r.returncode == 2 and "unknown command 'srve'" in r.stderr and "did you mean 'serve'?" in r.stderr,
           "a misspelt command: did you mean 'serve'?")
    r = run()
    expect(r.returncode == 2 and "usage: sluice" in r.stderr, "no command: exit 2 and the usage line")
    # A directory of the user's own files as --root: refused, naming a file and the way to serve them.
    with tempfile.TemporaryDirectory(prefix="sluice-cli-foreign-") as mine:
        os.mkdir(os.path.join(mine, "photos"))
        r = run("serve", "--root", mine, "--listen", "127.0.0.1:0", "--access-key", "a", "--secret-key", "b",
                "--grant-socket", "off", "--fabric", "off")
        expect(r.returncode == 1 and "'photos'" in r.stderr and "sluice cp -r DIR s3://BUCKET/" in r.stderr and
               sorted(os.listdir(mine)) == ["photos"],
               "serve --root on a directory of other files: refused, nothing written there: %s" % r.stderr.strip()[-200:])
    for args, what in ((["serve"], "--root is required"), (["serve", "--root", "x", "--tls-cert", "c"], "--tls-key"),
                       (["serve", "--root", "x", "--listen", "nowhere"], "HOST:PORT"),
                       (["serve", "--root", "x", "--access-log-format", "xml"], "text, json"),
                       (["serve", "--root", "x", "--grant-copy-threads", "65"], "0 to 64"),
                       (["get", "s3://cli/k", "--via", "carrier-pigeon"], "auto, rdma, http"),
                       (["get", "s3://cli/dir/"], "s3://BUCKET/KEY"), (["stat", "s3://cli"], "s3://BUCKET/KEY")):
        r = run(*args)
        expect(r.returncode == 2 and what in r.stderr and "usage: sluice %s" % args[0] in r.stderr,
               "sluice %s: exit 2 (%s)" % (" ".join(args), what))


def json_output(cli, ok, tmp):
    """--json of put, get and ls: one object per line, checked against the objects on the server."""
    ok("mb", "s3://cli-json")
    odd = 'json/\u00fcn\u00efc\u00f8d\u00e9 "quoted" \\ key'
    files = {"json/small": 1000, "json/deeper/three-mib": 3 * MIB, odd: 7}
    sources = {}
    for key, size in files.items():
        sources[key] = make_file(os.path.join(tmp, "json-%d" % size), size, size + 11)
        for via in ("auto", "http"):
            r = ok("put", sources[key], "s3://cli-json/" + key, "--json", "--via", via)
            lines = r.stdout.splitlines()
            expect(len(lines) == 1, "put --json (%s, --via %s): one line" % (key, via))
            put = json.loads(lines[0])
            expect(put["op"] == "put" and put["bucket"] == "cli-json" and put["key"] == key and
                   put["file"] == sources[key] and put["bytes"] == size and put["etag"] == md5(sources[key]),
                   "put --json: bucket, key, file, bytes %d and the MD5 ETag" % size)
            expect(put["rdma_bytes"] + put["http_bytes"] == size and put["declined"] == 0 and put["seconds"] >= 0,
                   "put --json: the bytes by path add up (rdma %d, http %d)" % (put["rdma_bytes"], put["http_bytes"]))
            # --via auto with the default --fabric opens hardware providers only (libfabric's
            # software tcp is opt-in): on a host without an RDMA NIC the bytes go over HTTP too.
            if via == "http" or not put["rdma_provider"]:
                expect(put["http_bytes"] == size and put["rdma_bytes"] == 0 and put["rdma_provider"] is None
                       and put["http_requests"] >= 1, "put --json --via %s: all over HTTP, no provider" % via)
            else:
                expect(put["rdma_provider"] in ("verbs;ofi_rxm", "efa"),
                       "put --json --via auto: a hardware provider or none, not %s" % put["rdma_provider"])
    for key, size in files.items():
        out = os.path.join(tmp, "json-out-%d" % size)
        r = ok("get", "s3://cli-json/" + key, out, "--json", "--via", "http")
        got = json.loads(r.stdout)
        expect(got["op"] == "get" and got["bucket"] == "cli-json" and got["key"] == key and got["file"] == out and
               got["bytes"] == size and got["etag"] == md5(sources[key]) and md5(out) == md5(sources[key]),
               "get --json of %r: bucket, key, file, bytes, ETag; the file is byte-exact" % key)
        expect(got["http_bytes"] == size and got["rdma_bytes"] == 0 and got["http_requests"] >= (1 if size else 0),
               "get --json --via http: %d bytes over HTTP" % size)
    r = ok("ls", "s3://cli-json/json/", "--recursive", "--json")
    listed = [json.loads(line) for line in r.stdout.splitlines()]
    expect(sorted(o["key"] for o in listed) == sorted(files), "ls --recursive --json: one object per key")
    now = datetime.datetime.now(datetime.timezone.utc)
    for o in listed:
        expect(o["size"] == files[o["key"]] and o["etag"] == md5(sources[o["key"]]),
               "ls --json: %r with its size and ETag" % o["key"])
        when = datetime.datetime.fromisoformat(o["last_modified"].replace("Z", "+00:00"))
        expect(abs((now - when).total_seconds()) < 600, "ls --json: last_modified %s is ISO 8601, of now" % o["last_modified"])
    r = ok("ls", "s3://cli-json/json/", "--json")
    listed = [json.loads(line) for line in r.stdout.splitlines()]
    expect({"prefix": "json/deeper/"} in listed and sorted(o["key"] for o in listed if "key" in o) ==
           sorted(k for k in files if "/deeper/" not in k), "ls --json with the delimiter: keys and a prefix object")
    r = ok("ls", "--json")
    buckets = [json.loads(line) for line in r.stdout.splitlines()]
    expect(any(b["bucket"] == "cli-json" and "created" in b for b in buckets), "ls --json of the buckets")
    for key in files:
        ok("rm", "s3://cli-json/" + key)
    ok("rb", "s3://cli-json")


def main():
    binary = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="sluice-cli-")
    server = Server(binary, os.path.join(tmp, "root")).start()
    env = dict(os.environ)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION"):
        env.pop(name, None)

    def cli(*args, endpoint=None, secret=SK, extra_env=None):
        cmd = [binary] + list(args) + ["--endpoint", endpoint or server.url, "--access-key", AK, "--secret-key", secret]
        e = dict(env)
        e.update(extra_env or {})
        r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=300)
        return r

    def ok(*args, **kw):
        r = cli(*args, **kw)
        if r.returncode != 0:
            raise AssertionError("sluice %s failed (%d):\nstdout: %s\nstderr: %s" %
                                 (" ".join(args), r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
        return r

    try:
        print("sluice CLI against sluice serve on %s" % server.url)
        r = ok("mb", "s3://cli")
        expect("make_bucket: s3://cli" in r.stdout, "mb creates a bucket")
        r = cli("mb", "s3://cli")
        # S3 in us-east-1 (this server's default region) answers 200 to creating a bucket you own.
        expect(r.returncode == 0, "mb of a bucket you own again: succeeds, as S3 does in us-east-1")

        sizes = {"empty": 0, "one-kib": 1024, "thirty-mib": 30 * MIB}
        for name, size in sizes.items():
            src = make_file(os.path.join(tmp, name), size, size)
            r = ok("put", src, "s3://cli/dir/" + name)
            expect("upload:" in r.stdout, "put %s (%d bytes)" % (name, size))
            out = os.path.join(tmp, "out-" + name)
            r = ok("get", "s3://cli/dir/" + name, out)
            expect(os.path.getsize(out) == size and md5(out) == md5(src), "get %s back byte-exact" % name)
            expect(not os.path.exists(out + ".partial"), "no %s.partial left" % os.path.basename(out))
        expect(not any(f.endswith(".partial") for f in os.listdir(tmp)), "no partial files at all")

        # presign: a GET URL anyone can fetch with no credentials, byte-exact; a key that needs
        # escaping; the expiry bounds; a URL signed with the wrong secret is refused.
        odd = "dir/a key+with %&?=~ signs"
        ok("put", os.path.join(tmp, "one-kib"), "s3://cli/" + odd)
        for key in ("dir/one-kib", odd):
            url = ok("presign", "s3://cli/" + key, "--expires", "60").stdout.strip()
            expect(url.startswith(server.url + "/cli/") and "X-Amz-Expires=60" in url, "presign prints a URL: " + url)
            with urllib.request.urlopen(url, timeout=30) as response:
                expect(response.read() == open(os.path.join(tmp, "one-kib"), "rb").read(),
                       "curl-less GET of the presigned URL of %r is byte-exact" % key)
        ok("rm", "s3://cli/" + odd)
        for bad in ("0", "604801", "-5", "soon"):
            r = cli("presign", "s3://cli/dir/one-kib", "--expires", bad)
            expect(r.returncode == 2 and "--expires" in r.stderr and r.stdout == "", "presign --expires %s: exit 2" % bad)
        url = cli("presign", "s3://cli/dir/one-kib", secret="not-the-secret").stdout.strip()
        try:
            urllib.request.urlopen(url, timeout=30)
            expect(False, "a URL presigned with the wrong secret is refused")
        except urllib.error.HTTPError as e:
            expect(e.code == 403 and b"SignatureDoesNotMatch" in e.read(), "wrong secret: 403 SignatureDoesNotMatch")

        # put into a "directory" key and get into a directory: the file's and the key's names are used.
        r = ok("put", os.path.join(tmp, "one-kib"), "s3://cli/auto/")
        expect("s3://cli/auto/one-kib" in r.stdout, "put to a key ending in / appends the file name")
        os.mkdir(os.path.join(tmp, "into"))
        ok("get", "s3://cli/auto/one-kib", os.path.join(tmp, "into"))
        expect(md5(os.path.join(tmp, "into", "one-kib")) == md5(os.path.join(tmp, "one-kib")),
               "get into a directory uses the key's name")

        r = ok("ls", "s3://cli/dir/")
        listed = r.stdout.split()
        expect(all("dir/" + n in listed for n in sizes), "ls s3://cli/dir/ lists the three objects")
        expect(str(30 * MIB) in r.stdout, "ls shows sizes")
        r = ok("ls", "s3://cli/dir/t")
        expect("dir/thirty-mib" in r.stdout and "dir/empty" not in r.stdout, "ls with a key prefix filters")
        r = ok("ls", "s3://cli")
        expect("PRE dir/" in r.stdout and "PRE auto/" in r.stdout and "dir/empty" not in r.stdout,
               "ls of the bucket folds keys into common prefixes")
        r = ok("ls", "--recursive", "s3://cli")
        expect(r.stdout.count("\n") == 4 and "auto/one-kib" in r.stdout, "ls --recursive lists every key")
        r = ok("ls")
        expect(" cli" in r.stdout, "ls without a URL lists the buckets")

        # Errors: the S3 code in the message, exit 1, and no file left behind.
        out = os.path.join(tmp, "missing-out")
        r = cli("get", "s3://cli/missing", out)
        expect(r.returncode == 1 and "NoSuchKey" in r.stderr, "get of a missing key: exit 1 and NoSuchKey")
        expect(not os.path.exists(out) and not os.path.exists(out + ".partial"), "get of a missing key leaves no file")
        r = cli("get", "s3://cli/dir/one-kib", os.path.join(tmp, "bad"), secret="wrong")
        expect(r.returncode == 1 and ("SignatureDoesNotMatch" in r.stderr or "AccessDenied" in r.stderr),
               "a wrong secret: exit 1 and the S3 code")
        r = cli("ls", "s3://cli", secret="wrong")
        expect(r.returncode == 1 and "SignatureDoesNotMatch" in r.stderr, "ls with a wrong secret: SignatureDoesNotMatch")
        r = cli("ls", "s3://nope")
        expect(r.returncode == 1 and "NoSuchBucket" in r.stderr, "ls of a missing bucket: NoSuchBucket")
        r = cli("rb", "s3://cli")
        expect(r.returncode == 1 and "BucketNotEmpty" in r.stderr, "rb of a bucket with objects: BucketNotEmpty")
        r = cli("put", os.path.join(tmp, "does-not-exist"), "s3://cli/x")
        expect(r.returncode == 1 and "No such file" in r.stderr, "put of a missing file: exit 1")
        r = cli("ls", "s3://cli", endpoint="http://127.0.0.1:%d" % free_port())
        expect(r.returncode == 1 and "refused" in r.stderr, "no server: exit 1, connection refused")

        # Usage errors: exit 2.
        for args in (["get"], ["frobnicate"], ["put", "only-one-arg"], ["mb", "not-a-url"], ["rm", "s3://cli"],
                     ["ls", "--bogus", "s3://cli"]):
            r = subprocess.run([binary] + args, capture_output=True, text=True, env=env)
            expect(r.returncode == 2 and "usage" in r.stderr, "usage error for %s: exit 2" % " ".join(args))
        r = cli("ls", "s3://cli", endpoint="ftp://127.0.0.1:1")
        expect(r.returncode == 2 and "endpoint" in r.stderr and '"ftp" is not supported' in r.stderr,
               "an ftp endpoint is refused: exit 2")
        r = cli("ls", "s3://cli", endpoint="https://127.0.0.1:%d" % free_port())
        expect(r.returncode == 1 and "refused" in r.stderr, "an https endpoint is taken (no server: connection refused)")
        r = cli("ls", "s3://cli", "--ca-bundle", os.path.join(tmp, "ca.pem"))
        expect(r.returncode == 2 and "ca_bundle" in r.stderr, "--ca-bundle with an http endpoint: exit 2")

        command_line(binary, env)
        json_output(cli, ok, tmp)

        # Credentials from the environment.
        r = subprocess.run([binary, "ls", "s3://cli", "--endpoint", server.url], capture_output=True, text=True,
                           env=dict(env, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK))
        expect(r.returncode == 0 and "PRE dir/" in r.stdout, "credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")

        for key in ["dir/" + n for n in sizes] + ["auto/one-kib"]:
            r = ok("rm", "s3://cli/" + key)
            expect("delete: s3://cli/" + key in r.stdout, "rm " + key)
        r = ok("ls", "--recursive", "s3://cli")
        expect(r.stdout.strip() == "", "the bucket is empty after rm")
        r = ok("rb", "s3://cli")
        expect("remove_bucket: s3://cli" in r.stdout, "rb removes the empty bucket")
        r = ok("ls")
        expect(" cli" not in r.stdout, "the bucket is gone")
        print("PASSED: cli")
        return 0
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
