#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The benchmark harness: runs a scenario set, each scenario beside its baseline in the same run,
and writes results.json, table.md (printed at the end) and PNG plots.

  bench/run.py [--set cpu|gpu|all] [--quick] [--only GROUP,...] [--gpu-json FILE] [--build DIR] [--out DIR]
               [--baseline-cli SLUICE]

cpu: starts `sluice serve --fabric shm,tcp --grant-socket …` (store on tmpfs) and nginx (sendfile)
  on loopback, then
  startup           `sluice --help` and `sluice ls` wall time (hyperfine mean) against `true`, `aws s3 ls`
                    and, with --baseline-cli SLUICE, another build's binary; targets 20 and 30 ms
  large GET 1 GiB   sluice rdma (shm), rdma (tcp;ofi_rxm), same-host grant (memfd), http; nginx
                    with the same client; curl over HTTP and HTTPS (TLS 1.3, self-signed)
                    and the AWS CLI against sluice serve; curl against nginx; ceilings (memcpy,
                    loopback TCP, libfabric RMA write over shm and tcp); part size x parts in flight
  large PUT 1 GiB   sluice rdma (shm), http; curl -T
  small objects     4 KiB and 64 KiB with wrk: presigned GET URLs of sluice serve against nginx
  core scaling      4 KiB GETs with wrk against a sluice serve held to 1, 2, 4, ... cores (taskset)
  listing           ListObjectsV2 over 100,000 keys, then a HEAD of each
  size sweep        rdma shm GET (and http) from 4 KiB up to --sweep-max (default 1 GiB)
gpu: reads the JSON that sluice_gpu_bench writes on the device machine (--gpu-json, repeatable)
  and evaluates the GPU targets from it. Targets are reported as pass/miss, never asserted.
"""
import argparse
import atexit
import datetime
import filecmp
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = "bench"
GATEWAY_MISSES = [  # (row id, what it measures); each row's baseline is the row id + ".upstream"
    ("gw.miss_http", "gateway miss (http)"),
    ("gw.miss_rdma_shm", "gateway miss (rdma shm)"),
    ("gw.miss_http_huge", "gateway miss (http), cache huge=within_size"),
    ("gw.miss_rdma_shm_huge", "gateway miss (rdma shm), cache huge=within_size"),
]
ACCESS_KEY, SECRET_KEY = "SLUICEBENCH", "sluice-bench-secret"
SEED = 7
T0 = time.monotonic()


def log(message):
    elapsed = time.monotonic() - T0
    print("[%2d:%02d] %s" % (elapsed // 60, elapsed % 60, message), flush=True)


def size_name(n):
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if n >= unit and n % unit == 0:
            return "%d %s" % (n // unit, name)
    return "%d B" % n


def parse_size(text):
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]i?B?|B)?\s*", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError("not a size: " + text)
    unit = (m.group(2) or "B").upper()[0]
    return int(m.group(1)) * {"B": 1, "K": KIB, "M": MIB, "G": GIB, "T": GIB * 1024}[unit]


def tail(text, n=400):
    text = (text or "").split("\nusage:")[0].strip()
    return text if len(text) <= n else "..." + text[-n:]


# ---------------------------------------------------------------------------------------------
# Cleanup: every server and temporary directory is registered here; run at exit, on SIGTERM and
# from main's finally (each action once).

_cleanups = []


def on_cleanup(action):
    _cleanups.append(action)


def cleanup():
    while _cleanups:
        action = _cleanups.pop()
        try:
            action()
        except Exception as e:  # noqa: BLE001 - cleanup goes on
            print("cleanup: %s" % e, file=sys.stderr)


atexit.register(cleanup)


def _terminate(signum, _frame):
    raise KeyboardInterrupt("signal %d" % signum)


def _die_with_parent():
    """preexec_fn: the child gets SIGTERM when this process dies (even by SIGKILL): no server outlives the run."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# ---------------------------------------------------------------------------------------------
# Processes, measured: wall time, CPU (user + system) and peak RSS of the child alone (wait4).

class Measured:
    def __init__(self, rc, wall, cpu, maxrss, stdout, stderr, timed_out):
        self.rc, self.wall, self.cpu, self.maxrss = rc, wall, cpu, maxrss
        self.stdout, self.stderr, self.timed_out = stdout, stderr, timed_out


def run_measured(cmd, timeout, env=None, stdout_devnull=False, cwd=None):
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL if stdout_devnull else out, stderr=err, env=env,
                                cwd=cwd, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        timed_out = []
        timer = threading.Timer(timeout, lambda: (timed_out.append(1), proc.kill()))
        timer.start()
        try:
            while True:
                try:
                    _, status, usage = os.wait4(proc.pid, 0)
                    break
                except InterruptedError:
                    continue
        except BaseException:
            proc.kill()
            raise
        finally:
            timer.cancel()
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Measured(proc.returncode, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024,
                        out.read().decode(errors="replace"), err.read().decode(errors="replace"), bool(timed_out))


def proc_cpu_seconds(pid):
    """CPU seconds (user + system, all threads) of pid and of its children still running."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = [pid]
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    for p in pids:
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
        except (OSError, IndexError, ValueError):
            pass
    return total


def mount_type(path):
    best, kind = "", "?"
    path = os.path.realpath(path)
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and (path == parts[1] or path.startswith(parts[1].rstrip("/") + "/")) \
                    and len(parts[1]) >= len(best):
                best, kind = parts[1], parts[2]
    return kind


# ---------------------------------------------------------------------------------------------
# Servers

class SluiceServer:
    """`sluice serve` on 127.0.0.1:0. planes: the serve flags of the RDMA and grant planes (default:
    shm and tcp, a grant socket beside the root); prefix: a command it runs under (taskset)."""

    def __init__(self, cli, root, logdir, name="sluice-serve", planes=None, prefix=(), extra=(), tls=True):
        self.cli, self.root, self.log_path = cli, root, os.path.join(logdir, name + ".log")
        self.planes, self.prefix, self.extra, self.want_tls = planes, list(prefix), list(extra), tls
        self.proc, self.port, self.banner = None, None, []
        self.tls_port, self.tls_ca, self.tls_key = None, None, None

    def start(self):
        self._log = open(self.log_path, "w")
        # HTTPS beside HTTP (the get.curl_sluice_https row): a self-signed certificate for 127.0.0.1.
        tls = []
        if self.want_tls and shutil.which("openssl"):
            cert, key = self.root + ".cert.pem", self.root + ".key.pem"
            made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                                   "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                                  capture_output=True)
            if made.returncode == 0:
                tls = ["--tls-cert", cert, "--tls-key", key, "--tls-listen", "127.0.0.1:0"]
                self.tls_ca, self.tls_key = cert, key
        # shm is named: `auto` no longer opens it (it trusts every local process); the benchmark
        # still measures it beside tcp and the same-host grants (GRANT_SOCKET).
        self.grant_socket = self.root + ".grants.sock"
        planes = self.planes if self.planes is not None else ["--fabric", "shm,tcp", "--grant-socket",
                                                              self.grant_socket]
        self.proc = subprocess.Popen(self.prefix + [self.cli, "serve", "--root", self.root, "--listen", "127.0.0.1:0"]
                                     + planes + ["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY] + tls
                                     + self.extra,
                                     stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent)
        on_cleanup(self.stop)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with open(self.log_path) as f:
                text = f.read()
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
            if m:
                self.port = int(m.group(1))
                t = re.search(r"https on 127\.0\.0\.1:(\d+)", text)
                self.tls_port = int(t.group(1)) if t else None
                self.banner = [line.replace("sluice serve: ", "", 1) for line in text.splitlines() if line.strip()]
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("sluice serve did not start: " + tail(open(self.log_path).read()))

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()


# The core counts at which core_scaling also measures a 4 KiB GET over HTTPS (sluice and nginx).
TLS_POINTS = (1, 8)

NGINX_CONF = """# written by bench/run.py
{user}
worker_processes {workers};
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    default_type application/octet-stream;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
    }}
{tls_server}}}
"""

# The HTTPS server block: the certificate sluice serve uses, nginx's default TLS settings.
NGINX_TLS_SERVER = """    server {{
        listen 127.0.0.1:{tls_port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        root {root};
    }}
"""


class Nginx:
    """nginx in the foreground (daemon off), sendfile on, serving root as http://127.0.0.1:PORT/;
    as many workers as sluice serve has io threads (2). tls: (certificate, key) to serve the same
    root over HTTPS too (tls_url)."""

    def __init__(self, binary, root, prefix, workers=2, command_prefix=(), tls=None):
        self.binary, self.root, self.prefix, self.workers, self.tls = binary, root, prefix, workers, tls
        self.command_prefix = list(command_prefix)  # taskset: the workers inherit the master's cores
        self.proc, self.port, self.tls_port = None, None, None

    def start(self):
        os.makedirs(self.prefix, exist_ok=True)
        for attempt in range(5):
            self.port = free_port()
            self.tls_port = free_port() if self.tls else None
            tls_server = NGINX_TLS_SERVER.format(tls_port=self.tls_port, cert=self.tls[0], key=self.tls[1],
                                                 root=self.root) if self.tls else ""
            conf = os.path.join(self.prefix, "nginx.conf")
            with open(conf, "w") as f:
                f.write(NGINX_CONF.format(user="user root;" if os.geteuid() == 0 else "", workers=self.workers,
                                          prefix=self.prefix, port=self.port, root=self.root, tls_server=tls_server))
            self.proc = subprocess.Popen(self.command_prefix + [self.binary, "-p", self.prefix, "-c", conf, "-e",
                                          os.path.join(self.prefix, "error.log"), "-g", "daemon off;"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
            on_cleanup(self.stop)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    urllib.request.urlopen("http://127.0.0.1:%d/" % self.port, timeout=1).close()
                    return self
                except urllib.error.HTTPError:
                    return self  # 403/404 on /: it answers
                except OSError:
                    time.sleep(0.05)
            self.stop()
        raise RuntimeError("nginx did not start: " + tail(read_text(os.path.join(self.prefix, "error.log"))))

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    @property
    def tls_url(self):
        return "https://127.0.0.1:%d" % self.tls_port if self.tls_port else None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: the workers exit, then the master
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# wrk's per-response check: every body compared with the expected bytes (the file named after
# `--`), every status with 200; done() prints "verify: BAD bad of N". Lua states are per thread,
# so the counts are read from each thread at the end.
WRK_VERIFY = """local expected
bad = 0
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args)
  local f = assert(io.open(args[1], "rb"))
  expected = f:read("*a")
  f:close()
end
function response(status, headers, body)
  if status ~= 200 or body ~= expected then bad = bad + 1 end
end
function done(summary, latency, requests)
  local total = 0
  for _, t in ipairs(threads) do total = total + t:get("bad") end
  io.write(string.format("verify: %d bad of %d\\n", total, summary.requests))
end
"""


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def remove_stale_work_dirs(parent):
    """Work dirs (GiBs of tmpfs) of earlier runs that were killed before they could clean up."""
    for name in os.listdir(parent):
        path = os.path.join(parent, name)
        if not name.startswith("sluice-bench.") or not os.path.isdir(path):
            continue
        try:
            with open(os.path.join(path, "owner.pid")) as fh:
                pid = int(fh.read().strip())
        except (OSError, ValueError):
            continue  # not ours to judge
        if not os.path.exists("/proc/%d" % pid) or "run.py" not in read_text("/proc/%d/cmdline" % pid):
            log("removing %s (left by a run that was killed, pid %d)" % (path, pid))
            shutil.rmtree(path, ignore_errors=True)


def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------------
# Results

class NotRun(Exception):
    """A scenario that cannot run here (a tool or program is missing): recorded, not an error."""


class Results:
    def __init__(self):
        self.scenarios = []  # dicts: id, group, label, kind, status, ... (see add)
        self.by_id = {}

    def add(self, entry):
        self.scenarios.append(entry)
        self.by_id[entry["id"]] = entry
        if entry["status"] == "ok":
            parts = []
            if entry.get("gib_per_s") is not None:
                parts.append("%.3f GiB/s" % entry["gib_per_s"])
            if entry.get("ops_per_s") is not None:
                parts.append("%.0f ops/s" % entry["ops_per_s"])
                if entry.get("p50_ms") is not None:  # the listing's rows have no latencies
                    parts.append("p50 %.3f ms, p99 %.3f ms" % (entry["p50_ms"], entry["p99_ms"]))
            if entry.get("cpu_s_per_gib") is not None:
                parts.append("%.3f CPU-s/GiB" % entry["cpu_s_per_gib"])
            if entry.get("mean_ms") is not None:
                parts.append("mean %.1f ms ± %.1f (min %.1f, %d runs)" % (entry["mean_ms"], entry["stddev_ms"],
                                                                         entry["min_ms"], entry["runs"]))
            log("  %-42s %s" % (entry["label"], ", ".join(parts)))
        else:
            log("  %-42s %s: %s" % (entry["label"], entry["status"], entry.get("error", "")))
        return entry

    def rate(self, sid, field="gib_per_s"):
        entry = self.by_id.get(sid)
        if entry and entry["status"] == "ok" and entry.get(field):
            return entry[field]
        return None


def median_run(runs, note):
    """The median of runs by rate, with note added to its own."""
    out = dict(sorted(runs, key=lambda r: r["gib_per_s"] or 0)[len(runs) // 2])
    out["note"] = "; ".join(x for x in (out.get("note"), note) if x)
    return out


def scenario(results, sid, group, label, kind, body):
    """Runs body() -> dict of measured fields; records it, or its error, and goes on."""
    entry = {"id": sid, "group": group, "label": label, "kind": kind}
    try:
        entry.update(body())
        entry.setdefault("status", "ok")
    except NotRun as e:
        entry.update(status="not run", error=str(e))
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - a failing scenario is recorded and the run goes on
        entry.update(status="error", error=tail(str(e) or type(e).__name__))
    return results.add(entry)


# ---------------------------------------------------------------------------------------------
# The harness

class Harness:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.results = Results()
        self.meta = {}
        self.build = os.path.abspath(args.build)
        self.cli = os.path.join(self.build, "src", "sluice")
        self.s3_bench = os.path.join(self.build, "bench", "sluice_s3_bench")
        self.http_load = os.path.join(self.build, "bench", "sluice_http_load")
        self.ceilings = os.path.join(self.build, "bench", "sluice_ceilings")
        self.missing = {}  # program path -> why it is not there
        self.server = self.nginx = None
        self.objects = {}  # key -> size, on both servers

    # -- build -----------------------------------------------------------------------------
    def ensure_built(self):
        wanted = [("sluice_cli", self.cli), ("sluice_s3_bench", self.s3_bench), ("sluice_ceilings", self.ceilings)]
        need = [(t, p) for t, p in wanted if not os.access(p, os.X_OK)]
        if need:
            started = time.monotonic()
            if not os.path.exists(os.path.join(self.build, "CMakeCache.txt")):
                log("configuring %s (cmake --preset release)" % self.build)
                r = subprocess.run(["cmake", "--preset", "release", "-B", self.build], cwd=REPO, capture_output=True,
                                   text=True)
                if r.returncode:
                    raise RuntimeError("cmake --preset release -B %s failed: %s" % (self.build, tail(r.stderr)))
            jobs = str(os.cpu_count() or 2)
            log("building %s in %s" % (" ".join(t for t, _ in need), self.build))
            r = subprocess.run(["cmake", "--build", self.build, "-j", jobs, "--target"] + [t for t, _ in need],
                               cwd=REPO, capture_output=True, text=True)
            if r.returncode:  # one of them may not exist yet: build each alone and say which failed
                for target, path in need:
                    r = subprocess.run(["cmake", "--build", self.build, "-j", jobs, "--target", target], cwd=REPO,
                                       capture_output=True, text=True)
                    if r.returncode:
                        why = (r.stdout + r.stderr).strip().splitlines()
                        self.missing[path] = "%s not built: %s" % (target, why[-1] if why else "cmake failed")
                        log("  " + self.missing[path])
            self.meta["build_seconds"] = round(time.monotonic() - started, 1)
        if self.cli in self.missing:
            raise RuntimeError(self.missing[self.cli])
        self.meta["binaries"] = {os.path.basename(p): {"path": p, "mtime": datetime.datetime.fromtimestamp(
            os.path.getmtime(p), datetime.timezone.utc).isoformat(timespec="seconds")}
            for _, p in wanted if os.path.exists(p)}

    def need(self, program):
        if not os.access(program, os.X_OK):
            raise NotRun(self.missing.get(program, "%s is not built" % os.path.basename(program)))

    def tool(self, name):
        path = shutil.which(name)
        if not path:
            raise NotRun("%s is not installed (scripts/deps.sh)" % name)
        return path

    # -- setup -----------------------------------------------------------------------------
    def setup(self):
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        remove_stale_work_dirs(shm or tempfile.gettempdir())
        self.work = tempfile.mkdtemp(prefix="sluice-bench.", dir=shm)
        on_cleanup(lambda: shutil.rmtree(self.work, ignore_errors=True))
        with open(os.path.join(self.work, "owner.pid"), "w") as fh:
            fh.write(str(os.getpid()))
        self.store = os.path.join(self.work, "store")
        self.www = os.path.join(self.work, "www")
        os.makedirs(os.path.join(self.www, BUCKET))
        os.makedirs(os.path.join(self.out, "logs"), exist_ok=True)
        fs = mount_type(self.work)
        self.meta["store"] = {"path": self.store, "filesystem": fs, "nginx_root": self.www,
                              "note": "sluice's store and nginx's files on %s (%s): PUTs fsync, and this machine's "
                                      "disk does ~146 MB/s" % (fs, os.path.dirname(self.work))}
        log("store and nginx root on %s (%s)" % (fs, self.work))
        self.server = SluiceServer(self.cli, self.store, os.path.join(self.out, "logs"),
                                   extra=self.args.serve_arg).start()
        self.meta["sluice_serve"] = {"url": self.server.url, "banner": self.server.banner}
        log("sluice serve: %s" % " | ".join(self.server.banner))
        nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
        if nginx:
            try:
                tls = (self.server.tls_ca, self.server.tls_key) if self.server.tls_port else None
                self.nginx = Nginx(nginx, self.www, os.path.join(self.work, "nginx"), tls=tls).start()
                log("nginx (sendfile on, 2 workers): %s %s" % (self.nginx.url, self.nginx.tls_url or ""))
                on_cleanup(lambda: shutil.copy(os.path.join(self.nginx.prefix, "error.log"),
                                               os.path.join(self.out, "logs", "nginx-error.log")))
            except Exception as e:  # noqa: BLE001
                self.nginx = None
                self.nginx_missing = "nginx did not start: %s" % e
                log(self.nginx_missing)
        else:
            self.nginx_missing = "nginx is not installed (apt-get install nginx-light)"
        self.curl_sign = None
        if shutil.which("curl"):
            self.curl_sign = ["curl", "-sS", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                              "%s:%s" % (ACCESS_KEY, SECRET_KEY), "-H", "x-amz-content-sha256:UNSIGNED-PAYLOAD"]
        self.create_bucket()

    def create_bucket(self):
        if self.curl_sign:
            r = subprocess.run(self.curl_sign + ["-X", "PUT", "-o", "/dev/null", "-w", "%{http_code}",
                                                 "%s/%s" % (self.server.url, BUCKET)], capture_output=True, text=True)
            log("bucket %s: HTTP %s" % (BUCKET, r.stdout.strip()))

    def need_nginx(self):
        if not self.nginx:
            raise NotRun(self.nginx_missing)

    def object(self, key, size, nginx_copy=True):
        """The object on sluice serve (PUT by sluice_s3_bench, pattern of SEED) and nginx's copy of the
        same bytes (gen). Without sluice_s3_bench: random bytes, written for nginx and PUT by curl."""
        if key in self.objects:
            return key
        path = os.path.join(self.www, BUCKET, key)
        if os.access(self.s3_bench, os.X_OK):
            if nginx_copy:
                self.gen(path, size)
            self.bench(op="put", key=key, size=size, via="auto", timeout=600)
        else:
            if not self.curl_sign:
                raise NotRun("neither sluice_s3_bench nor curl to create the object")
            with open(path, "wb") as f:
                left = size
                while left:
                    n = min(left, 64 * MIB)
                    f.write(os.urandom(n))
                    left -= n
            self.curl_put(key, path)
        self.objects[key] = size
        return key

    def curl_put(self, key, path):
        r = subprocess.run(self.curl_sign + ["-T", path, "-o", "/dev/null", "-w", "%{http_code}",
                                             "%s/%s/%s" % (self.server.url, BUCKET, key)], capture_output=True,
                           text=True)
        if r.returncode or r.stdout.strip() != "200":
            raise RuntimeError("curl PUT %s: HTTP %s %s" % (key, r.stdout.strip(), tail(r.stderr)))

    # -- sluice_s3_bench / sluice_ceilings ------------------------------------------------------
    def gen(self, path, size):
        """nginx's copy: the bytes sluice_s3_bench puts for SEED."""
        cmd = [self.s3_bench, "--endpoint", "http://127.0.0.1:1", "--bucket", BUCKET, "--key", "gen", "--op", "gen",
               "--size", str(size), "--seed", str(SEED), "--out", path, "--anonymous"]
        r = run_measured(cmd, 120)
        if r.rc != 0 or not os.path.exists(path) or os.path.getsize(path) != size:
            raise RuntimeError("sluice_s3_bench --op gen: exit %d: %s" % (r.rc, tail(r.stderr or r.stdout)))

    def bench(self, op, key, size, via=None, fabric=None, part_size=None, parts_in_flight=None, repeat=None,
              endpoint=None, anonymous=False, extra=(), timeout=None, server=None, keys=None):
        self.need(self.s3_bench)
        cmd = [self.s3_bench, "--endpoint", endpoint or self.server.url, "--bucket", BUCKET, "--key", key, "--op", op,
               "--size", str(size), "--seed", str(SEED)]
        access, secret = keys or (ACCESS_KEY, SECRET_KEY)
        cmd += ["--anonymous"] if anonymous else ["--access-key", access, "--secret-key", secret]
        for flag, value in (("--via", via), ("--fabric", fabric), ("--part-size", part_size),
                            ("--parts-in-flight", parts_in_flight), ("--repeat", repeat)):
            if value is not None:
                cmd += [flag, str(value)]
        cmd += list(extra)
        server_pid = self.nginx.proc.pid if (self.nginx and endpoint == self.nginx.url) else self.server.proc.pid
        if server is not None:
            server_pid = server.proc.pid
        cpu0 = proc_cpu_seconds(server_pid)
        r = run_measured(cmd, timeout or 120 + (repeat or 1) * size / GIB * 30)
        server_cpu = proc_cpu_seconds(server_pid) - cpu0
        line = next((s for s in reversed(r.stdout.splitlines()) if s.strip().startswith("{")), None)
        if r.timed_out:
            raise RuntimeError("timed out: %s" % " ".join(cmd[1:]))
        if r.rc != 0 or line is None:
            raise RuntimeError("exit %d: %s" % (r.rc, tail(r.stderr or r.stdout)))
        data = json.loads(line)
        if data.get("verified") is False:
            raise RuntimeError("the bytes did not verify: %s" % line)
        runs = len(data.get("seconds_all") or []) or data.get("repeat") or 1
        moved = data.get("bytes", size) * runs / GIB
        return {
            "gib_per_s": data.get("gib_per_s"),
            "seconds": data.get("seconds_median"),
            "cpu_s_per_gib": data.get("cpu_s_per_gib"),
            "peak_rss_bytes": data.get("peak_rss_bytes"),
            "pinned_bytes": data.get("pinned_bytes", data.get("registered_bytes")),
            "server_cpu_s_per_gib": server_cpu / moved if moved else None,
            "part_size": data.get("part_size"),
            "parts_in_flight": data.get("parts_in_flight"),
            "raw": data,
            "process": {"wall_s": round(r.wall, 3), "cpu_s": round(r.cpu, 3), "maxrss_bytes": r.maxrss},
            "cmd": " ".join(cmd[1:]).replace(secret, "***"),
            "note": "; ".join(x for x in (
                "provider %s" % data["provider"] if data.get("provider") else "",
                "rdma %s / http %s" % (size_name(data.get("rdma_bytes") or 0), size_name(data.get("http_bytes") or 0))
                if "rdma_bytes" in data else "",
                "verified" if data.get("verified") else "") if x),
        }

    def ceiling(self, what, size, provider=None, repeat=3):
        self.need(self.ceilings)
        cmd = [self.ceilings, "--what", what, "--size", str(size), "--repeat", str(repeat)]
        if provider:
            cmd += ["--provider", provider]
        r = run_measured(cmd, 180)
        line = next((s for s in reversed(r.stdout.splitlines()) if s.strip().startswith("{")), None)
        if r.rc != 0 or line is None:
            raise RuntimeError("exit %d%s: %s" % (r.rc, " (timed out)" if r.timed_out else "", tail(r.stderr or r.stdout)))
        data = json.loads(line)
        return {"gib_per_s": data.get("gib_per_s"), "seconds": data.get("seconds_median"),
                "cpu_s_per_gib": data.get("cpu_s_per_gib"), "peak_rss_bytes": r.maxrss, "raw": data,
                "cmd": " ".join(cmd[1:]),
                "note": "; ".join(x for x in ("provider %s" % data["provider"] if data.get("provider") else "",
                                              "chunk %s" % size_name(data["chunk"]) if data.get("chunk") else "",
                                              "CPU of both ends" if what != "memcpy" else "") if x)}

    # -- external clients (curl, AWS CLI): repeat runs, the median by wall time ------------------------
    def external(self, cmd, size, repeat, server_pid, check, env=None, stdout_devnull=False, note=""):
        runs = []
        for _ in range(repeat):
            cpu0 = proc_cpu_seconds(server_pid) if server_pid else 0
            r = run_measured(cmd, 120 + size / GIB * 60, env=env, stdout_devnull=stdout_devnull)
            server_cpu = proc_cpu_seconds(server_pid) - cpu0 if server_pid else None
            if r.timed_out or r.rc != 0:
                raise RuntimeError("exit %d%s: %s" % (r.rc, " (timed out)" if r.timed_out else "",
                                                      tail(r.stderr or r.stdout)))
            check(r)
            runs.append((r, server_cpu))
        runs.sort(key=lambda x: x[0].wall)
        r, server_cpu = runs[len(runs) // 2]
        gib = size / GIB
        return {"gib_per_s": gib / r.wall, "seconds": r.wall, "cpu_s_per_gib": r.cpu / gib,
                "peak_rss_bytes": max(x[0].maxrss for x in runs),
                "server_cpu_s_per_gib": server_cpu / gib if server_cpu is not None else None,
                "seconds_all": [round(x[0].wall, 4) for x in runs],
                "cmd": " ".join(cmd).replace(SECRET_KEY, "***"), "note": note}

    def verify_download(self, cmd, target, source, env=None):
        """Runs cmd, which downloads into `target`, and compares target with `source` byte for byte."""
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
            if r.returncode != 0:
                raise RuntimeError("verifying download: exit %d: %s" % (r.returncode, tail(r.stderr or r.stdout)))
            if not filecmp.cmp(target, source, shallow=False):
                raise RuntimeError("verifying download: the bytes differ from %s" % source)
        finally:
            if os.path.exists(target):
                os.unlink(target)

    def curl_get(self, url, size, signed, repeat, server_pid, extra=()):
        self.tool("curl")
        base = (self.curl_sign if signed else ["curl", "-sS"]) + list(extra)
        # The timed runs write to /dev/null; one untimed GET with the same options into a file
        # checks the bytes (against nginx's copy of the object: the same bytes).
        self.verify_download(base + ["-o", os.path.join(self.work, "curl-verify"), url],
                             os.path.join(self.work, "curl-verify"), os.path.join(self.www, BUCKET, url.rsplit("/", 1)[1]))
        cmd = base + ["-o", "/dev/null", "-w", "%{http_code} %{size_download}", url]

        def check(r):
            code, got = (r.stdout.split() + ["?", "?"])[:2]
            if code != "200" or got != str(size):
                raise RuntimeError("HTTP %s, %s bytes of %d" % (code, got, size))
        return self.external(cmd, size, repeat, server_pid, check,
                             note="process wall and CPU; HTTP 200 and length checked, bytes by one untimed GET")

    # -- the scenario groups ------------------------------------------------------------------------
    def large_get(self):
        size = GIB
        group = "Large GET 1 GiB"
        rep = 1 if self.quick else 3
        log("== %s (%d run%s each, median)" % (group, rep, "s" if rep > 1 else ""))
        key = "object-1g"
        try:
            log("creating %s on sluice serve and nginx's copy" % size_name(size))
            self.object(key, size)
        except Exception as e:  # noqa: BLE001
            self.results.add({"id": "get.setup", "group": group, "label": "object setup", "kind": "setup",
                              "status": "error", "error": tail(str(e))})
            return
        R = self.results
        scenario(R, "get.rdma_shm", group, "sluice rdma (shm)", "sluice",
                 lambda: self.bench("get", key, size, via="rdma", fabric="shm", repeat=rep))
        scenario(R, "get.rdma_tcp", group, "sluice rdma (tcp;ofi_rxm)", "sluice",
                 lambda: self.bench("get", key, size, via="rdma", fabric="tcp", repeat=rep))
        scenario(R, "get.http", group, "sluice http", "sluice",
                 lambda: self.bench("get", key, size, via="http", repeat=rep))
        scenario(R, "get.grant_memfd", group, "sluice same-host grant (memfd)", "sluice",
                 lambda: self.bench("get", key, size, repeat=rep, extra=["--grant-socket", self.server.grant_socket]))
        scenario(R, "get.cli_file", group, "`sluice get` to a file (tmpfs), http", "sluice",
                 lambda: self.cli_transfer("get", key, size, rep))

        def nginx_same_client():
            self.need_nginx()
            return self.bench("get", key, size, via="http", anonymous=True, endpoint=self.nginx.url, repeat=rep)
        scenario(R, "get.nginx", group, "nginx (sendfile), same client", "baseline", nginx_same_client)
        url = "%s/%s/%s" % (self.server.url, BUCKET, key)
        scenario(R, "get.curl_sluice", group, "curl → sluice serve", "baseline",
                 lambda: self.curl_get(url, size, True, rep, self.server.proc.pid))

        def curl_https():
            if not self.server.tls_port:
                raise NotRun("sluice serve has no HTTPS listener (openssl missing?)")
            return self.curl_get("https://127.0.0.1:%d/%s/%s" % (self.server.tls_port, BUCKET, key), size, True, rep,
                                 self.server.proc.pid, extra=["--cacert", self.server.tls_ca])
        scenario(R, "get.curl_sluice_https", group, "curl → sluice serve over HTTPS (TLS 1.3)", "baseline", curl_https)

        def curl_nginx():
            self.need_nginx()
            return self.curl_get("%s/%s/%s" % (self.nginx.url, BUCKET, key), size, False, rep, self.nginx.proc.pid)
        scenario(R, "get.curl_nginx", group, "curl → nginx (sendfile)", "baseline", curl_nginx)

        def curl_nginx_https():
            self.need_nginx()
            if not self.nginx.tls_url:
                raise NotRun("nginx has no HTTPS listener (sluice serve has no certificate)")
            return self.curl_get("%s/%s/%s" % (self.nginx.tls_url, BUCKET, key), size, False, rep, self.nginx.proc.pid,
                                 extra=["--cacert", self.server.tls_ca])
        scenario(R, "get.curl_nginx_https", group, "curl → nginx over HTTPS (same certificate)", "baseline",
                 curl_nginx_https)
        scenario(R, "get.aws", group, "AWS CLI → sluice serve", "baseline",
                 lambda: self.aws_get(key, size, 1 if self.quick else 2))
        scenario(R, "ceil.memcpy", group, "ceiling: memcpy", "ceiling", lambda: self.ceiling("memcpy", size))
        scenario(R, "ceil.tcp", group, "ceiling: loopback TCP", "ceiling", lambda: self.ceiling("tcp", size))
        scenario(R, "ceil.fi_rma_shm", group, "ceiling: libfabric RMA write (shm)", "ceiling",
                 lambda: self.ceiling("fi_rma", size, "shm"))
        scenario(R, "ceil.fi_rma_tcp", group, "ceiling: libfabric RMA write (tcp)", "ceiling",
                 lambda: self.ceiling("fi_rma", size, "tcp"))

    def cli_transfer(self, direction, key, size, repeat):
        """`sluice get` of `key` into a file beside the store (tmpfs), or `sluice put` of nginx's
        copy of it, over HTTP: the CLI as a user runs it, against the library rows."""
        target = os.path.join(self.work, "cli-" + key)
        source = os.path.join(self.www, BUCKET, key)
        if direction == "put" and not os.path.exists(source):
            raise NotRun("no source file (the GET setup failed)")
        auth = ["--endpoint", self.server.url, "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY, "--no-progress",
                "--via", "http"]
        if direction == "get":
            cmd = [self.cli, "get", "s3://%s/%s" % (BUCKET, key), target] + auth
        else:
            cmd = [self.cli, "put", source, "s3://%s/cli-%s" % (BUCKET, key)] + auth

        def check(r):
            if direction == "get" and not filecmp.cmp(target, source, shallow=False):
                raise RuntimeError("the downloaded file differs from the object (%d bytes of %d)" % (
                    os.path.getsize(target), size))
        try:
            return self.external(cmd, size, repeat, self.server.proc.pid, check,
                                 note="the CLI's process wall and CPU; %s" % (
                                     "written with pwrite from two reused windows; each run's file compared"
                                     if direction == "get"
                                     else "read from the file"))
        finally:
            if os.path.exists(target):
                os.unlink(target)

    def aws_environment(self):
        """The AWS CLI's environment for this run's server: its keys, path-style addressing in a
        config file of the run's own, no shared credentials, no instance metadata, no pager."""
        cfg = os.path.join(self.work, "aws-config")
        with open(cfg, "w") as f:
            f.write("[default]\nregion = us-east-1\ns3 =\n    addressing_style = path\n")
        return dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                    AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=cfg,
                    AWS_SHARED_CREDENTIALS_FILE=os.path.join(self.work, "no-credentials"),
                    AWS_EC2_METADATA_DISABLED="true", AWS_PAGER="")

    def aws_get(self, key, size, repeat):
        aws = self.tool("aws")
        env = self.aws_environment()
        version = subprocess.run([aws, "--version"], capture_output=True, text=True, env=env)
        start_up = run_measured([aws, "--version"], 60, env=env)
        self.meta["aws_cli"] = (version.stdout + version.stderr).strip()
        target = os.path.join(self.work, "aws-verify")
        self.verify_download([aws, "s3", "cp", "s3://%s/%s" % (BUCKET, key), target, "--endpoint-url", self.server.url,
                              "--no-progress"], target, os.path.join(self.www, BUCKET, key), env=env)
        cmd = [aws, "s3", "cp", "s3://%s/%s" % (BUCKET, key), "-", "--endpoint-url", self.server.url, "--no-progress"]
        result = self.external(cmd, size, repeat, self.server.proc.pid, lambda r: None, env=env, stdout_devnull=True,
                               note="%s; bytes checked by one untimed download to a file; process wall incl. Python start (`aws --version`: %.2f s, %.2f CPU-s)" % (
                                   self.meta["aws_cli"].split()[0], start_up.wall, start_up.cpu))
        return result

    # -- startup: how long a short command of the CLI takes, start to exit (issue 40) ----------------
    def startup(self):
        """`sluice --help` and `sluice ls` against the running sluice serve, timed by hyperfine (no
        shell, warm-up runs first; the mean of its runs), beside a bare process start (`true`), the
        AWS CLI's `aws s3 ls` against the same server, and the same commands of another build when
        --baseline-cli gives one (e.g. the previous release, which loads libfabric at start)."""
        group = "Startup: process wall time (hyperfine, mean)"
        runs = 10 if self.quick else 40
        log("== %s (%d runs each)" % (group, runs))
        R = self.results
        connection = ["--endpoint", self.server.url, "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY]
        aws_env = self.aws_environment()

        def timed(cmd, env=None):
            hyperfine = self.tool("hyperfine")
            if os.sep in cmd[0]:
                self.need(cmd[0])
            check = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
            if check.returncode != 0:
                raise RuntimeError("exit %d: %s" % (check.returncode, tail(check.stderr or check.stdout)))
            export = os.path.join(self.work, "hyperfine.json")
            r = subprocess.run([hyperfine, "-N", "--style", "none", "--warmup", "3", "--runs", str(runs),
                                "--export-json", export, subprocess.list2cmdline(cmd)],
                               capture_output=True, text=True, timeout=600, env=env)
            if r.returncode != 0:
                raise RuntimeError("hyperfine: exit %d: %s" % (r.returncode, tail(r.stderr or r.stdout)))
            with open(export) as fh:
                m = json.load(fh)["results"][0]
            return {"mean_ms": m["mean"] * 1e3, "stddev_ms": m["stddev"] * 1e3, "min_ms": m["min"] * 1e3,
                    "median_ms": m["median"] * 1e3, "runs": len(m["times"]),
                    "cmd": " ".join(cmd).replace(SECRET_KEY, "***")}

        scenario(R, "startup.true", group, "`true` (a process start)", "baseline", lambda: timed([self.tool("true")]))
        scenario(R, "startup.help", group, "`sluice --help`", "sluice", lambda: timed([self.cli, "--help"]))
        scenario(R, "startup.ls", group, "`sluice ls` (local sluice serve)", "sluice",
                 lambda: timed([self.cli, "ls", "s3://" + BUCKET] + connection))
        old = self.args.baseline_cli
        if old:
            scenario(R, "startup.help.baseline_cli", group, "`sluice --help`, %s" % old, "baseline",
                     lambda: timed([old, "--help"]))
            scenario(R, "startup.ls.baseline_cli", group, "`sluice ls`, %s" % old, "baseline",
                     lambda: timed([old, "ls", "s3://" + BUCKET] + connection))
        scenario(R, "startup.aws_ls", group, "`aws s3 ls` (same server)", "baseline",
                 lambda: timed([self.tool("aws"), "s3", "ls", "s3://" + BUCKET, "--endpoint-url",
                                self.server.url], env=aws_env))

    # -- bulk: many files per command, the CLI against the AWS CLI, s3cmd and rclone (issue 40) ----
    def bulk(self):
        """100 x 4 KiB and 1,000 x 64 KiB files up and down, one command each, by `sluice cp -r`,
        `aws s3 cp --recursive`, `s3cmd put/get -r` and `rclone copy` against the same sluice serve;
        and one 1 GiB object by `sluice cp` to a file beside the library's GET into memory. Each run
        writes a fresh prefix (up) or an empty directory (down); the downloads are compared."""
        group = "Bulk: many files per command (wall time)"
        rep = 1 if self.quick else 3
        log("== %s (%d run%s each, median)" % (group, rep, "s" if rep > 1 else ""))
        R = self.results
        host = self.server.url.split("//")[1]
        aws_env = self.aws_environment()
        remote = ":s3,provider=Other,endpoint='%s',access_key_id=%s,secret_access_key=%s,region=us-east-1:" % (
            self.server.url, ACCESS_KEY, SECRET_KEY)
        s3cmd_base = ["-c", "/dev/null", "--access_key=" + ACCESS_KEY, "--secret_key=" + SECRET_KEY, "--host=" + host,
                      "--host-bucket=" + host, "--no-ssl", "--region=us-east-1", "--no-progress"]
        sluice_auth = ["--endpoint", self.server.url, "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY,
                       "--no-progress", "--via", "http"]
        counter = [0]

        def commands(tool, direction, local, prefix):
            url = "s3://%s/%s/" % (BUCKET, prefix)
            if tool == "sluice":
                self.need(self.cli)
                return [self.cli, "cp", "-r", local, url] + sluice_auth if direction == "up" else \
                    [self.cli, "cp", "-r", url, local] + sluice_auth, None
            if tool == "aws":
                aws = self.tool("aws")
                cmd = [aws, "s3", "cp", "--recursive", "--only-show-errors", "--endpoint-url", self.server.url]
                return cmd + ([local, url] if direction == "up" else [url, local]), aws_env
            if tool == "s3cmd":
                s3cmd = self.tool("s3cmd")
                return ([s3cmd] + s3cmd_base + ["put", "-r", local + "/", url] if direction == "up" else
                        [s3cmd] + s3cmd_base + ["get", "-r", url, local + "/"]), None
            rclone = self.tool("rclone")
            cmd = [rclone, "--config", "/dev/null", "copy"]
            return cmd + ([local, remote + BUCKET + "/" + prefix] if direction == "up" else
                          [remote + BUCKET + "/" + prefix, local]), dict(os.environ, AWS_CA_BUNDLE="")

        for count, size, tag in ((100, 4 * KIB, "100x4KiB"), (1000, 64 * KIB, "1000x64KiB")):
            source = os.path.join(self.work, "bulk-" + tag)
            if not os.path.isdir(source):
                os.makedirs(source)
                for i in range(count):
                    with open(os.path.join(source, "f%04d" % i), "wb") as f:
                        f.write(os.urandom(size))
            seed_prefix = "bulk-seed-" + tag  # what every download reads
            r = run_measured([self.cli, "cp", "-r", source, "s3://%s/%s/" % (BUCKET, seed_prefix)] + sluice_auth, 300)
            if r.rc != 0:
                R.add({"id": "bulk.%s.setup" % tag, "group": group, "label": "%s setup" % tag, "kind": "setup",
                       "status": "error", "error": tail(r.stderr)})
                continue
            for direction in ("up", "down"):
                for tool in ("sluice", "aws", "s3cmd", "rclone"):
                    def body(tool=tool, direction=direction):
                        runs = []
                        for _ in range(rep):
                            counter[0] += 1
                            target = os.path.join(self.work, "bulk-down-%d" % counter[0])
                            prefix = "bulk-up-%d" % counter[0] if direction == "up" else seed_prefix
                            if direction == "down":
                                os.makedirs(target)  # an empty directory (s3cmd get -r needs one)
                            cmd, env = commands(tool, direction, source if direction == "up" else target, prefix)
                            r = run_measured(cmd, 600, env=env)
                            try:
                                if r.rc != 0 or r.timed_out:
                                    raise RuntimeError("exit %d: %s" % (r.rc, tail(r.stderr or r.stdout)))
                                if direction == "down":
                                    got = sorted(os.listdir(target))
                                    if len(got) != count or not filecmp.cmp(os.path.join(target, got[-1]),
                                                                             os.path.join(source, got[-1]),
                                                                             shallow=False):
                                        raise RuntimeError("downloaded %d files of %d, or the bytes differ" % (
                                            len(got), count))
                            finally:
                                shutil.rmtree(target, ignore_errors=True)
                            runs.append(r)
                        runs.sort(key=lambda x: x.wall)
                        r = runs[len(runs) // 2]
                        return {"seconds": r.wall, "ops_per_s": count / r.wall, "gib_per_s": count * size / GIB / r.wall,
                                "seconds_all": [round(x.wall, 3) for x in runs], "cpu_s": r.cpu,
                                "cmd": " ".join(cmd).replace(SECRET_KEY, "***"),
                                "note": "%.3f s wall, %.2f CPU-s; process wall incl. start-up" % (r.wall, r.cpu)}
                    scenario(R, "bulk.%s.%s.%s" % (tag, direction, tool), group,
                             "%s %s: %s" % (tag, direction, tool), "sluice" if tool == "sluice" else "baseline", body)

        key = "bulk-object-1g"
        try:
            self.object(key, GIB, nginx_copy=False)
        except Exception as e:  # noqa: BLE001
            R.add({"id": "bulkbig.setup", "group": group, "label": "1 GiB setup", "kind": "setup", "status": "error",
                   "error": tail(str(e))})
            return
        scenario(R, "bulkbig.library", group, "1 GiB: library GET into memory (http)", "baseline",
                 lambda: self.bench("get", key, GIB, via="http", repeat=rep))

        def cp_big(cli=self.cli):
            target = os.path.join(self.work, "bulk-cp-1g")
            cmd = [cli, "cp", "s3://%s/%s" % (BUCKET, key), target] + sluice_auth
            try:
                return self.external(cmd, GIB, rep, self.server.proc.pid,
                                     lambda r: None if os.path.getsize(target) == GIB else
                                     (_ for _ in ()).throw(RuntimeError("wrong size")),
                                     note="`sluice cp` to a file on the work directory's filesystem")
            finally:
                if os.path.exists(target):
                    os.unlink(target)
        scenario(R, "bulkbig.cp", group, "1 GiB: `sluice cp` to a file", "sluice", cp_big)
        if self.args.baseline_cli:  # another build's `cp` against the same server, in the same run
            scenario(R, "bulkbig.cp.baseline_cli", group, "1 GiB: `sluice cp` to a file, %s" % self.args.baseline_cli,
                     "baseline", lambda: cp_big(self.args.baseline_cli))

        def fresh_file():
            target = os.path.join(self.work, "bulk-dd-1g")
            cmd = ["dd", "if=/dev/zero", "of=" + target, "bs=8M", "count=128"]
            try:
                return self.external(cmd, GIB, rep, None, lambda r: None,
                                     note="no network: what writing a fresh 1 GiB file costs here (its pages)")
            finally:
                if os.path.exists(target):
                    os.unlink(target)
        scenario(R, "bulkbig.dd", group, "1 GiB: dd to a fresh file (no network)", "ceiling", fresh_file)

    def part_sweep(self):
        group = "Part size × parts in flight (sluice rdma shm GET 1 GiB)"
        key, size = "object-1g", GIB
        if key not in self.objects:
            return
        parts = [8 * MIB, 64 * MIB] if self.quick else [8 * MIB, 32 * MIB, 64 * MIB]
        flights = [1, 16] if self.quick else [1, 4, 16]
        rep = 1 if self.quick else 2
        log("== %s: %s × %s, %d run%s each" % (group, "/".join(size_name(p) for p in parts),
                                               "/".join(map(str, flights)), rep, "s" if rep > 1 else ""))
        # The client takes parts of 5 MiB and more (S3's rule): try 1 MiB once, and say what it said.
        try:
            self.bench("get", key, size, via="rdma", fabric="shm", part_size=MIB, parts_in_flight=4, repeat=1)
            parts = [MIB] + parts
        except Exception as e:  # noqa: BLE001 - recorded
            self.results.add({"id": "parts.1MiB", "group": group, "label": "1 MiB parts", "kind": "sweep",
                              "status": "not run", "error": "refused by the client (S3 parts are ≥ 5 MiB): " + tail(str(e))})
        for p in parts:
            for n in flights:
                scenario(self.results, "parts.%d.%d" % (p // MIB, n), group,
                         "%s parts × %d in flight" % (size_name(p), n), "sweep",
                         lambda p=p, n=n: dict(self.bench("get", key, size, via="rdma", fabric="shm", part_size=p,
                                                          parts_in_flight=n, repeat=rep), sweep_part=p, sweep_flight=n))

    def large_put(self):
        size = GIB
        group = "Large PUT 1 GiB"
        rep = 1 if self.quick else 3
        log("== %s (%d run%s each, median)" % (group, rep, "s" if rep > 1 else ""))
        R = self.results
        try:  # the file `sluice put` and curl -T send (large_get makes it too: once)
            self.object("object-1g", size)
        except Exception as e:  # noqa: BLE001
            R.add({"id": "put.setup", "group": group, "label": "source setup", "kind": "setup",
                   "status": "error", "error": tail(str(e))})
            return

        def put(**kw):
            r = self.bench("put", "put-1g", size, repeat=rep, **kw)
            r["note"] += "; server CPU includes the untimed verifying read-back"
            return r
        scenario(R, "put.rdma_shm", group, "sluice rdma (shm)", "sluice", lambda: put(via="rdma", fabric="shm"))
        scenario(R, "put.http", group, "sluice http", "sluice", lambda: put(via="http"))
        scenario(R, "put.cli_file", group, "`sluice put` of a file (tmpfs), http", "sluice",
                 lambda: self.cli_transfer("put", "object-1g", size, rep))

        def curl_upload():
            self.tool("curl")
            source = os.path.join(self.www, BUCKET, "object-1g")
            if not os.path.exists(source):
                raise NotRun("no 1 GiB source file (the GET setup failed)")
            cmd = self.curl_sign + ["-T", source, "-o", "/dev/null", "-w", "%{http_code}",
                                    "%s/%s/put-curl-1g" % (self.server.url, BUCKET)]

            def check(r):
                if r.stdout.strip() != "200":
                    raise RuntimeError("HTTP %s" % r.stdout.strip())
            return self.external(cmd, size, rep, self.server.proc.pid, check,
                                 note="curl -T, SigV4 with UNSIGNED-PAYLOAD; process wall and CPU")
        scenario(R, "put.curl", group, "curl -T → sluice serve", "baseline", curl_upload)

    def listing(self):
        """ListObjectsV2 over a prefix of many 1-byte objects (pages of 1,000), then a HEAD of each
        key, beside the same run's 4 KiB GET rate (the small-objects group)."""
        group = "Listing (ListObjectsV2 pages of 1,000, then HEAD of each key)"
        count = 10000 if self.quick else 100000
        log("== %s: %d keys" % (group, count))
        R = self.results
        measured = {}

        def s3_bench(op, timeout):
            self.need(self.s3_bench)
            cmd = [self.s3_bench, "--endpoint", self.server.url, "--bucket", BUCKET, "--key", "list/", "--op", op,
                   "--count", str(count), "--threads", "8", "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY]
            cpu0 = proc_cpu_seconds(self.server.proc.pid)
            r = run_measured(cmd, timeout)
            server_cpu = proc_cpu_seconds(self.server.proc.pid) - cpu0
            line = next((x for x in reversed(r.stdout.splitlines()) if x.strip().startswith("{")), None)
            if r.timed_out or r.rc != 0 or line is None:
                raise RuntimeError("%s: exit %d%s: %s" % (op, r.rc, " (timed out)" if r.timed_out else "",
                                                         tail(r.stderr or r.stdout)))
            return json.loads(line), server_cpu, r

        def fill():
            data, server_cpu, r = s3_bench("fill", 1800)
            measured["filled"] = True
            return {"ops_per_s": data["keys_per_s"], "seconds": data["seconds"], "p50_ms": None, "p99_ms": None,
                    "server_cpu_us_per_op": server_cpu / count * 1e6, "peak_rss_bytes": r.maxrss,
                    "note": "%d PUTs of 1 byte, 8 threads (sluice_s3_bench --op fill)" % count}

        def listing():
            if not measured.get("filled"):
                raise NotRun("the fill did not run")
            data, server_cpu, r = s3_bench("list", 1800)
            if not data.get("verified"):
                raise RuntimeError("the listing did not return the keys in order: %s" % data)
            measured["head"] = {"ops_per_s": data["head_keys_per_s"], "seconds": data["head_seconds"],
                                "p50_ms": None, "p99_ms": None, "peak_rss_bytes": r.maxrss,
                                "note": "HEAD of each of the %d keys, 8 threads" % count}
            return {"ops_per_s": data["list_keys_per_s"], "seconds": data["list_seconds"], "p50_ms": None,
                    "p99_ms": None, "peak_rss_bytes": r.maxrss,
                    "note": "%d pages; every key checked, in order; server CPU of LIST and HEADs together: %.0f µs/key"
                            % (data["pages"], server_cpu / count * 1e6)}

        def heads():
            if "head" not in measured:
                raise NotRun("the listing did not run")
            return measured["head"]
        scenario(R, "list.fill", group, "PUT 1-byte objects (keys/s)", "sluice", fill)
        scenario(R, "list.v2", group, "ListObjectsV2 (keys/s)", "sluice", listing)
        scenario(R, "list.head", group, "HEAD of each key (keys/s)", "sluice", heads)

    def small_objects(self):
        group = "Small objects (wrk)"
        duration = 2 if self.quick else 5
        log("== %s: wrk -t2 -c16 -d%ds --latency, presigned GET on sluice serve vs nginx" % (group, duration))
        for size, tag in ((4 * KIB, "4k"), (64 * KIB, "64k")):
            key = "small-" + tag
            ready = {}

            def prepare(key=key, size=size):
                if "url" in ready:
                    return ready
                self.tool("wrk")
                self.tool("curl")
                try:
                    import boto3
                    from botocore.config import Config
                except ImportError as e:
                    raise NotRun("boto3 is missing (python3-boto3): %s" % e)
                path = os.path.join(self.www, BUCKET, key)
                data = os.urandom(size)
                with open(path, "wb") as f:
                    f.write(data)
                self.curl_put(key, path)
                s3 = boto3.client("s3", endpoint_url=self.server.url, aws_access_key_id=ACCESS_KEY,
                                  aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
                                  config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
                url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": key}, ExpiresIn=3600)
                with urllib.request.urlopen(url, timeout=10) as response:
                    if response.read() != data:
                        raise RuntimeError("the presigned GET did not return the object")
                ready["url"] = url
                return ready

            def sluice_wrk(size=size, prepare=prepare):
                return self.wrk(prepare()["url"], size, duration, self.server.proc.pid,
                                "presigned URL (SigV4 query auth checked per request)",
                                os.path.join(self.www, BUCKET, key))

            def nginx_wrk(key=key, size=size, prepare=prepare):
                self.need_nginx()
                prepare()
                return self.wrk("%s/%s/%s" % (self.nginx.url, BUCKET, key), size, duration, self.nginx.proc.pid,
                                "static file, sendfile", os.path.join(self.www, BUCKET, key))
            scenario(self.results, "small.%s.sluice" % tag, group, "%s GET: sluice serve" % size_name(size), "sluice",
                     sluice_wrk)
            scenario(self.results, "small.%s.nginx" % tag, group, "%s GET: nginx" % size_name(size), "baseline",
                     nginx_wrk)

    def wrk(self, url, size, duration, server_pid, note, expected, threads=2, connections=16, prefix=(), headers=()):
        """wrk on url (with `headers`, "Name: value" each); every response's status and body checked
        against the file `expected`."""
        wrk = self.tool("wrk")
        script = os.path.join(self.work, "wrk-verify.lua")
        if not os.path.exists(script):
            with open(script, "w") as f:
                f.write(WRK_VERIFY)
        cmd = list(prefix) + [wrk, "-t%d" % threads, "-c%d" % connections, "-d%ds" % duration, "--latency", "-s", script]
        for header in headers:
            cmd += ["-H", header]
        cmd += [url, "--", expected]
        cpu0 = proc_cpu_seconds(server_pid)
        r = run_measured(cmd, duration + 60)
        server_cpu = proc_cpu_seconds(server_pid) - cpu0
        if r.rc != 0 or r.timed_out:
            raise RuntimeError("wrk exit %d: %s" % (r.rc, tail(r.stderr or r.stdout)))
        text = r.stdout
        rps = re.search(r"Requests/sec:\s*([\d.]+)", text)
        lat = {p: re.search(r"^\s*%s%%\s+([\d.]+)(us|ms|s)\s*$" % p, text, re.M) for p in ("50", "99")}
        total = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", text)
        if not rps or not all(lat.values()) or not total:
            raise RuntimeError("cannot read wrk's output: " + tail(text))
        bad = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", text)
        if bad:
            raise RuntimeError("%s non-2xx responses of %s" % (bad.group(1), total.group(1)))
        verify = re.search(r"^verify: (\d+) bad of (\d+)$", text, re.M)
        if not verify or verify.group(1) != "0":
            raise RuntimeError("responses not verified: %s" % (verify.group(0) if verify else tail(text)))
        errors = re.search(r"Socket errors: (.*)", text)

        def ms(m):
            return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
        requests = int(total.group(1))
        gib = requests * size / GIB
        return {"ops_per_s": float(rps.group(1)), "p50_ms": ms(lat["50"]), "p99_ms": ms(lat["99"]),
                "requests": requests, "gib_per_s": float(rps.group(1)) * size / GIB,
                "cpu_s_per_gib": r.cpu / gib if gib else None, "peak_rss_bytes": r.maxrss,
                "server_cpu_us_per_op": server_cpu / requests * 1e6 if requests else None,
                "server_cpu_s_per_gib": server_cpu / gib if gib else None,
                "cmd": " ".join(cmd[len(prefix) + 1:]).split("?")[0] + ("?X-Amz-…" if "?" in url else ""),
                "note": note + "; every response's status and body checked (%s)" % verify.group(0)
                        + ("; socket errors: " + errors.group(1) if errors else ""), "raw": text}

    def core_scaling(self):
        """4 KiB and 64 KiB presigned GETs with wrk against a `sluice serve` held to k cores (taskset,
        io_threads k), k = 1, 2, 4, ... up to the machine's cores, each beside nginx held to the same
        cores (k workers, sendfile, the same file and wrk); at k = 1 and 8 also a header-signed 4 KiB
        GET (SigV4 Authorization header, verified at every request). wrk runs -t k on the other cores
        when there are k of them, else beside the server. One server per k, on its own store."""
        group = "Core scaling (GET, wrk)"
        cores = os.cpu_count() or 1
        points = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= cores]
        sizes = (4 * KIB, 64 * KIB)
        duration = 2 if self.quick else 5
        taskset = shutil.which("taskset")
        log("== %s: server on %s core(s), %d s each" % (group, ", ".join(map(str, points)), duration))
        for k in points:
            staged = {}  # what the sluice point left for the others: server, files, URLs, wrk's cores

            def start(k=k, staged=staged):
                self.tool("wrk")
                self.tool("curl")
                if not taskset:
                    raise NotRun("taskset is missing (util-linux)")
                root = os.path.join(self.work, "scale-%d" % k)
                config = root + ".json"
                with open(config, "w") as f:
                    json.dump({"io_threads": k}, f)
                server = SluiceServer(self.cli, root, os.path.join(self.out, "logs"), name="sluice-serve-%dcore" % k,
                                      planes=["--fabric", "off", "--grant-socket", "off"], tls=k in TLS_POINTS,
                                      prefix=[taskset, "-c", "0-%d" % (k - 1)], extra=["--config", config]).start()
                staged["server"] = server
                self.put_signed(server.url, BUCKET, None)
                for size in sizes:
                    data = os.urandom(size)
                    path = "%s.%s" % (root, size_name(size).replace(" ", ""))
                    with open(path, "wb") as f:
                        f.write(data)
                    key = "small-%d" % size
                    self.put_signed(server.url, BUCKET, key, path)
                    url = self.presign(server.url, BUCKET, key)
                    with urllib.request.urlopen(url, timeout=10) as response:
                        if response.read() != data:
                            raise RuntimeError("the presigned GET did not return the object")
                    staged[size] = (path, url, key)
                if server.tls_port:  # the 4 KiB object over HTTPS (keep-alive), presigned for that endpoint
                    staged["https"] = self.presign("https://127.0.0.1:%d" % server.tls_port, BUCKET, staged[4 * KIB][2])
                pinned = cores - k >= k
                staged["prefix"] = [taskset, "-c", "%d-%d" % (k, cores - 1)] if pinned else []
                staged["where"] = "on cores %d-%d" % (k, cores - 1) if pinned else "beside it (unpinned)"

            def sluice_body(size, signed=False, https=False, k=k, staged=staged):
                if "server" not in staged:
                    start()
                path, url, key = staged[size]
                if https:
                    if "https" not in staged:
                        raise NotRun("sluice serve has no HTTPS listener (openssl missing?)")
                    url = staged["https"]
                headers = []
                if signed:  # one header-signed request, replayed: each is verified as a new one
                    url = "%s/%s/%s" % (staged["server"].url, BUCKET, key)
                    headers = self.signed_headers(url)
                entry = self.wrk(url, size, duration, staged["server"].proc.pid,
                                 "server: taskset -c 0-%d, io_threads %d; wrk -t%d -c%d %s%s%s" % (
                                     k - 1, k, k, max(16, 8 * k), staged["where"],
                                     "; header-signed (Authorization)" if signed else "; presigned",
                                     "; HTTPS (TLS 1.3, keep-alive)" if https else ""),
                                 path, threads=k, connections=max(16, 8 * k), prefix=staged["prefix"], headers=headers)
                return dict(entry, cores=k, size=size)

            def load_body(method, k=k, staged=staged):
                self.need(self.http_load)
                if "server" not in staged:
                    start()
                url = "%s/%s/%s" % (staged["server"].url, BUCKET, staged[4 * KIB][2])
                entry = self.load(url, method, self.signed_headers(url, method), duration, staged["server"].proc.pid,
                                  threads=k, connections=max(16, 8 * k), prefix=staged["prefix"], length=4 * KIB)
                return dict(entry, cores=k, size=4 * KIB, note="server: taskset -c 0-%d, io_threads %d; %s" % (
                    k - 1, k, staged["where"]))

            def nginx_body(size, https=False, k=k, staged=staged):
                if not self.nginx:
                    raise NotRun(self.nginx_missing)
                if size not in staged:
                    raise NotRun("the sluice point did not run")
                server = staged["server"]
                if https and not server.tls_port:
                    raise NotRun("sluice serve has no HTTPS listener, so no certificate to share")
                path = staged[size][0]
                www = os.path.join(self.work, "scale-www-%d" % k)
                os.makedirs(os.path.join(www, BUCKET), exist_ok=True)
                shutil.copy(path, os.path.join(www, BUCKET, "small"))
                nginx = Nginx(self.nginx.binary, www, os.path.join(self.work, "nginx-%d" % k), workers=k,
                              command_prefix=[taskset, "-c", "0-%d" % (k - 1)],
                              tls=(server.tls_ca, server.tls_key) if https else None).start()
                try:
                    entry = self.wrk("%s/%s/small" % (nginx.tls_url if https else nginx.url, BUCKET), size, duration,
                                     nginx.proc.pid, "nginx: taskset -c 0-%d, %d worker%s, sendfile; wrk -t%d -c%d %s%s" % (
                                         k - 1, k, "s" if k > 1 else "", k, max(16, 8 * k), staged["where"],
                                         "; HTTPS (TLS 1.3, keep-alive, same certificate)" if https else ""),
                                     path, threads=k, connections=max(16, 8 * k), prefix=staged["prefix"])
                    return dict(entry, cores=k, size=size)  # server CPU: the master and its workers
                finally:
                    nginx.stop()
            cores_text = "%d core%s" % (k, "s" if k > 1 else "")
            try:
                for size in sizes:
                    tag = "" if size == 4 * KIB else ".%s" % size_name(size).replace(" ", "").lower()
                    scenario(self.results, "scale.%d%s" % (k, tag), group, "%s GET, server on %s" % (
                        size_name(size), cores_text), "sluice" if k > 1 or tag else "baseline",
                             lambda size=size: sluice_body(size))
                    scenario(self.results, "scale.%d%s.nginx" % (k, tag), group, "%s GET, nginx on %s" % (
                        size_name(size), cores_text), "baseline", lambda size=size: nginx_body(size))
                if k in TLS_POINTS:
                    scenario(self.results, "scale.%d.https" % k, group, "4 KiB GET over HTTPS, server on %s" % (
                        cores_text), "sluice", lambda: sluice_body(4 * KIB, https=True))
                    scenario(self.results, "scale.%d.https.nginx" % k, group, "4 KiB GET over HTTPS, nginx on %s" % (
                        cores_text), "baseline", lambda: nginx_body(4 * KIB, https=True))
                if k in (1, 8):
                    scenario(self.results, "scale.%d.signed" % k, group, "4 KiB GET header-signed, server on %s" % (
                        cores_text), "sluice", lambda: sluice_body(4 * KIB, signed=True))
                    for method in ("GET", "HEAD"):  # wrk cannot drive a HEAD: both from sluice_http_load
                        scenario(self.results, "scale.%d.load.%s" % (k, method.lower()), group,
                                 "4 KiB %s header-signed (sluice_http_load), server on %s" % (method, cores_text),
                                 "sluice", lambda method=method: load_body(method))
            finally:
                if "server" in staged:
                    staged["server"].stop()

    def put_signed(self, endpoint, bucket, key, path=None):
        """A signed PUT with curl: the bucket (key None), or the object from `path`."""
        target = "%s/%s" % (endpoint, bucket) + ("/%s" % key if key else "")
        extra = ["-T", path] if path else ["-X", "PUT"]
        r = subprocess.run(self.curl_sign + extra + ["-o", "/dev/null", "-w", "%{http_code}", target],
                           capture_output=True, text=True, timeout=60)
        if r.stdout.strip() != "200":
            raise RuntimeError("PUT %s: HTTP %s %s" % (target, r.stdout.strip(), r.stderr.strip()))

    def presign(self, endpoint, bucket, key):
        r = subprocess.run([self.cli, "presign", "s3://%s/%s" % (bucket, key), "--endpoint", endpoint,
                            "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY], capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError("sluice presign: " + tail(r.stderr))
        return r.stdout.strip()

    def load(self, url, method, headers, duration, server_pid, threads, connections, prefix, length):
        """sluice_http_load: keep-alive requests of `method` on url; every answer's status and
        Content-Length checked."""
        m = re.match(r"^http://([\d.]+):(\d+)(/.*)$", url)
        cmd = list(prefix) + [self.http_load, m.group(1), m.group(2), m.group(3), "--method", method,
                              "--threads", str(threads), "--connections", str(connections), "--seconds",
                              str(duration), "--length", str(length)]
        for header in headers:
            cmd += ["--header", header]
        cpu0 = proc_cpu_seconds(server_pid)
        r = run_measured(cmd, duration + 60)
        server_cpu = proc_cpu_seconds(server_pid) - cpu0
        out = re.search(r"requests=(\d+) seconds=([\d.]+) rate=([\d.]+) bad=(\d+) p50_us=(\d+) p99_us=(\d+)",
                        r.stdout)
        if r.rc != 0 or r.timed_out or not out:
            raise RuntimeError("sluice_http_load exit %d: %s" % (r.rc, tail(r.stderr or r.stdout)))
        requests = int(out.group(1))
        return {"ops_per_s": float(out.group(3)), "p50_ms": int(out.group(5)) / 1000.0,
                "p99_ms": int(out.group(6)) / 1000.0, "requests": requests, "peak_rss_bytes": r.maxrss,
                "server_cpu_us_per_op": server_cpu / requests * 1e6 if requests else None,
                "cmd": " ".join(cmd[len(prefix):][:12]), "raw": r.stdout}

    def signed_headers(self, url, method="GET"):
        """The SigV4 headers curl signs a request of `url` with ("Name: value" each), after checking
        that the server accepts them: wrk replays them (valid for the 15 minutes of SigV4's skew)."""
        how = ["-I"] if method == "HEAD" else []
        r = subprocess.run(self.curl_sign + how + ["-v", "-o", "/dev/null", "-w", "%{http_code}", url],
                           capture_output=True, text=True, timeout=60)
        if r.stdout.strip() != "200":
            raise RuntimeError("signed GET %s: HTTP %s" % (url, r.stdout.strip()))
        headers = []
        for line in r.stderr.splitlines():
            m = re.match(r"^> (authorization|x-amz-date|x-amz-content-sha256):\s*(.*?)\s*$", line, re.I)
            if m:
                headers.append("%s: %s" % (m.group(1), m.group(2)))
        if len(headers) != 3:
            raise RuntimeError("cannot read curl's signed headers: %s" % headers)
        return headers

    def size_sweep(self):
        group = "Size sweep (GET)"
        sizes = [s for s in (4 * KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB, GIB, 4 * GIB) if s <= self.args.sweep_max]
        if self.quick:
            sizes = [s for s in sizes if s != 64 * KIB and s != 4 * GIB] or sizes
        log("== %s: %s; sluice rdma shm and http; 1 GiB from the large GET" % (
            group, ", ".join(size_name(s) for s in sizes)))

        def repeat(size):
            if size <= MIB:
                return 10 if self.quick else 20
            if size <= 16 * MIB:
                return 5 if self.quick else 10
            if size <= 256 * MIB:
                return 2 if self.quick else 3
            return 1 if self.quick else 2
        for size in sizes:
            for via, fabric, base in (("rdma", "shm", "get.rdma_shm"), ("http", None, "get.http")):
                sid = "size.%s.%d" % (via, size)
                label = "%s %s" % ("sluice rdma (shm)" if via == "rdma" else "sluice http", size_name(size))
                if size == GIB and base in self.results.by_id:
                    entry = dict(self.results.by_id[base], id=sid, group=group, label=label, kind="sweep",
                                 size=size, note="the large GET's run")
                    self.results.add(entry)
                    continue

                def body(size=size, via=via, fabric=fabric):
                    self.need(self.s3_bench)
                    key = self.object("sweep-%d" % size, size, nginx_copy=False) if size != GIB else \
                        self.object("object-1g", size)
                    return dict(self.bench("get", key, size, via=via, fabric=fabric, repeat=repeat(size)), size=size)
                scenario(self.results, sid, group, label, "sweep", body)

    # -- ratios and targets -----------------------------------------------------------------
    RATIOS = [  # (numerator, denominator, label); the first one with a row as numerator is its "vs" cell
        ("get.rdma_shm", "get.http", "sluice rdma shm ÷ sluice http"),
        ("get.grant_memfd", "get.http", "sluice grant (memfd) ÷ sluice http"),
        ("get.rdma_tcp", "get.http", "sluice rdma tcp ÷ sluice http"),
        ("get.http", "get.nginx", "sluice http ÷ nginx (same client)"),
        ("get.curl_sluice", "get.curl_nginx", "curl: sluice serve ÷ nginx"),
        ("get.aws", "get.http", "AWS CLI ÷ sluice http (both → sluice serve)"),
        ("get.http", "get.curl_sluice", "sluice client ÷ curl (both http → sluice serve)"),
        ("get.rdma_shm", "ceil.fi_rma_shm", "sluice rdma shm ÷ RMA write ceiling (shm)"),
        ("get.rdma_shm", "ceil.memcpy", "sluice rdma shm ÷ memcpy ceiling"),
        ("get.rdma_tcp", "ceil.fi_rma_tcp", "sluice rdma tcp ÷ RMA write ceiling (tcp)"),
        ("get.http", "ceil.tcp", "sluice http ÷ loopback TCP ceiling"),
        ("get.nginx", "ceil.tcp", "nginx ÷ loopback TCP ceiling"),
        ("put.rdma_shm", "put.http", "PUT sluice rdma shm ÷ sluice http"),
        ("get.curl_sluice_https", "get.curl_sluice", "GET curl https ÷ curl http (sluice serve)"),
        ("get.curl_nginx_https", "get.curl_nginx", "GET curl https ÷ curl http (nginx)"),
        ("get.curl_sluice_https", "get.curl_nginx_https", "GET curl https: sluice serve ÷ nginx"),
        ("put.http", "put.curl", "PUT sluice http ÷ curl -T"),
        ("get.cli_file", "get.http", "`sluice get` to a file ÷ library GET into memory (http)"),
        ("bulkbig.cp", "bulkbig.library", "`sluice cp` 1 GiB to a file ÷ library GET into memory (http)"),
        ("put.cli_file", "put.http", "`sluice put` of a file ÷ library PUT from memory (http)"),
        ("small.4k.sluice", "small.4k.nginx", "4 KiB ops/s sluice ÷ nginx"),
        ("small.64k.sluice", "small.64k.nginx", "64 KiB ops/s sluice ÷ nginx"),
        ("list.v2", "small.4k.sluice", "LIST keys/s ÷ 4 KiB GET ops/s (sluice)"),
        ("list.head", "small.4k.sluice", "HEAD keys/s ÷ 4 KiB GET ops/s (sluice)"),
        ("gw.hit_rdma_shm", "gw.local_rdma_shm", "gateway hit ÷ local store, rdma shm"),
        ("gw.hit_grant", "gw.local_grant", "gateway hit ÷ local store, memfd grant"),
        ("gw.hit_http", "gw.local_http", "gateway hit ÷ local store, http"),
        ("gwrgw.miss_http", "gwrgw.miss_http.rgw", "gateway miss ÷ Ceph RGW's own GET beside each run"),
        ("gwrgw.miss_http_huge", "gwrgw.miss_http_huge.rgw",
         "gateway miss, cache on 2 MiB pages ÷ Ceph RGW's own GET beside each run"),
        ("gwrgw.hit_http", "gwrgw.local_http", "gateway hit (RGW upstream) ÷ local store, http"),
        ("gwrgw.hit_http_trusted", "gwrgw.local_http",
         "gateway hit (RGW upstream, --revalidate-after 60) ÷ local store, http"),
        ("gwrgw.hit_rdma_shm", "gwrgw.local_rdma_shm", "gateway hit (RGW upstream) ÷ local store, rdma shm"),
        ("gwrgw.fleet.2.miss", "gwrgw.fleet.1.miss", "2 gateways' aggregate misses ÷ 1 gateway's (RGW upstream)"),
        ("gwrgw.fleet.4.miss", "gwrgw.fleet.1.miss", "4 gateways' aggregate misses ÷ 1 gateway's (RGW upstream)"),
        ("gwrgw.fleet.2.hit", "gwrgw.fleet.1.hit", "2 gateways' aggregate hits ÷ 1 gateway's (RGW upstream)"),
        ("gwrgw.fleet.4.hit", "gwrgw.fleet.1.hit", "4 gateways' aggregate hits ÷ 1 gateway's (RGW upstream)"),
    ] + [(sid, sid + ".upstream", what + " ÷ upstream's own http GET beside each run")
         for sid, what in GATEWAY_MISSES] + [
        (sid, "gw.upstream_http", what + " ÷ upstream's own http GET, measured once (3 warm GETs)")
        for sid, what in GATEWAY_MISSES] + [
        ("scale.%d" % k, "scale.%d.nginx" % k, "4 KiB ops/s on %d core%s: sluice ÷ nginx" % (k, "s" if k > 1 else ""))
        for k in (1, 2, 4, 8, 16, 32, 64)] + [
        ("scale.%d" % k, "scale.1", "4 KiB ops/s, server on %d cores ÷ on 1" % k) for k in (2, 4, 8, 16, 32, 64)] + [
        ("scale.%d.nginx" % k, "scale.1.nginx", "4 KiB ops/s, nginx on %d cores ÷ on 1" % k) for k in (2, 4, 8, 16, 32, 64)
    ] + [
        ("scale.%d.64kib" % k, "scale.%d.64kib.nginx" % k, "64 KiB ops/s on %d core%s: sluice ÷ nginx" % (
            k, "s" if k > 1 else "")) for k in (1, 2, 4, 8, 16, 32, 64)] + [
        ("scale.%d.signed" % k, "scale.%d" % k, "4 KiB ops/s on %d core%s: header-signed ÷ presigned" % (
            k, "s" if k > 1 else "")) for k in (1, 8)] + [
        ("scale.%d.https" % k, "scale.%d.https.nginx" % k, "4 KiB ops/s over HTTPS on %d core%s: sluice ÷ nginx" % (
            k, "s" if k > 1 else "")) for k in TLS_POINTS] + [
        ("scale.%d.load.head" % k, "scale.%d.load.get" % k, "4 KiB ops/s on %d core%s: HEAD ÷ GET (sluice_http_load)" % (
            k, "s" if k > 1 else "")) for k in (1, 8)]

    def gateway(self):
        """`sluice serve --upstream` (gateway_store) in front of a second `sluice serve`: cache hits
        by the fast paths against the same GET from the local store, and misses against the
        upstream's own HTTP GET, all with sluice_s3_bench, in this run."""
        size = GIB
        group = "Gateway GET 1 GiB"
        rep = 1 if self.quick else 3
        miss_rounds = 1 if self.quick else 5
        log("== %s (%d run%s each, median; misses %d)" % (group, rep, "s" if rep > 1 else "", miss_rounds))
        R = self.results
        key = "object-1g"
        logs = os.path.join(self.out, "logs")
        upstream = gateway = None
        try:
            self.object(key, size, nginx_copy=False)
            upstream = SluiceServer(self.cli, os.path.join(self.work, "upstream"), logs, name="upstream",
                                    planes=["--fabric", "off", "--grant-socket", "off"], tls=False).start()
            if not self.curl_sign:
                raise NotRun("curl is not installed (it creates the upstream's bucket)")
            made = subprocess.run(self.curl_sign + ["-X", "PUT", "-o", "/dev/null", "-w", "%{http_code}",
                                                    "%s/%s" % (upstream.url, BUCKET)], capture_output=True, text=True)
            if made.stdout.strip() != "200":
                raise RuntimeError("the upstream's bucket: HTTP %s %s" % (made.stdout.strip(), tail(made.stderr)))
            self.bench(op="put", key=key, size=size, via="http", endpoint=upstream.url, server=upstream, timeout=600)
        except Exception as e:  # noqa: BLE001
            R.add({"id": "gw.setup", "group": group, "label": "upstream setup", "kind": "setup", "status": "error",
                   "error": tail(str(e))})
            return
        cache = os.path.join(self.work, "gateway")
        # The cache on a tmpfs with 2 MiB pages (docs/gateway.md, "Where to put the cache"), mounted
        # here when this runs as root; its rows say why not otherwise.
        huge_cache = os.path.join(self.work, "gateway-huge")
        huge_why = self.huge_tmpfs(huge_cache, 4 * size)

        def fresh_gateway(root=cache):
            nonlocal gateway
            if gateway:
                gateway.stop()
            # Emptied (a mount point stays): every GET of it is a miss until one fetched it.
            for name in os.listdir(root) if os.path.isdir(root) else ():
                path = os.path.join(root, name)
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
            gateway = SluiceServer(self.cli, root, logs, name="gateway", tls=False,
                                   extra=["--upstream", upstream.url, "--upstream-access-key", ACCESS_KEY,
                                          "--upstream-secret-key", SECRET_KEY, "--cache-bytes", "4 GiB"]).start()
            return gateway

        # A miss can be measured once per new gateway, so each of its runs is one GET by a new client
        # process. Its baseline is taken the same way, just before each run: one GET of the
        # upstream's own by a new client process. The host's HTTP rate drifts by ±15 % over a run
        # (docs/history/performance-2026-11.md); a baseline measured once, minutes earlier, moved the ratio with it.
        paired = {}

        def miss(sid, via, fabric=None, root=cache):
            if root == huge_cache and huge_why:
                raise NotRun(huge_why)
            runs, bases = [], []
            for _ in range(miss_rounds):
                bases.append(self.bench("get", key, size, via="http", endpoint=upstream.url, server=upstream,
                                        repeat=1))
                gw = fresh_gateway(root)
                # One timed GET per new cache (sluice_s3_bench's untimed first request is 4 KiB
                # ranged, which a gateway passes through without caching the object).
                runs.append(self.bench("get", key, size, via=via, fabric=fabric, endpoint=gw.url, server=gw,
                                       repeat=1))
            pairs = ", ".join("%.2f/%.2f" % (r["gib_per_s"] or 0, b["gib_per_s"] or 0) for r, b in zip(runs, bases))
            paired[sid] = median_run(bases, "one GET by a new client just before each run of %s (median of %d)"
                                     % (sid, miss_rounds))
            return median_run(runs, "each run a new, empty cache (median of %d); GiB/s run/baseline: %s"
                              % (miss_rounds, pairs))

        def paired_baseline(sid):
            if sid not in paired:
                raise NotRun("%s did not run" % sid)
            return paired[sid]

        scenario(R, "gw.upstream_http", group, "upstream's own HTTP GET (sluice client → upstream)", "baseline",
                 lambda: self.bench("get", key, size, via="http", repeat=rep, endpoint=upstream.url, server=upstream))
        for sid, label, via, fabric, root in (
                ("gw.miss_http", "gateway miss, http", "http", None, cache),
                ("gw.miss_rdma_shm", "gateway miss, rdma (shm)", "rdma", "shm", cache),
                ("gw.miss_http_huge", "gateway miss, http, cache on tmpfs huge=within_size", "http", None, huge_cache),
                ("gw.miss_rdma_shm_huge", "gateway miss, rdma (shm), cache on tmpfs huge=within_size", "rdma", "shm",
                 huge_cache)):
            scenario(R, sid, group, label, "sluice",
                     lambda sid=sid, via=via, fabric=fabric, root=root: miss(sid, via, fabric, root))
            scenario(R, sid + ".upstream", group, "upstream's own HTTP GET beside each run of: " + label, "baseline",
                     lambda sid=sid: paired_baseline(sid))
        if gateway:
            gateway.stop()
            gateway = None

        def hit(grant=False, **kw):
            gw = gateway or fresh_gateway()
            self.bench("get", key, size, via="http", endpoint=gw.url, server=gw)  # fetched: later GETs are hits
            extra = ["--grant-socket", gw.grant_socket] if grant else []
            return self.bench("get", key, size, repeat=rep, endpoint=gw.url, server=gw, extra=extra, **kw)
        scenario(R, "gw.local_rdma_shm", group, "local fs_store, rdma (shm)", "baseline",
                 lambda: self.bench("get", key, size, via="rdma", fabric="shm", repeat=rep))
        scenario(R, "gw.hit_rdma_shm", group, "gateway hit, rdma (shm)", "sluice", lambda: hit(via="rdma", fabric="shm"))
        scenario(R, "gw.local_grant", group, "local fs_store, same-host grant (memfd)", "baseline",
                 lambda: self.bench("get", key, size, repeat=rep, extra=["--grant-socket", self.server.grant_socket]))
        scenario(R, "gw.hit_grant", group, "gateway hit, same-host grant (memfd)", "sluice",
                 lambda: hit(grant=True))
        scenario(R, "gw.local_http", group, "local fs_store, http", "baseline",
                 lambda: self.bench("get", key, size, via="http", repeat=rep))
        scenario(R, "gw.hit_http", group, "gateway hit, http", "sluice", lambda: hit(via="http"))
        for server in (gateway, upstream):
            if server:
                server.stop()
        shutil.rmtree(cache, ignore_errors=True)
        if huge_why is None:
            subprocess.run(["umount", huge_cache], capture_output=True)
        shutil.rmtree(os.path.join(self.work, "upstream"), ignore_errors=True)

    @staticmethod
    def huge_tmpfs(path, size):
        """Mounts a tmpfs with 2 MiB pages (huge=within_size) of `size` bytes at `path`, unmounted at
        exit; None, or why it cannot be mounted here (not root, say)."""
        os.makedirs(path, exist_ok=True)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d,huge=within_size" % size, "tmpfs", path],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            return "cannot mount a tmpfs with huge=within_size here: " + tail(mounted.stderr.strip() or "not root")
        on_cleanup(lambda: subprocess.run(["umount", path], capture_output=True))
        return None

    def gateway_rgw(self):
        """The gateway in front of a real Ceph RGW (tests/ceph/rgw_fixture.py: mon, mgr, a memstore
        OSD and radosgw on loopback): a miss against RGW's own GET of the same object by a new
        client just before each run (each run a new gateway, its cache empty), a hit against the
        same GET from the local store, and N gateways (1, 2, 4), each with its own cache, reading
        one shared set of objects from RGW at once: their misses, then their hits."""
        size = (64 if self.quick else 256) * MIB
        group = "Gateway GET %s in front of Ceph RGW" % size_name(size)
        rounds = 1 if self.quick else 3
        rep = 1 if self.quick else 3
        R = self.results
        key = "rgw-object"
        fleet_keys = ["rgw-fleet-%d" % i for i in range(4)]
        logs = os.path.join(self.out, "logs")
        fixture = os.path.join(REPO, "tests", "ceph", "rgw_fixture.py")
        state_path = os.path.join(self.work, "rgw.json")
        log("== %s (misses %d rounds, hits %d runs; fleet of 1, 2, 4 gateways)" % (group, rounds, rep))
        up = subprocess.run([sys.executable, fixture, "up", "--state", state_path, "--dir",
                             os.path.join(self.work, "ceph")], capture_output=True, text=True, timeout=240)
        if up.returncode != 0:
            status = "not run" if up.returncode == 77 else "error"
            R.add({"id": "gwrgw.setup", "group": group, "label": "Ceph RGW", "kind": "setup", "status": status,
                   "error": tail(up.stdout.strip() + " " + up.stderr.strip())})
            return
        on_cleanup(lambda: subprocess.run([sys.executable, fixture, "down", "--state", state_path],
                                          capture_output=True, timeout=120))
        with open(state_path) as fh:
            state = json.load(fh)
        rgw_keys = (state["access_key"], state["secret_key"])

        class Rgw:  # for bench(): the process whose CPU a run counts
            url = state["endpoint"]
            proc = type("pid", (), {"pid": state["pids"].get("client.rgw") or state["pids"].get("rgw")})()

        gateways = []

        def stop_gateways():
            for gw in gateways:
                gw.stop()
            gateways.clear()

        # The cache on a tmpfs with 2 MiB pages, as docs/gateway.md advises ("Where to put the cache"),
        # mounted here when this runs as root; its rows say why not otherwise.
        huge_cache = os.path.join(self.work, "gateway-rgw-huge")
        huge_why = self.huge_tmpfs(huge_cache, (rounds + 2) * size)  # a cache per miss round

        def new_gateway(name, more=(), under=None):
            root = os.path.join(under or self.work, name)
            shutil.rmtree(root, ignore_errors=True)
            gw = SluiceServer(self.cli, root, logs, name=name, tls=False,
                              planes=["--fabric", "shm", "--grant-socket", "off"],
                              extra=["--upstream", Rgw.url, "--upstream-access-key", rgw_keys[0],
                                     "--upstream-secret-key", rgw_keys[1], "--cache-bytes", "4 GiB"]
                              + list(more)).start()
            gateways.append(gw)
            return gw

        try:
            made = subprocess.run([self.cli, "mb", "s3://" + BUCKET, "--endpoint", Rgw.url, "--access-key",
                                   rgw_keys[0], "--secret-key", rgw_keys[1]], capture_output=True, text=True)
            if made.returncode != 0:
                raise RuntimeError("RGW's bucket: " + tail(made.stderr or made.stdout))
            for k, n in [(key, size)] + [(f, size // 2) for f in fleet_keys]:
                # Once: RGW keeps an overwritten object's data until its garbage collection (hours), and
                # the OSD holds 2 GiB in memory.
                self.bench("put", k, n, via="http", endpoint=Rgw.url, server=Rgw, keys=rgw_keys, timeout=600,
                           repeat=1)
            self.object(key, size, nginx_copy=False)  # the local store's copy (the hits' baseline)
        except Exception as e:  # noqa: BLE001
            R.add({"id": "gwrgw.setup", "group": group, "label": "RGW objects", "kind": "setup", "status": "error",
                   "error": tail(str(e))})
            return
        paired = {}
        ceph_pids = [p for p in state["pids"].values() if p]

        def ceph_cpu():
            """CPU seconds of the Ceph daemons (radosgw, its OSD, mon, mgr) so far."""
            return sum(proc_cpu_seconds(p) for p in ceph_pids)

        def miss(via, fabric=None, huge=False):
            if huge and huge_why:
                raise NotRun(huge_why)
            runs, bases, ceph = [], [], {"rgw": [], "miss": []}  # ceph: the daemons' CPU s/GiB of each GET
            for i in range(rounds):
                before = ceph_cpu()
                bases.append(self.bench("get", key, size, via="http", endpoint=Rgw.url, server=Rgw, keys=rgw_keys,
                                        repeat=1))
                ceph["rgw"].append((ceph_cpu() - before) / (size / GIB))
                stop_gateways()
                gw = new_gateway("gateway-rgw-%d" % i, under=huge_cache if huge else None)
                before = ceph_cpu()
                runs.append(self.bench("get", key, size, via=via, fabric=fabric, endpoint=gw.url, server=gw, repeat=1))
                ceph["miss"].append((ceph_cpu() - before) / (size / GIB))
            pairs = ", ".join("%.2f/%.2f" % (r["gib_per_s"] or 0, b["gib_per_s"] or 0) for r, b in zip(runs, bases))
            paired["gwrgw.miss_" + via + ("_huge" if huge else "")] = median_run(
                bases, "RGW's GET by a new client just before each gateway miss (median of %d); Ceph's CPU "
                "(radosgw, OSD, mon, mgr) per GiB: %s" % (rounds, ", ".join("%.2f" % c for c in ceph["rgw"])))
            return median_run(runs, "each run a new gateway, its cache empty (median of %d); GiB/s run/RGW: %s; "
                              "Ceph's CPU per GiB of each miss: %s"
                              % (rounds, pairs, ", ".join("%.2f" % c for c in ceph["miss"])))

        def hit(via, fabric=None, trusted=False):
            # trusted: --revalidate-after 60, so no GET (and no part of one) asks RGW's HEAD first.
            if trusted:
                stop_gateways()
            gw = gateways[-1] if gateways else new_gateway(
                "gateway-rgw-hit", ["--revalidate-after", "60"] if trusted else [])
            self.bench("get", key, size, via="http", endpoint=gw.url, server=gw)  # cached from here on
            return self.bench("get", key, size, via=via, fabric=fabric, repeat=rep, endpoint=gw.url, server=gw)

        def paired_baseline(sid):
            if sid not in paired:
                raise NotRun("%s did not run" % sid)
            return paired[sid]

        def fleet(n, passes=("miss", "hit")):
            # n gateways, caches empty; one client per gateway reads every fleet object, all at once.
            stop_gateways()
            gws = [new_gateway("gateway-fleet-%d" % i) for i in range(n)]
            out = {}
            for what in passes:
                errors, busy = [], {}  # busy: each client's seconds in its GETs (not its processes' starts)

                def client(gw):
                    try:
                        busy[gw.url] = sum(
                            self.bench("get", f, size // 2, via="http", endpoint=gw.url, server=gw, repeat=1)["seconds"]
                            for f in fleet_keys)
                    except Exception as e:  # noqa: BLE001
                        errors.append(str(e))
                threads = [threading.Thread(target=client, args=(gw,)) for gw in gws]
                t0 = time.monotonic()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                wall = time.monotonic() - t0
                if errors:
                    raise RuntimeError(tail(errors[0]))
                moved = n * len(fleet_keys) * (size // 2)
                per_client = sorted(len(fleet_keys) * (size // 2) / GIB / b for b in busy.values())
                out[what] = {"gib_per_s": moved / GIB / wall, "seconds": wall,
                             "note": "%d gateway%s × %d objects of %s, one client each, at once: all bytes ÷ the "
                                     "wall time (each client process's start included); each client in its GETs: "
                                     "%s GiB/s" % (n, "s" if n > 1 else "", len(fleet_keys), size_name(size // 2),
                                                   ", ".join("%.2f" % r for r in per_client))}
            stop_gateways()
            return out

        scenario(R, "gwrgw.miss_http", group, "gateway miss, http", "sluice", lambda: miss("http"))
        scenario(R, "gwrgw.miss_http.rgw", group, "RGW's own GET beside each miss", "baseline",
                 lambda: paired_baseline("gwrgw.miss_http"))
        scenario(R, "gwrgw.local_http", group, "local fs_store, http", "baseline",
                 lambda: self.bench("get", key, size, via="http", repeat=rep))
        scenario(R, "gwrgw.hit_http", group, "gateway hit, http", "sluice", lambda: hit("http"))
        scenario(R, "gwrgw.local_rdma_shm", group, "local fs_store, rdma (shm)", "baseline",
                 lambda: self.bench("get", key, size, via="rdma", fabric="shm", repeat=rep))
        scenario(R, "gwrgw.hit_rdma_shm", group, "gateway hit, rdma (shm)", "sluice", lambda: hit("rdma", "shm"))
        scenario(R, "gwrgw.hit_http_trusted", group, "gateway hit, http, --revalidate-after 60", "sluice",
                 lambda: hit("http", trusted=True))
        scenario(R, "gwrgw.miss_http_huge", group, "gateway miss, http, cache on tmpfs huge=within_size", "sluice",
                 lambda: miss("http", huge=True))
        scenario(R, "gwrgw.miss_http_huge.rgw", group, "RGW's own GET beside each miss (huge cache rows)",
                 "baseline", lambda: paired_baseline("gwrgw.miss_http_huge"))
        fleets = {}
        for n in (1, 2, 4):
            for what in ("miss", "hit"):
                def body(n=n, what=what):
                    if n not in fleets:
                        fleets[n] = fleet(n)
                    return fleets[n][what]
                scenario(R, "gwrgw.fleet.%d.%s" % (n, what), group,
                         "%d gateway%s, every object a %s (aggregate)" % (n, "s" if n > 1 else "", what), "sluice", body)
        stop_gateways()

    def ratios(self):
        out = []
        sizes = sorted({s["size"] for s in self.results.scenarios if s["id"].startswith("size.") and s.get("size")})
        extra = [("size.rdma.%d" % n, "size.http.%d" % n, "%s GET rdma shm ÷ http" % size_name(n)) for n in sizes]
        for num, den, label in self.RATIOS + extra:
            field = "ops_per_s" if num.startswith(("small.", "list.", "scale.", "bulk.")) else "gib_per_s"
            a, b = self.results.rate(num, field), self.results.rate(den, field)
            out.append({"numerator": num, "denominator": den, "label": label,
                        "value": a / b if a and b else None})
        return out

    def cpu_targets(self):
        def target(name, num, den, field, threshold):
            a, b = self.results.rate(num, field), self.results.rate(den, field)
            if a is None or b is None:
                missing = [self.results.by_id.get(x, {"label": x, "error": "not run"}) for x in (num, den)
                           if self.results.rate(x, field) is None]
                return {"target": name, "status": "not measured", "required": "≥ %.2f×" % threshold,
                        "measured": "; ".join("%s: %s" % (m["label"], m.get("error") or m.get("status"))
                                              for m in missing)}
            value = a / b
            unit = "ops/s" if field == "ops_per_s" else "GiB/s"
            return {"target": name, "ratio": value, "required": "≥ %.2f×" % threshold,
                    "measured": "%s (%.3g vs %.3g %s)" % (ratio(value), a, b, unit),
                    "status": "pass" if value >= threshold else "miss"}
        def at_most(name, sid, field, limit, unit):
            entry = self.results.by_id.get(sid)
            value = entry.get(field) if entry and entry["status"] == "ok" else None
            if value is None:
                return {"target": name, "status": "not measured", "required": "≤ %g %s" % (limit, unit),
                        "measured": (entry or {}).get("error") or "not run"}
            return {"target": name, "required": "≤ %g %s" % (limit, unit), "measured": "%.3g %s" % (value, unit),
                    "status": "pass" if value <= limit else "miss"}
        def p99(name, sid, base):
            a, b = self.results.rate(sid, "p99_ms"), self.results.rate(base, "p99_ms")
            if a is None or b is None:
                return {"target": name, "status": "not measured", "required": "≤ 2.00×", "measured": "not run"}
            return {"target": name, "ratio": a / b, "required": "≤ 2.00×",
                    "measured": "%s (%.3g vs %.3g ms)" % (ratio(a / b), a, b), "status": "pass" if a <= 2 * b else "miss"}
        return [
            at_most("CLI: `sluice --help` ≤ 20 ms (hyperfine mean)", "startup.help", "mean_ms", 20, "ms"),
            at_most("CLI: `sluice ls`, local server ≤ 30 ms (hyperfine mean)", "startup.ls", "mean_ms", 30, "ms"),
            target("CPU: GET 1 GiB rdma/shm ≥ 2 × sluice http", "get.rdma_shm", "get.http", "gib_per_s", 2.0),
            target("CPU: GET 1 GiB memfd grant ≥ 3 × sluice http", "get.grant_memfd", "get.http", "gib_per_s", 3.0),
            target("CPU: sluice http ≥ 1.0 × nginx (same client)", "get.http", "get.nginx", "gib_per_s", 1.0),
            target("CPU: 4 KiB GET ops/s ≥ 0.8 × nginx (wrk)", "small.4k.sluice", "small.4k.nginx", "ops_per_s", 0.8),
            target("CPU: 64 KiB GET ops/s ≥ 0.8 × nginx (wrk)", "small.64k.sluice", "small.64k.nginx", "ops_per_s",
                   0.8),
            at_most("CPU: server CPU per 4 KiB GET ≤ 40 µs", "small.4k.sluice", "server_cpu_us_per_op", 40, "µs"),
            p99("CPU: 4 KiB GET p99 ≤ 2 × nginx's", "small.4k.sluice", "small.4k.nginx"),
            p99("CPU: 64 KiB GET p99 ≤ 2 × nginx's", "small.64k.sluice", "small.64k.nginx"),
            target("CPU: 4 KiB GET ops/s, server on 2 cores ≥ 1.6 × on 1", "scale.2", "scale.1", "ops_per_s", 1.6),
        ] + [
            target("CPU: 4 KiB GET ops/s on %d core%s ≥ 0.5 × nginx on the same" % (k, "s" if k > 1 else ""),
                   "scale.%d" % k, "scale.%d.nginx" % k, "ops_per_s", 0.5) for k in (1, 2, 4, 8, 16)
        ] + [
            target("CPU: 4 KiB GET ops/s, server on 8 cores ≥ 6 × on 1", "scale.8", "scale.1", "ops_per_s", 6.0),
        ] + [
            target("CPU: 64 KiB GET ops/s on %d core%s ≥ 0.7 × nginx on the same" % (k, "s" if k > 1 else ""),
                   "scale.%d.64kib" % k, "scale.%d.64kib.nginx" % k, "ops_per_s", 0.7) for k in (1, 2, 4, 8, 16)
        ] + [
            p99("CPU: 4 KiB GET p99 on %d core%s ≤ 2 × nginx's" % (k, "s" if k > 1 else ""), "scale.%d" % k,
                "scale.%d.nginx" % k) for k in (1, 2, 4, 8, 16)
        ] + [
            target("CPU: header-signed 4 KiB GET on %d core%s ≥ 0.9 × presigned" % (k, "s" if k > 1 else ""),
                   "scale.%d.signed" % k, "scale.%d" % k, "ops_per_s", 0.9) for k in (1, 8)
        ] + [
            target("CPU: 4 KiB HEAD on %d core%s ≥ 1.0 × GET (same client, both header-signed)" % (
                k, "s" if k > 1 else ""), "scale.%d.load.head" % k, "scale.%d.load.get" % k, "ops_per_s", 1.0)
            for k in (1, 8)
        ] + [
            at_most("CPU: HTTP PUT server CPU ≤ 1.5 s/GiB (sluice client)", "put.http", "server_cpu_s_per_gib", 1.5,
                    "s/GiB"),
            at_most("CPU: curl -T PUT server CPU ≤ 1.5 s/GiB", "put.curl", "server_cpu_s_per_gib", 1.5, "s/GiB"),
            target("CPU: GET over HTTP with curl ≥ 1.0 × nginx", "get.curl_sluice", "get.curl_nginx", "gib_per_s", 1.0),
            target("CPU: GET 1 GiB over HTTPS with curl ≥ 0.7 × over HTTP (sluice serve)", "get.curl_sluice_https",
                   "get.curl_sluice", "gib_per_s", 0.7),
        ] + [
            target("CPU: 4 KiB GET over HTTPS on %d core%s ≥ 0.5 × nginx over HTTPS" % (k, "s" if k > 1 else ""),
                   "scale.%d.https" % k, "scale.%d.https.nginx" % k, "ops_per_s", 0.5) for k in TLS_POINTS
        ] + [
            target("CLI: `sluice get` to a file ≥ 0.8 × library GET into memory", "get.cli_file", "get.http",
                   "gib_per_s", 0.8),
        ] + [
            target("CLI: `sluice cp -r` %s %s wall ≤ 0.5 × AWS CLI's (≥ 2 × its files/s)" % (tag, d),
                   "bulk.%s.%s.sluice" % (tag, d), "bulk.%s.%s.aws" % (tag, d), "ops_per_s", 2.0)
            for tag in ("100x4KiB", "1000x64KiB") for d in ("up", "down")
        ] + [
            target("CLI: `sluice cp` of 1 GiB to a file ≥ 0.9 × library GET", "bulkbig.cp", "bulkbig.library",
                   "gib_per_s", 0.9),
            target("CLI: `sluice put` of a file ≥ 0.8 × library PUT", "put.cli_file", "put.http", "gib_per_s", 0.8),
            target("Gateway: hit GET 1 GiB rdma/shm ≥ 0.9 × local fs_store", "gw.hit_rdma_shm", "gw.local_rdma_shm",
                   "gib_per_s", 0.9),
            target("Gateway: hit GET 1 GiB memfd grant ≥ 0.9 × local fs_store", "gw.hit_grant", "gw.local_grant",
                   "gib_per_s", 0.9),
            target("Gateway over Ceph RGW: hit ≥ 0.9 × local fs_store (http)", "gwrgw.hit_http", "gwrgw.local_http",
                   "gib_per_s", 0.9),
            target("Gateway over Ceph RGW: miss ≥ 0.8 × RGW's own GET beside each run", "gwrgw.miss_http",
                   "gwrgw.miss_http.rgw", "gib_per_s", 0.8),
        ] + [target("%s, 1 GiB ≥ 0.8 × upstream's own HTTP GET beside each run" % what.capitalize(), sid,
                    sid + ".upstream", "gib_per_s", 0.8) for sid, what in GATEWAY_MISSES]


# ---------------------------------------------------------------------------------------------
# GPU: the JSON array of sluice_gpu_bench (group, path, bytes, seconds, gib_per_s, cpu_s_per_gib,
# pinned_bytes, note); rows without numbers were not run (the note says why).

def load_gpu(paths):
    rows, errors = [], []
    for path in paths or []:
        try:
            with open(path) as f:
                text = f.read()
            try:
                data = json.loads(text)
            except json.JSONDecodeError:  # its notes are not escaped: a backslash or quote breaks it
                data = json.loads(text.replace("\\", "\\\\"))
            for row in data:
                row["source"] = path
                rows.append(row)
        except Exception as e:  # noqa: BLE001
            errors.append("%s: %s" % (path, e))
    return rows, errors


def gpu_targets(rows, why_none):
    def has(r):
        return r.get("gib_per_s") is not None

    def not_measured(name, reason, required):
        return {"target": name, "status": "not measured", "measured": reason, "required": required}
    names = ["GPU: S3 GET 4 GiB → GPU token path ≥ 0.80 × pinned H2D", "GPU: token path ≥ 4 × naive",
             "GPU: token path client CPU-s/GiB ≤ 0.10 × naive", "GPU: file → GPU io_uring ≥ 1.2 × cuFile",
             "GPU: pinned staging ≤ 64 MiB per client path"]
    required = ["≥ 0.80×", "≥ 4×", "≤ 0.10×", "≥ 1.20×", "≤ 64 MiB"]
    if not rows:
        return [not_measured(n, why_none, q) for n, q in zip(names, required)]
    s3 = [r for r in rows if r.get("group", "").startswith("S3 GET")]
    token_rows = [r for r in s3 if r.get("path", "").startswith(("direct", "staged, RDMA parts"))]
    token = max((r for r in token_rows if has(r)), key=lambda r: r["gib_per_s"], default=None)

    def same_run(candidates):  # from the token path's file (run) when it has one, else the first
        candidates = list(candidates)
        return next((r for r in candidates if token and r["source"] == token["source"]),
                    candidates[0] if candidates else None)
    naive = same_run(r for r in s3 if r.get("path", "").startswith("naive") and has(r)
                     and (token is None or r.get("group") == token.get("group")))
    ceiling = same_run(r for r in rows if r.get("group") == "ceiling" and r.get("path", "").startswith("pinned H2D")
                       and has(r))
    files = [r for r in rows if r.get("group", "").startswith("file")]
    uring = next((r for r in files if r.get("path", "").startswith("io_uring") and has(r)),
                 next((r for r in files if r.get("path", "").startswith("io_uring")), None))
    cufile = next((r for r in files if r.get("path", "").startswith("cuFile") and has(r)),
                  next((r for r in files if r.get("path", "").startswith("cuFile")), None))
    skipped = "; ".join(sorted({"%s: %s" % (r["path"], r.get("note", "")) for r in token_rows if not has(r)}))

    def token_name():
        where = token.get("group", "").split("(")[-1].rstrip(")")
        return "%s, %s%s" % (token["path"], where, " (not run: %s)" % skipped if skipped else "")
    out = []
    if token is None or ceiling is None:
        out.append(not_measured(names[0], "token path: %s; pinned H2D: %s" % (
            "none measured (%s)" % skipped if token is None else "ok", "ok" if ceiling else "not measured"),
            required[0]))
    else:
        ratio = token["gib_per_s"] / ceiling["gib_per_s"]
        size_note = "" if token.get("bytes") == 4 * GIB else " — measured at %s, not 4 GiB" % size_name(
            token.get("bytes", 0))
        out.append({"target": names[0], "ratio": ratio, "required": required[0],
                    "measured": "%.2f× (%.2f vs %.2f GiB/s; %s)%s" % (ratio, token["gib_per_s"], ceiling["gib_per_s"],
                                                                      token_name(), size_note),
                    "status": "pass" if ratio >= 0.80 else "miss"})
    if token is None or naive is None:
        out.append(not_measured(names[1], "token path or naive row not measured", required[1]))
        out.append(not_measured(names[2], "token path or naive row not measured", required[2]))
    else:
        ratio = token["gib_per_s"] / naive["gib_per_s"]
        out.append({"target": names[1], "ratio": ratio, "required": required[1],
                    "measured": "%.2f× (%.2f vs %.2f GiB/s; %s)" % (ratio, token["gib_per_s"], naive["gib_per_s"],
                                                                    token["path"]),
                    "status": "pass" if ratio >= 4 else "miss"})
        a, b = token.get("cpu_s_per_gib"), naive.get("cpu_s_per_gib")
        if a is None or not b:
            out.append(not_measured(names[2], "no CPU numbers", required[2]))
        else:
            out.append({"target": names[2], "ratio": a / b, "required": required[2],
                        "measured": "%.2f× (%.3f vs %.3f CPU-s/GiB; %s)" % (a / b, a, b, token["path"]),
                        "status": "pass" if a / b <= 0.10 else "miss"})
    if not (uring and has(uring)) or not (cufile and has(cufile)):
        reasons = [r.get("note") if r.get("note", "").startswith(r["path"]) else "%s: %s" % (
            r["path"], r.get("note") or "not run") for r in (uring, cufile) if r and not has(r)]
        out.append(not_measured(names[3], "; ".join(reasons) or "no io_uring / cuFile rows", required[3]))
    else:
        ratio = uring["gib_per_s"] / cufile["gib_per_s"]
        out.append({"target": names[3], "ratio": ratio, "required": required[3],
                    "measured": "%.2f× (%.2f vs %.2f GiB/s)" % (ratio, uring["gib_per_s"], cufile["gib_per_s"]),
                    "status": "pass" if ratio >= 1.2 else "miss"})
    client = [r for r in rows if r.get("group") != "ceiling" and r.get("pinned_bytes") is not None and has(r)]
    if not client:
        out.append(not_measured(names[4], "no client path reported its pinned bytes", required[4]))
    else:
        worst = max(client, key=lambda r: r["pinned_bytes"])
        out.append({"target": names[4], "required": required[4],
                    "measured": "max %.0f MiB (%s) over %d client paths" % (worst["pinned_bytes"] / MIB, worst["path"],
                                                                              len(client)),
                    "status": "pass" if worst["pinned_bytes"] <= 64 * MIB else "miss"})
    return out


# ---------------------------------------------------------------------------------------------
# Output: table.md and plots

def f(x, digits=2):
    if x is None:
        return "—"
    if isinstance(x, float) and (abs(x) >= 1000 or digits == 0):
        return "%.0f" % x
    if x and abs(x) < 10 ** (1 - digits):  # small: 2 significant digits rather than 0.00
        return "%.2g" % x
    return ("%%.%df" % digits) % x


def ratio(x):
    return "%s×" % f(x, 2)


def mib(x):
    return "—" if x is None else "%.0f" % (x / MIB)


def write_table(path, meta, results, ratios, targets, gpu_rows, gpu_errors):
    L = []
    L.append("# sluice benchmark — %s" % meta["date"])
    L.append("")
    L.append("- machine: %s; %s cores; %.0f GiB RAM; load average %s at start, %s at end" % (
        meta["machine"], meta["cores"], meta["ram_gib"], meta["load_start"], meta.get("load_end", "?")))
    L.append("- commit %s; set %s%s; wall %.0f s%s" % (
        meta["commit"], meta["set"], " (--quick)" if meta["quick"] else "", meta.get("wall_s", 0),
        " (building %.0f s, benchmarks %.0f s)" % (meta["build_seconds"], meta.get("bench_wall_s", 0))
        if meta.get("build_seconds") else ""))
    if meta.get("fatal"):
        L.append("- **stopped early: %s** — the tables hold what ran before" % meta["fatal"])
    if "store" in meta:
        L.append("- store: **%s** — %s" % (meta["store"]["filesystem"], meta["store"]["note"]))
    if "sluice_serve" in meta:
        L.append("- sluice serve: %s" % "; ".join(meta["sluice_serve"]["banner"]))
    if meta.get("set") != "gpu":
        L.append("- sizes: 1 GiB objects, size sweep up to %s (the issue's 4 GiB point: `--sweep-max 4GiB`; this "
                 "machine has 24 GiB and 2 cores, shared)" % size_name(meta["sweep_max"]))
        L.append("- client CPU s/GiB: the client's own getrusage (sluice_s3_bench, sluice_ceilings) or the whole "
                 "process (curl, AWS CLI, wrk: wait4); server CPU s/GiB: /proc of sluice serve or nginx over the "
                 "run ÷ bytes moved; median of the runs")
    L.append("")
    first_ratio = {}
    for r in ratios:
        if r["value"] is not None and r["numerator"] not in first_ratio and not r["denominator"].startswith("ceil."):
            first_ratio[r["numerator"]] = r
    groups = []
    for s in results.scenarios:
        if s["group"] not in groups:
            groups.append(s["group"])
    for group in groups:
        rows = [s for s in results.scenarios if s["group"] == group]
        L.append("## " + group)
        L.append("")
        if group.startswith(("Small", "Listing", "Core scaling")):
            L.append("| case | ops/s | vs | p50 ms | p99 ms | client CPU s/GiB | server CPU µs/op | wrk RSS MiB | note |")
            L.append("|---|---:|---|---:|---:|---:|---:|---:|---|")
            for s in rows:
                if s["status"] != "ok":
                    L.append("| %s | %s | | | | | | | %s |" % (s["label"], s["status"], s.get("error", "")))
                    continue
                vs = first_ratio.get(s["id"])
                L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    s["label"], f(s["ops_per_s"], 0),
                    "%s %s" % (ratio(vs["value"]), vs["label"].split(" ÷ ")[1]) if vs else "baseline",
                    f(s["p50_ms"], 3), f(s["p99_ms"], 3), f(s.get("cpu_s_per_gib")), f(s.get("server_cpu_us_per_op"), 1),
                    mib(s.get("peak_rss_bytes")), s.get("note", "")))
        elif group.startswith("Startup"):
            L.append("| case | mean ms | ± σ ms | min ms | median ms | runs | command |")
            L.append("|---|---:|---:|---:|---:|---:|---|")
            for s in rows:
                if s["status"] != "ok":
                    L.append("| %s | %s | | | | | %s |" % (s["label"], s["status"], s.get("error", "")))
                    continue
                L.append("| %s | %s | %s | %s | %s | %d | `%s` |" % (
                    s["label"], f(s["mean_ms"], 1), f(s["stddev_ms"], 1), f(s["min_ms"], 1), f(s["median_ms"], 1),
                    s["runs"], s["cmd"]))
        elif group.startswith("Part size"):
            ok = [s for s in rows if s["status"] == "ok" and "sweep_part" in s]
            flights = sorted({s["sweep_flight"] for s in ok})
            L.append("| part size | " + " | ".join("%d in flight" % n for n in flights) + " |")
            L.append("|---|" + "---:|" * len(flights))
            for p in sorted({s["sweep_part"] for s in ok}):
                cells = []
                for n in flights:
                    s = next((x for x in ok if x["sweep_part"] == p and x["sweep_flight"] == n), None)
                    cells.append("%.2f GiB/s, %.3f CPU-s/GiB" % (s["gib_per_s"], s["cpu_s_per_gib"] or 0) if s else "—")
                L.append("| %s | %s |" % (size_name(p), " | ".join(cells)))
            for s in rows:
                if s["status"] != "ok":
                    L.append("")
                    L.append("- %s: %s — %s" % (s["label"], s["status"], s.get("error", "")))
        else:
            L.append("| case | GiB/s | vs | client CPU s/GiB | server CPU s/GiB | peak RSS MiB | pinned MiB | parts "
                     "| note |")
            L.append("|---|---:|---|---:|---:|---:|---:|---|---|")
            for s in rows:
                if s["status"] != "ok":
                    L.append("| %s | %s | | | | | | | %s |" % (s["label"], s["status"], s.get("error", "")))
                    continue
                vs = first_ratio.get(s["id"])
                parts = "%s × %s" % (size_name(s["part_size"]), s["parts_in_flight"]) if s.get("part_size") else ""
                L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    s["label"], f(s.get("gib_per_s"), 3), "%s %s" % (ratio(vs["value"]), vs["label"].split(" ÷ ")[1])
                    if vs else (s["kind"] if s["kind"] in ("baseline", "ceiling") else ""),
                    f(s.get("cpu_s_per_gib"), 3), f(s.get("server_cpu_s_per_gib"), 3), mib(s.get("peak_rss_bytes")),
                    mib(s.get("pinned_bytes")), parts, s.get("note", "")))
        L.append("")
    shown = [r for r in ratios if r["value"] is not None]
    if shown:
        L.append("## Ratios")
        L.append("")
        L.append("| ratio | value |")
        L.append("|---|---:|")
        for r in shown:
            L.append("| %s | %s |" % (r["label"], ratio(r["value"])))
        L.append("")
    if gpu_rows or gpu_errors:
        L.append("## GPU (from %s)" % ", ".join(sorted({r["source"] for r in gpu_rows}) or ["—"]))
        L.append("")
        for e in gpu_errors:
            L.append("- cannot read %s" % e)
        ceiling = next((r for r in gpu_rows if r.get("group") == "ceiling" and r.get("path", "").startswith("pinned")
                        and r.get("gib_per_s")), None)
        L.append("| group | path | size | GiB/s | vs pinned H2D | client CPU s/GiB | pinned MiB | note |")
        L.append("|---|---|---|---:|---:|---:|---:|---|")
        for r in gpu_rows:
            rate = r.get("gib_per_s")
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r.get("group"), r.get("path"), size_name(r.get("bytes", 0)), f(rate) if rate else "n/a",
                f(rate / ceiling["gib_per_s"]) if rate and ceiling else "", f(r.get("cpu_s_per_gib"), 3),
                mib(r.get("pinned_bytes")), r.get("note", "")))
        L.append("")
    L.append("## Targets (reported, not asserted)")
    L.append("")
    L.append("| target | required | measured | status |")
    L.append("|---|---|---|---|")
    for t in targets:
        L.append("| %s | %s | %s | **%s** |" % (t["target"], t["required"], t["measured"], t["status"]))
    L.append("")
    if meta.get("plots"):
        L.append("Plots: " + ", ".join(meta["plots"]))
        L.append("")
    text = "\n".join(L)
    with open(path, "w") as fh:
        fh.write(text)
    return text


def plots(out, results, gpu_rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        log("no plots: matplotlib is missing (python3-matplotlib): %s" % e)
        return []
    colors = {"sluice": "#1f77b4", "baseline": "#ff7f0e", "ceiling": "#7f7f7f", "sweep": "#2ca02c"}
    made = []

    def bars(name, group, title):
        rows = [s for s in results.scenarios if s["group"] == group and s["status"] == "ok" and s.get("gib_per_s")]
        if not rows:
            return
        fig, axes = plt.subplots(1, 2, figsize=(13, 0.45 * len(rows) + 1.6), sharey=True)
        labels = [s["label"] for s in rows]
        y = range(len(rows))
        axes[0].barh(y, [s["gib_per_s"] for s in rows], color=[colors.get(s["kind"], "k") for s in rows])
        axes[0].set_xlabel("GiB/s")
        axes[0].set_yticks(list(y), labels)
        axes[0].invert_yaxis()
        axes[1].barh(y, [s.get("cpu_s_per_gib") or 0 for s in rows], color=[colors.get(s["kind"], "k") for s in rows])
        axes[1].set_xlabel("client CPU s / GiB")
        for ax in axes:
            ax.grid(axis="x", alpha=0.3)
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(os.path.join(out, name), dpi=110)
        plt.close(fig)
        made.append(name)
    bars("large_get.png", "Large GET 1 GiB", "GET 1 GiB over loopback (blue: sluice, orange: baselines, grey: ceilings)")
    bars("large_put.png", "Large PUT 1 GiB", "PUT 1 GiB over loopback")

    sweep = [s for s in results.scenarios if s["group"].startswith("Size") and s["status"] == "ok" and s.get("size")]
    if sweep:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for label, prefix in (("sluice rdma (shm)", "size.rdma."), ("sluice http", "size.http.")):
            pts = sorted((s["size"], s["gib_per_s"], s.get("cpu_s_per_gib")) for s in sweep if s["id"].startswith(prefix))
            if pts:
                axes[0].plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
                axes[1].plot([p[0] for p in pts], [p[2] for p in pts], "o-", label=label)
        ticks = sorted({s["size"] for s in sweep})
        for ax, ylabel in ((axes[0], "GiB/s"), (axes[1], "client CPU s / GiB")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [size_name(t) for t in ticks])
            ax.minorticks_off()
            ax.set_yscale("log")
            ax.set_xlabel("object size")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3, which="both")
            ax.legend()
        fig.suptitle("GET cost vs object size")
        fig.tight_layout()
        fig.savefig(os.path.join(out, "size_sweep.png"), dpi=110)
        plt.close(fig)
        made.append("size_sweep.png")

    parts = [s for s in results.scenarios if s["status"] == "ok" and "sweep_part" in s]
    if parts:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for p in sorted({s["sweep_part"] for s in parts}):
            pts = sorted((s["sweep_flight"], s["gib_per_s"]) for s in parts if s["sweep_part"] == p)
            ax.plot([x[0] for x in pts], [x[1] for x in pts], "o-", label="%s parts" % size_name(p))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("parts in flight")
        ax.set_ylabel("GiB/s")
        ax.set_title("sluice rdma (shm) GET 1 GiB: part size × parts in flight")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, "part_sweep.png"), dpi=110)
        plt.close(fig)
        made.append("part_sweep.png")

    small = [s for s in results.scenarios if s["group"].startswith("Small") and s["status"] == "ok"]
    if small:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        sizes = ["4k", "64k"]
        for i, (server, color) in enumerate((("sluice", colors["sluice"]), ("nginx", colors["baseline"]))):
            vals = [next((s["ops_per_s"] for s in small if s["id"] == "small.%s.%s" % (t, server)), 0) for t in sizes]
            xs = [j + (i - 0.5) * 0.38 for j in range(len(sizes))]
            ax.bar(xs, vals, 0.38, label=server if server == "nginx" else "sluice serve (presigned)", color=color)
            for x, v, t in zip(xs, vals, sizes):
                s = next((s for s in small if s["id"] == "small.%s.%s" % (t, server)), None)
                if s:
                    ax.annotate("%.0f/s\np99 %.2f ms" % (v, s["p99_ms"]), (x, v), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(sizes)), ["4 KiB", "64 KiB"])
        ax.set_yscale("log")
        ax.set_ylim(top=max(s["ops_per_s"] for s in small) * 8)
        ax.set_ylabel("GET ops/s (wrk -t2 -c16, log)")
        ax.set_title("Small objects")
        ax.legend()
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "small_objects.png"), dpi=110)
        plt.close(fig)
        made.append("small_objects.png")

    measured = [r for r in gpu_rows if r.get("gib_per_s")]
    if measured:
        fig, ax = plt.subplots(figsize=(10, 0.45 * len(measured) + 1.6))
        labels = ["%s: %s" % (r["group"], r["path"]) for r in measured]
        ax.barh(range(len(measured)), [r["gib_per_s"] for r in measured],
                color=["#7f7f7f" if r["group"] == "ceiling" else "#1f77b4" for r in measured])
        ax.set_yticks(range(len(measured)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("GiB/s (log)")
        ax.set_title("GPU paths (%s)" % size_name(measured[0].get("bytes", 0)))
        ax.grid(axis="x", alpha=0.3, which="both")
        fig.tight_layout()
        fig.savefig(os.path.join(out, "gpu.png"), dpi=110)
        plt.close(fig)
        made.append("gpu.png")
    return made


# ---------------------------------------------------------------------------------------------

def reexec_for_matplotlib():
    """pyenv's python3 may lack matplotlib where Debian's (python3-matplotlib) has it: use that one."""
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    system = "/usr/bin/python3"
    if os.environ.get("SLUICE_BENCH_REEXEC") or not os.access(system, os.X_OK) or \
            os.path.realpath(system) == os.path.realpath(sys.executable):
        return
    if subprocess.run([system, "-c", "import matplotlib"], capture_output=True).returncode == 0:
        os.execve(system, [system, os.path.abspath(__file__)] + sys.argv[1:],
                  dict(os.environ, SLUICE_BENCH_REEXEC="1"))


def machine_meta(args):
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        commit += " (+ uncommitted changes)" if dirty else ""
    except OSError:
        commit = "?"
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": "%s, %s %s" % (cpu, platform.system(), platform.release()), "cores": os.cpu_count(),
            "ram_gib": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB,
            "load_start": "%.2f" % os.getloadavg()[0], "commit": commit, "set": args.set, "quick": args.quick,
            "sweep_max": args.sweep_max, "python": sys.executable, "argv": sys.argv[1:]}


# The cpu set's groups, in the order they run (--only picks some).
GROUPS = ("startup", "large_get", "part_sweep", "large_put", "small_objects", "core_scaling", "listing", "size_sweep",
          "gateway", "gateway_rgw", "bulk")


def main():
    reexec_for_matplotlib()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=("cpu", "gpu", "all"), default="cpu")
    parser.add_argument("--quick", action="store_true", help="fewer runs and sweep points (a minute or two)")
    parser.add_argument("--only", type=lambda text: text.split(","), default=None, metavar="GROUP[,GROUP]",
                        help="run these groups of the cpu set only: " + ", ".join(GROUPS))
    parser.add_argument("--gpu-json", action="append", default=[], metavar="FILE",
                        help="gpu_bench.json of a device run (sluice_gpu_bench --json); repeatable")
    parser.add_argument("--build", default=os.path.join(REPO, "build", "release"), help="build dir (release preset)")
    parser.add_argument("--out", help="output dir (default bench/results/<UTC timestamp>/)")
    parser.add_argument("--sweep-max", type=parse_size, default=GIB, metavar="SIZE",
                        help="largest object of the size sweep (default 1GiB; 4GiB needs ~10 GiB free memory)")
    parser.add_argument("--baseline-cli", metavar="SLUICE",
                        help="another build's sluice binary, timed beside this one by the startup group and by the bulk group's 1 GiB cp")
    parser.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                        help="one more argument for the main `sluice serve` (repeat it for each: "
                             "--serve-arg=--fabric-registration-cache --serve-arg=0)")
    args = parser.parse_args()
    if args.only and not set(args.only) <= set(GROUPS):
        parser.error("--only: unknown group(s) %s; groups: %s" % (", ".join(sorted(set(args.only) - set(GROUPS))),
                                                                  ", ".join(GROUPS)))
    signal.signal(signal.SIGTERM, _terminate)

    out = os.path.abspath(args.out or os.path.join(REPO, "bench", "results",
                                                   datetime.datetime.now(datetime.timezone.utc)
                                                   .strftime("%Y%m%dT%H%M%SZ")))
    os.makedirs(out, exist_ok=True)
    meta = machine_meta(args)
    harness = Harness(args)
    harness.out = out
    harness.meta = meta
    log("sluice bench: set %s%s → %s" % (args.set, " (quick)" if args.quick else "", out))
    fatal = None
    try:
        if args.set in ("cpu", "all"):
            harness.ensure_built()
            bench_started = time.monotonic()
            harness.setup()
            for name in GROUPS:
                if not args.only or name in args.only:
                    getattr(harness, name)()
            meta["bench_wall_s"] = round(time.monotonic() - bench_started, 1)
    except KeyboardInterrupt as e:
        fatal = "interrupted (%s)" % (e or "Ctrl-C")
        log(fatal)
    except Exception as e:  # noqa: BLE001 - still write what was measured
        fatal = "%s: %s" % (type(e).__name__, e)
        log("stopped: " + fatal)
    finally:
        cleanup()
    if fatal:
        meta["fatal"] = fatal

    gpu_rows, gpu_errors = load_gpu(args.gpu_json)
    targets = harness.cpu_targets() if args.set in ("cpu", "all") else []
    if args.set in ("gpu", "all") or args.gpu_json:
        why = "no --gpu-json given (the device run writes gpu_bench.json: scripts/device_carry.sh, then " \
              "build/device-carry/run.sh bench there)" if not args.gpu_json else "; ".join(gpu_errors) or "no rows"
        targets += gpu_targets(gpu_rows, why)
    ratios = harness.ratios()
    meta["load_end"] = "%.2f" % os.getloadavg()[0]
    meta["wall_s"] = round(time.monotonic() - T0, 1)
    meta["plots"] = plots(out, harness.results, gpu_rows)
    text = write_table(os.path.join(out, "table.md"), meta, harness.results, ratios, targets, gpu_rows, gpu_errors)
    with open(os.path.join(out, "results.json"), "w") as fh:
        json.dump({"meta": meta, "scenarios": harness.results.scenarios, "ratios": ratios, "targets": targets,
                   "gpu": gpu_rows}, fh, indent=1, default=str)
    print()
    print(text)
    print("results: %s (results.json, table.md%s)" % (out, "".join(", " + p for p in meta["plots"])))
    log("done in %.0f s" % meta["wall_s"])
    return 1 if fatal else 0


if __name__ == "__main__":
    sys.exit(main())
