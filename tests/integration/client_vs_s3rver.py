#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Our client (through the `sluice` CLI) against a server we did not write: npm s3rver 3.7.
Usage: client_vs_s3rver.py SLUICE_BINARY
       client_vs_s3rver.py --install    (only installs s3rver: CTest's fixture for its users)
s3rver is installed on first use into $SLUICE_S3RVER_CACHE (default: <tmp>/sluice-npm-s3rver).
Exit 0: passed; 77: s3rver (node, npm) cannot be had here, with the reason printed (CTest reports
skipped); anything else: failed."""
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MIB, ensure_s3rver, expect, make_file, md5, start_s3rver  # noqa: E402,F401

SKIP = 77
AK = SK = "S3RVER"  # s3rver's built-in account


def main():
    binary = sys.argv[1]
    script, why = ensure_s3rver()
    if script is None:
        print("SKIPPED: " + why)
        return SKIP
    if binary == "--install":
        print("s3rver: " + script)
        return 0
    tmp = tempfile.mkdtemp(prefix="sluice-s3rver-")
    try:
        proc, url = start_s3rver(script, os.path.join(tmp, "data"), os.path.join(tmp, "s3rver.log"))
    except RuntimeError as e:
        raise AssertionError(str(e))
    env = dict(os.environ)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION"):
        env.pop(name, None)

    def cli(*args):
        cmd = [binary] + list(args) + ["--endpoint", url, "--access-key", AK, "--secret-key", SK]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)

    def ok(*args):
        r = cli(*args)
        if r.returncode != 0:
            raise AssertionError("sluice %s failed (%d):\nstdout: %s\nstderr: %s\ns3rver log: %s" %
                                 (" ".join(args), r.returncode, r.stdout[-2000:], r.stderr[-2000:],
                                  open(os.path.join(tmp, "s3rver.log")).read()[-3000:]))
        return r

    try:
        print("sluice CLI against s3rver 3.7 on %s" % url)
        ok("mb", "s3://interop")
        expect(True, "mb")
        files = {"empty": 0, "small": 1000, "medium": 3 * MIB + 7, "multipart": 21 * MIB + 3}
        for name, size in files.items():
            src = make_file(os.path.join(tmp, name), size, size + 1)
            ok("put", src, "s3://interop/data/" + name)
            expect(True, "put %s (%d bytes%s)" % (name, size, ", multipart" if size > 16 * MIB else ""))
        r = ok("ls", "s3://interop/data/")
        expect(all("data/" + n in r.stdout for n in files), "ls lists the objects")
        r = ok("ls", "s3://interop")
        expect("PRE data/" in r.stdout, "ls folds keys into a common prefix")
        r = ok("ls", "--recursive", "s3://interop")
        expect(r.stdout.count("\n") == len(files), "ls --recursive lists every key")
        for name in files:
            out = os.path.join(tmp, "out-" + name)
            ok("get", "s3://interop/data/" + name, out)
            expect(md5(out) == md5(os.path.join(tmp, name)), "get %s byte-exact" % name)
        r = cli("get", "s3://interop/data/missing", os.path.join(tmp, "missing"))
        expect(r.returncode == 1 and "NoSuchKey" in r.stderr and not os.path.exists(os.path.join(tmp, "missing")),
               "get of a missing key: exit 1, NoSuchKey, no file")
        for name in files:
            ok("rm", "s3://interop/data/" + name)
        r = ok("ls", "--recursive", "s3://interop")
        expect(r.stdout.strip() == "", "rm removed every object")
        ok("rb", "s3://interop")
        expect(True, "rb")
        print("PASSED: client vs s3rver")
        return 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
