#!/usr/bin/python3
"""`sluice serve --upstream` (gateway_store, issue 16) in front of a real upstream: a second `sluice
serve` with other users and another root, or npm s3rver. The clients are the sluice CLI (signed, as a
gateway user) and urllib (anonymous requests, for status codes).

  gateway_test.py SLUICE_BINARY SCENARIO [UPSTREAM]

UPSTREAM: sluice (default) or s3rver (skipped, exit 77, when node/npm cannot install it here).
Scenarios:
  write-through  PUT through the gateway, GET straight from the upstream (and the reverse); a PUT
                 the upstream refuses is not cached
  coherence      an object replaced on the upstream behind the gateway's back is served new; one
                 deleted there is 404 through the gateway; DELETE and LIST go to the upstream
  eviction       30 objects of 1 MiB through a 4 MiB cache: all readable, byte-exact, budget kept
  failure        upstream killed: 503 ServiceUnavailable; with --stale-if-error the cached copy is
                 still served
  ttl            --revalidate-after: a copy is served without asking within the TTL
  rdma           GET through the gateway --via rdma --fabric tcp: every byte by RDMA from the cache
Exit 0: passed; 77: skipped (reason printed); anything else: failed."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MIB, Server, ensure_s3rver, expect, free_port, make_file, md5  # noqa: E402

SKIP = 77
GW_AK, GW_SK = "SLUICEGATEWAYAK", "sluice-gateway-secret"  # the gateway's users
UP_AK, UP_SK = "SLUICEUPSTREAMAK", "sluice-upstream-secret"  # the upstream's (sluice)
S3RVER_AK = S3RVER_SK = "S3RVER"
REPORT = re.compile(r"rdma (\d+) bytes in (\d+) requests, http (\d+) bytes in (\d+) requests")


class Skip(Exception):
    pass


def clean_env():
    env = dict(os.environ)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION"):
        env.pop(name, None)
    return env


class SluiceUpstream:
    def __init__(self, binary, tmp):
        self.server = Server(binary, os.path.join(tmp, "upstream"), UP_AK, UP_SK, ["--grant-socket", "off",
                                                                                 "--fabric", "off"])
        self.ak, self.sk = UP_AK, UP_SK

    def start(self):
        self.server.start()
        self.url = self.server.url
        return self

    def kill(self):
        self.server.stop(signal.SIGKILL)

    def stop(self):
        self.server.stop()


class S3rverUpstream:
    def __init__(self, binary, tmp):
        self.tmp = tmp
        self.ak, self.sk = S3RVER_AK, S3RVER_SK
        self.proc = None

    def start(self):
        script, why = ensure_s3rver()
        if script is None:
            raise Skip(why)
        port = free_port()
        self.log = open(os.path.join(self.tmp, "s3rver.log"), "w")
        # s3rver 3.7 makes continuation tokens with a cipher OpenSSL 3 only has in its legacy
        # provider: without it, every truncated listing is a 500.
        env = dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider")
        self.proc = subprocess.Popen(["node", script, "-d", os.path.join(self.tmp, "s3rver"), "-a", "127.0.0.1",
                                      "-p", str(port)], stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.url = "http://127.0.0.1:%d" % port
        for _ in range(100):
            try:
                urllib.request.urlopen(self.url + "/", timeout=1)
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                time.sleep(0.1)
        return self

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        self.kill()


class Harness:
    def __init__(self, binary, upstream_kind):
        self.binary = binary
        self.tmp = tempfile.mkdtemp(prefix="sluice-gateway-")
        self.upstream = (SluiceUpstream if upstream_kind == "sluice" else S3rverUpstream)(binary, self.tmp)
        self.gateways = []
        self.env = clean_env()

    def gateway(self, name, *extra, fabric="off"):
        gw = Server(self.binary, os.path.join(self.tmp, name), GW_AK, GW_SK,
                    ["--upstream", self.upstream.url, "--upstream-access-key", self.upstream.ak,
                     "--upstream-secret-key", self.upstream.sk, "--anonymous", "--grant-socket", "off",
                     "--fabric", fabric] + list(extra))
        gw.start()
        self.gateways.append(gw)
        return gw

    def cli(self, endpoint, ak, sk, *args):
        cmd = [self.binary] + list(args) + ["--endpoint", endpoint, "--access-key", ak, "--secret-key", sk,
                                            "--no-progress"]
        return subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=300)

    def ok(self, endpoint, ak, sk, *args):
        r = self.cli(endpoint, ak, sk, *args)
        if r.returncode != 0:
            raise AssertionError("sluice %s failed (%d): %s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
        return r

    def via_gateway(self, gw, *args):
        return self.ok(gw.url, GW_AK, GW_SK, *args)

    def direct(self, *args):
        return self.ok(self.upstream.url, self.upstream.ak, self.upstream.sk, *args)

    def file(self, name, size, seed):
        return make_file(os.path.join(self.tmp, name), size, seed)

    def out(self, name):
        return os.path.join(self.tmp, name)

    def close(self):
        for gw in self.gateways:
            try:
                gw.stop()
                for line in gw.proc.stdout.read().splitlines()[-10:]:  # what it said, for failures
                    print("  %s: %s" % (os.path.basename(gw.root), line))
            except Exception as e:  # noqa: BLE001
                print("  gateway stop:", e)
        self.upstream.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def status(url):
    """(HTTP status, body) of an anonymous GET."""
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def write_through(h):
    gw = h.gateway("gw")
    h.via_gateway(gw, "mb", "s3://gw-wt")
    for size, seed in ((0, 1), (1, 2), (4 * MIB + 3, 3), (20 * MIB + 1, 4)):  # 20 MiB: multipart to the upstream
        src = h.file("src-%d" % size, size, seed)
        h.via_gateway(gw, "put", src, "s3://gw-wt/obj-%d" % size)
        back = h.out("direct-%d" % size)
        h.direct("get", "s3://gw-wt/obj-%d" % size, back)
        expect(md5(back) == md5(src), "PUT of %d bytes through the gateway: the upstream holds them" % size)
        again = h.out("gw-%d" % size)
        h.via_gateway(gw, "get", "s3://gw-wt/obj-%d" % size, again)
        expect(md5(again) == md5(src), "GET of %d bytes through the gateway after its PUT" % size)
    src = h.file("up", 3 * MIB, 9)
    h.direct("put", src, "s3://gw-wt/from-upstream")
    got = h.out("from-upstream")
    h.via_gateway(gw, "get", "s3://gw-wt/from-upstream", got)
    expect(md5(got) == md5(src), "an object PUT on the upstream is read through the gateway")
    r = h.cli(gw.url, GW_AK, GW_SK, "put", src, "s3://no-such-bucket-here/k")
    expect(r.returncode != 0, "PUT into a bucket the upstream lacks fails")
    cached = os.path.join(gw.root, "cache", "buckets", "no-such-bucket-here")
    expect(not os.path.exists(cached) or not any(os.scandir(os.path.join(cached, "objects"))),
           "and nothing of it is cached")


def coherence(h):
    gw = h.gateway("gw")
    h.direct("mb", "s3://gw-co")
    one, two = h.file("one", 2 * MIB, 11), h.file("two", 2 * MIB + 5, 12)
    h.direct("put", one, "s3://gw-co/k")
    got = h.out("got")
    h.via_gateway(gw, "get", "s3://gw-co/k", got)
    expect(md5(got) == md5(one), "first GET through the gateway: version one")
    h.direct("put", two, "s3://gw-co/k")  # behind the gateway's back
    h.via_gateway(gw, "get", "s3://gw-co/k", got)
    expect(md5(got) == md5(two), "replaced on the upstream: the gateway serves version two")
    code, body = status(gw.url + "/gw-co/k")
    expect(code == 200 and len(body) == 2 * MIB + 5, "anonymous GET through the gateway: 200, version two")
    h.direct("rm", "s3://gw-co/k")
    code, body = status(gw.url + "/gw-co/k")
    expect(code == 404 and b"NoSuchKey" in body, "deleted on the upstream: 404 NoSuchKey through the gateway")
    h.via_gateway(gw, "put", one, "s3://gw-co/a")
    h.via_gateway(gw, "put", one, "s3://gw-co/b")
    listing = h.via_gateway(gw, "ls", "s3://gw-co").stdout
    expect("a" in listing and "b" in listing and " k" not in listing, "LIST through the gateway is the upstream's")
    h.via_gateway(gw, "rm", "s3://gw-co/a")
    r = h.cli(h.upstream.url, h.upstream.ak, h.upstream.sk, "get", "s3://gw-co/a", h.out("gone"))
    expect(r.returncode != 0, "DELETE through the gateway removed it on the upstream")
    code, _ = status(gw.url + "/gw-co/a")
    expect(code == 404, "and the gateway answers 404 for it")


def eviction(h):
    gw = h.gateway("gw", "--cache-bytes", "4 MiB", "--admin-listen", "127.0.0.1:0")
    h.direct("mb", "s3://gw-ev")
    sources = []
    for i in range(30):
        src = h.file("ev-%d" % i, MIB, 100 + i)
        h.direct("put", src, "s3://gw-ev/o%02d" % i)
        sources.append(src)
    for rounds in range(2):
        for i, src in enumerate(sources):
            code, body = status(gw.url + "/gw-ev/o%02d" % i)
            if code != 200 or len(body) != MIB:
                raise AssertionError("o%02d: %d, %d bytes" % (i, code, len(body)))
            with open(src, "rb") as f:
                if f.read() != body:
                    raise AssertionError("o%02d: other bytes" % i)
    expect(True, "30 objects of 1 MiB read twice through a 4 MiB cache, byte-exact")
    objects = 0
    for root, _, files in os.walk(os.path.join(gw.root, "cache", "buckets")):
        if os.path.basename(os.path.dirname(root)) == "objects":
            objects += len(files)
    expect(objects <= 4, "the cache holds at most 4 of them (%d)" % objects)


def failure(h):
    plain = h.gateway("gw")
    stale = h.gateway("gw-stale", "--stale-if-error")
    h.direct("mb", "s3://gw-fa")
    src = h.file("fa", 3 * MIB, 21)
    h.direct("put", src, "s3://gw-fa/k")
    for gw in (plain, stale):
        code, body = status(gw.url + "/gw-fa/k")
        expect(code == 200 and len(body) == 3 * MIB, "read through %s while the upstream is up" % gw.root)
    h.upstream.kill()
    code, body = status(plain.url + "/gw-fa/k")
    expect(code == 503 and b"ServiceUnavailable" in body, "upstream killed: 503 ServiceUnavailable")
    code, body = status(plain.url + "/gw-fa/other")
    expect(code == 503, "an uncached key: 503 as well")
    code, body = status(stale.url + "/gw-fa/k")
    with open(src, "rb") as f:
        expect(code == 200 and body == f.read(), "--stale-if-error: the cached copy is still served")
    code, body = status(stale.url + "/gw-fa/other")
    expect(code == 503, "--stale-if-error, an uncached key: 503")
    r = h.cli(stale.url, GW_AK, GW_SK, "put", src, "s3://gw-fa/new")
    expect(r.returncode != 0, "a PUT while the upstream is down fails")


def ttl(h):
    gw = h.gateway("gw", "--revalidate-after", "3600")
    h.direct("mb", "s3://gw-tt")
    one, two = h.file("t1", MIB, 31), h.file("t2", MIB, 32)
    h.direct("put", one, "s3://gw-tt/k")
    code, body = status(gw.url + "/gw-tt/k")
    expect(code == 200, "first read fetches")
    h.direct("put", two, "s3://gw-tt/k")
    code, body = status(gw.url + "/gw-tt/k")
    with open(one, "rb") as f:
        expect(code == 200 and body == f.read(), "within --revalidate-after the cached copy is served unasked")
    h.via_gateway(gw, "put", two, "s3://gw-tt/k")
    code, body = status(gw.url + "/gw-tt/k")
    with open(two, "rb") as f:
        expect(code == 200 and body == f.read(), "a PUT through the gateway replaces the cached copy at once")


def rdma(h):
    gw = h.gateway("gw", fabric="tcp")
    if not any("rdma: tcp" in line for line in gw.banner):
        raise Skip("the gateway opened no libfabric tcp provider: " + " / ".join(gw.banner))
    h.direct("mb", "s3://gw-rd")
    size = 24 * MIB + 7
    src = h.file("rd", size, 41)
    h.direct("put", src, "s3://gw-rd/k")
    got = h.out("rd-got")
    for attempt in ("miss", "hit"):
        r = h.via_gateway(gw, "get", "s3://gw-rd/k", got, "--via", "rdma", "--fabric", "tcp")
        m = REPORT.search(r.stdout + r.stderr)
        expect(m is not None and int(m.group(1)) == size and int(m.group(3)) == 0,
               "GET --via rdma --fabric tcp through the gateway (%s): %d bytes by RDMA" % (attempt, size))
        expect(md5(got) == md5(src), "byte-exact")


SCENARIOS = {"write-through": write_through, "coherence": coherence, "eviction": eviction, "failure": failure,
             "ttl": ttl, "rdma": rdma}


def main():
    binary, scenario = sys.argv[1], sys.argv[2]
    upstream = sys.argv[3] if len(sys.argv) > 3 else "sluice"
    h = Harness(binary, upstream)
    try:
        h.upstream.start()
        print("%s against a %s upstream at %s" % (scenario, upstream, h.upstream.url))
        SCENARIOS[scenario](h)
    except Skip as e:
        print("SKIPPED:", e)
        return SKIP
    finally:
        h.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
