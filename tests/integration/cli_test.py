#!/usr/bin/python3
"""The client commands of the `sluice` CLI (mb, rb, put, get, ls, rm) against a real `sluice serve`
on an ephemeral loopback port:  cli_test.py SLUICE_BINARY
Exit 0: passed; anything else: failed."""
import hashlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server as _Server  # noqa: E402

AK, SK = "SLUICECLIAK", "sluice-cli-secret"
from common import MIB, expect, free_port, make_file, md5  # noqa: F401


class Server(_Server):
    def __init__(self, binary, root):
        super().__init__(binary, root, AK, SK)




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
