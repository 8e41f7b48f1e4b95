#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What the `sluice` CLI loads (issue 40, "start in milliseconds"): `sluice --help`, `sluice ls` against
a real `sluice serve` on loopback and an HTTP `get` of a 4 KiB object load neither libfabric (nor the
PSM libraries it pulls in) nor a CUDA library, as the dynamic linker's own trace (LD_DEBUG=libs) of
each command says; a `get --via rdma --fabric tcp` then loads libfabric when it opens its plane
(dlopen) and moves the same bytes; with libfabric hidden, `--via rdma` names it and `--via auto`
goes by HTTP.  startup_test.py SLUICE_BINARY
Exit 0: passed; anything else: failed."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server, expect  # noqa: E402

AK, SK = "SLUICESTARTAK", "sluice-startup-secret"
# What must not load: libfabric and what it pulls in (PSM: ~200 ms of constructors), CUDA's runtime
# and driver.
HEAVY = re.compile(r"lib(fabric|psm|psm2|psm_infinipath|cudart|cuda)\.so[.\d]*")


def traced(binary, *args):
    """Runs the CLI with LD_DEBUG=libs: (result, the libraries the dynamic linker looked for or loaded)."""
    env = dict(os.environ, LD_DEBUG="libs", AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK)
    r = subprocess.run([binary] + list(args), capture_output=True, text=True, env=env, timeout=60)
    asked = set(re.findall(r"find library=(\S+)", r.stderr)) | set(re.findall(r"calling init: (\S+)", r.stderr))
    return r, sorted({os.path.basename(a) for a in asked})


def said(r):
    """What the command printed, without the dynamic linker's trace."""
    lines = (r.stdout + r.stderr).splitlines()
    return "\n".join(line for line in lines if line.strip() and not re.match(r"\s*\d+:", line))[-400:]


def light(binary, what, *args):
    r, loaded = traced(binary, *args)
    expect(r.returncode == 0, "sluice %s: exit 0 (%s)" % (what, said(r)))
    heavy = [name for name in loaded if HEAVY.fullmatch(name)]
    expect(loaded and not heavy, "sluice %s loads neither libfabric nor CUDA (%s)" % (what, heavy or ", ".join(loaded)))
    return r


def without_libfabric(binary, src, tmp, endpoint):
    """A host without libfabric (an empty file bound over it in a mount namespace of this test's
    own; skipped without the privilege): --via rdma says what is missing, --via auto goes by HTTP."""
    found = subprocess.run(["sh", "-c", "ldconfig -p | grep -o '/.*libfabric\\.so\\.1$' | head -1"],
                           capture_output=True, text=True).stdout.strip()
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True) if found else None
    if not found or probe.returncode != 0:
        print("  note: not checked without libfabric (%s)" % ("no libfabric.so.1 in ldconfig's cache" if not found
                                                               else "unshare -m: " + probe.stderr.strip()))
        return
    out = os.path.join(tmp, "out-none")
    hide = "mount --bind /dev/null %s && exec \"$@\"" % found
    env = dict(os.environ, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK)
    r = subprocess.run(["unshare", "-m", "sh", "-c", hide, "sh", binary, "get", "s3://startup/four-kib", out,
                        "--via", "rdma", "--fabric", "tcp"] + endpoint, capture_output=True, text=True, env=env,
                       timeout=60)
    expect(r.returncode == 1 and "--via rdma needs libfabric.so.1: " in r.stderr,
           "without libfabric, get --via rdma says so (%s)" % r.stderr.strip()[-200:])
    r = subprocess.run(["unshare", "-m", "sh", "-c", hide, "sh", binary, "get", "s3://startup/four-kib", out,
                        "--fabric", "tcp", "--json"] + endpoint, capture_output=True, text=True, env=env, timeout=60)
    expect(r.returncode == 0 and '"http_bytes":4096' in r.stdout and open(out, "rb").read() == open(src, "rb").read(),
           "without libfabric, get --via auto --fabric tcp goes by HTTP (%s)" % (r.stdout + r.stderr).strip()[-200:])


def main():
    binary = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="sluice-startup-") as tmp:
        light(binary, "--help", "--help")
        server = Server(binary, os.path.join(tmp, "root"), AK, SK, extra=["--fabric", "tcp"]).start()
        try:
            endpoint = ["--endpoint", server.url]
            src = os.path.join(tmp, "four-kib")
            with open(src, "wb") as f:
                f.write(os.urandom(4096))
            light(binary, "mb", "mb", "s3://startup", *endpoint)
            light(binary, "put --via http", "put", src, "s3://startup/four-kib", "--via", "http", *endpoint)
            r = light(binary, "ls", "ls", "s3://startup", *endpoint)
            expect("four-kib" in r.stdout, "sluice ls lists the object")
            out = os.path.join(tmp, "out-http")
            light(binary, "get --via http", "get", "s3://startup/four-kib", out, "--via", "http", *endpoint)
            expect(open(out, "rb").read() == open(src, "rb").read(), "get --via http: the same 4 KiB")
            # --via auto opens only hardware providers (--fabric auto), which need an RDMA device.
            if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
                print("  note: this host has an RDMA device: get --via auto may open libfabric; not checked")
            else:
                out = os.path.join(tmp, "out-auto")
                light(binary, "get (--via auto, no RDMA device)", "get", "s3://startup/four-kib", out, *endpoint)
                expect(open(out, "rb").read() == open(src, "rb").read(), "get --via auto: the same 4 KiB")

            # The lazy load: the first plane loads libfabric, and the bytes come by RDMA.
            out = os.path.join(tmp, "out-rdma")
            r, loaded = traced(binary, "get", "s3://startup/four-kib", out, "--via", "rdma", "--fabric", "tcp",
                               "--json", *endpoint)
            expect(r.returncode == 0, "get --via rdma --fabric tcp: exit 0 (%s)" % said(r))
            expect('"rdma_bytes":4096' in r.stdout, "get --via rdma: the 4 KiB came by RDMA")
            expect("libfabric.so.1" in loaded, "get --via rdma loads libfabric.so.1 (%s)" % ", ".join(loaded))
            expect(open(out, "rb").read() == open(src, "rb").read(), "get --via rdma: the same 4 KiB")
            without_libfabric(binary, src, tmp, endpoint)
        finally:
            server.stop()
    print("passed")


if __name__ == "__main__":
    main()
