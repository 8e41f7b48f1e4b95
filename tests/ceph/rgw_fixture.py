#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A single-node Ceph cluster with a radosgw on loopback, for tests of the gateway against a real
RGW (issue 41). Everything lives in one temporary directory: the configuration (passed with -c to
every command), the mon's, mgr's and OSD's data, run files, admin sockets and logs. Nothing is
read from or written to /etc/ceph or /var/lib/ceph; no systemd; the daemons run as the current
user and are stopped by PID. The OSD keeps its objects in memory (memstore) and the cluster runs
without cephx (auth none): it is reachable on 127.0.0.1 only.

  rgw_fixture.py up [--state FILE] [--dir DIR]   bring a cluster up (mon, mgr, one OSD, radosgw on a
                                                 free port), create a user; print the state as JSON
                                                 (and write it to FILE)
  rgw_fixture.py down --state FILE               stop the daemons by PID, remove the directory
  rgw_fixture.py user --state FILE [--tenant T]  create another user (in its own tenant: its own
                                                 bucket namespace); print its keys as JSON
  rgw_fixture.py rgw --state FILE                start another radosgw on the cluster (free port);
                                                 print {"endpoint", "pid"}: a test may kill it

The state (JSON): endpoint, access_key, secret_key, dir, conf, pids, ready_s; or {"skip": reason}.
Exit 0: up; 77: Ceph cannot start here (packages missing, no permission; the reason is printed and
written to the state file as "skip"); anything else: failed. Also used as a module (Cluster)."""
import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

SKIP = 77
BINARIES = ("monmaptool", "ceph-mon", "ceph-mgr", "ceph-osd", "radosgw", "radosgw-admin", "ceph")
PACKAGES = "ceph-mon ceph-mgr ceph-osd radosgw ceph-common"


class Unavailable(Exception):
    """Ceph cannot start here: the tests that need it are skipped."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CONF = """[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
mon initial members = a
public addr = 127.0.0.1
ms bind msgr1 = false
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
ms mon cluster mode = crc
ms mon service mode = crc
ms client mode = crc
ms cluster mode = crc
ms service mode = crc
run dir = {root}/run
admin socket = {root}/run/$name.asok
pid file = {root}/run/$name.pid
log file = {root}/log/$name.log
mon cluster log file = {root}/log/cluster.log
crash dir = {root}/crash
exec dir = {root}/run
keyring = {root}/keyring
log to stderr = false
err to stderr = true
log to file = true
debug ms = 0
mon data = {root}/$name
mgr data = {root}/$name
osd data = {root}/$name
osd objectstore = memstore
memstore device bytes = {osd_bytes}
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
mon data avail warn = 1
mon data avail crit = 0
osd op num shards = 1
osd op num threads per shard = 2
mgr initial modules =
rgw data = {root}/$name
rgw frontends = beast endpoint=127.0.0.1:{rgw_port}
rgw dns name = localhost
rgw enable usage log = false
rgw thread pool size = 64
rgw gc obj min wait = 10
rgw gc processor period = 10
rgw gc processor max time = 10

[client]
# The commands of tests running side by side (radosgw-admin user create) each have a socket.
admin socket = {root}/run/$name.$pid.asok
"""


class Cluster:
    """One cluster under `root` (created when None). up() is ready within `timeout` seconds or raises."""

    def __init__(self, root=None, osd_bytes=2 << 30):
        self.root = root or tempfile.mkdtemp(prefix="sluice-ceph-")
        self.conf = os.path.join(self.root, "ceph.conf")
        self.osd_bytes = osd_bytes
        self.pids = {}  # daemon name -> PID
        self.procs = {}  # daemon name -> Popen, for the daemons this process started
        self.endpoint = self.access_key = self.secret_key = None
        self.ready_s = None

    # -- state, for other processes (the ctest fixture's tests) --
    def state(self):
        return {"endpoint": self.endpoint, "access_key": self.access_key, "secret_key": self.secret_key,
                "dir": self.root, "conf": self.conf, "pids": self.pids, "ready_s": self.ready_s}

    @classmethod
    def from_state(cls, state):
        c = cls(state["dir"])
        c.pids = dict(state["pids"])
        c.endpoint, c.access_key, c.secret_key = state["endpoint"], state["access_key"], state["secret_key"]
        c.ready_s = state.get("ready_s")
        return c

    # -- running commands and daemons --
    def run(self, *cmd, timeout=60, check=True):
        try:
            r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                               cwd=self.root)
        except subprocess.TimeoutExpired as e:
            raise RuntimeError("%s did not end within %d s" % (" ".join(cmd), timeout)) from e
        if check and r.returncode != 0:
            raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), r.returncode, (r.stderr or r.stdout)[-1500:]))
        return r

    def ceph(self, *args, timeout=60):
        return self.run("ceph", "-c", self.conf, "--connect-timeout", "30", *args, timeout=timeout)

    def admin(self, *args, timeout=60):
        return self.run("radosgw-admin", "-c", self.conf, *args, timeout=timeout)

    def spawn(self, name, *cmd):
        """A daemon in the foreground (-f) of its own session, its output in log/NAME.out: it outlives
        this process (the ctest fixture's setup), and holds no pipe a caller would wait on."""
        with open(os.path.join(self.root, "log", name + ".out"), "ab") as out:
            proc = subprocess.Popen(list(cmd) + ["-f", "-c", self.conf], stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, cwd=self.root, start_new_session=True)
        self.pids[name] = proc.pid
        self.procs[name] = proc
        return proc

    def alive(self, name):
        proc = self.procs.get(name)
        if proc is not None:
            return proc.poll() is None
        return ours(self.pids.get(name), self.conf)

    def log_tail(self, name, lines=15):
        text = ""
        for path in (os.path.join(self.root, "log", name + ".out"), os.path.join(self.root, "log", name + ".log")):
            try:
                with open(path, errors="replace") as f:
                    text += "".join(f.readlines()[-lines:])
            except OSError:
                pass
        return text.strip()

    def wait(self, what, test, deadline, daemon=None):
        while time.time() < deadline:
            if daemon and not self.alive(daemon):
                raise Unavailable("%s exited at start: %s" % (daemon, self.log_tail(daemon)))
            if test():
                return
            time.sleep(0.2)
        raise RuntimeError("%s: not within the time allowed (%s)" % (what, self.log_tail(daemon) if daemon else ""))

    # -- bringing it up --
    def up(self, timeout=90):
        missing = [b for b in BINARIES if not shutil.which(b)]
        if missing:
            raise Unavailable("Ceph is not installed (%s missing; apt-get install %s, or scripts/deps.sh)"
                              % (", ".join(missing), PACKAGES))
        started = time.time()
        deadline = started + timeout
        for sub in ("run", "log", "crash", "mon.a", "mgr.x", "osd.0", "client.rgw"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)
        fsid = str(uuid.uuid4())
        mon_port, rgw_port = free_port(), free_port()
        with open(self.conf, "w") as f:
            f.write(CONF.format(fsid=fsid, mon_port=mon_port, rgw_port=rgw_port, root=self.root,
                                osd_bytes=self.osd_bytes))
        open(os.path.join(self.root, "keyring"), "w").close()
        monmap = os.path.join(self.root, "monmap")
        try:
            self.run("monmaptool", "--create", "--clobber", "--fsid", fsid, "--addv", "a",
                     "[v2:127.0.0.1:%d]" % mon_port, "--enable-all-features", monmap)
            self.run("ceph-mon", "-c", self.conf, "-i", "a", "--mkfs", "--monmap", monmap)
        except RuntimeError as e:
            raise Unavailable("ceph-mon --mkfs: %s" % e) from e
        self.spawn("mon.a", "ceph-mon", "-i", "a")
        self.wait("the mon answers", lambda: self.run("ceph", "-c", self.conf, "--connect-timeout", "2", "mon",
                                                      "stat", timeout=10, check=False).returncode == 0,
                  deadline, "mon.a")
        self.spawn("mgr.x", "ceph-mgr", "-i", "x")
        osd_uuid = str(uuid.uuid4())
        osd_id = self.ceph("osd", "new", osd_uuid).stdout.strip()
        if osd_id != "0":
            raise RuntimeError("ceph osd new: id %r, not 0" % osd_id)
        try:
            self.run("ceph-osd", "-c", self.conf, "-i", "0", "--mkfs", "--osd-uuid", osd_uuid)
        except RuntimeError as e:
            raise Unavailable("ceph-osd --mkfs (memstore): %s" % e) from e
        self.spawn("osd.0", "ceph-osd", "-i", "0")

        def osd_up():
            r = self.run("ceph", "-c", self.conf, "osd", "dump", "--format", "json", timeout=20, check=False)
            return r.returncode == 0 and any(o["up"] for o in json.loads(r.stdout)["osds"])
        self.wait("osd.0 is up", osd_up, deadline, "osd.0")
        self.access_key, self.secret_key = self.user("sluice")
        self.endpoint = self.start_rgw("client.rgw", rgw_port, deadline)
        self.ready_s = round(time.time() - started, 1)
        return self

    def start_rgw(self, name="client.rgw", port=None, deadline=None):
        """A radosgw named `name` (client.rgw.*) on `port` (a free one when None): its endpoint."""
        port = port or free_port()
        deadline = deadline or time.time() + 60
        os.makedirs(os.path.join(self.root, name), exist_ok=True)
        self.spawn(name, "radosgw", "-n", name, "--rgw-frontends", "beast endpoint=127.0.0.1:%d" % port)
        endpoint = "http://127.0.0.1:%d" % port

        def answers():
            try:
                urllib.request.urlopen(endpoint + "/", timeout=2).read()
                return True
            except urllib.error.HTTPError:
                return True
            except OSError:
                return False
        self.wait("%s answers on %s" % (name, endpoint), answers, deadline, name)
        return endpoint

    def user(self, uid, tenant=None):
        """(access key, secret key) of a new user; in `tenant`, a bucket namespace of its own."""
        ak = "SLUICE" + secrets.token_hex(7).upper()
        sk = secrets.token_urlsafe(30)
        args = ["user", "create", "--uid", uid, "--display-name", uid, "--access-key", ak, "--secret", sk]
        if tenant:
            args += ["--tenant", tenant]
        self.admin(*args)
        return ak, sk

    # -- tearing it down --
    def down(self):
        """Stop every daemon this cluster started (by PID, checked to be ours), then remove the
        directory."""
        for name in sorted(self.pids, key=lambda n: ("client" not in n, "osd" not in n, "mgr" not in n)):
            stop(self.pids[name], self.conf)
        for pid in started_with(self.conf):  # another radosgw (`rgw`), a command still running
            stop(pid, self.conf)
        if not os.environ.get("SLUICE_CEPH_KEEP"):  # kept: to read its logs
            shutil.rmtree(self.root, ignore_errors=True)


def ours(pid, conf):
    """Whether `pid` is a live process started with -c `conf` (not another that reused the PID)."""
    if not pid:
        return False
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            args = f.read().split(b"\0")
        with open("/proc/%d/stat" % pid) as f:
            zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False
    if zombie:
        if _is_child(pid):
            os.waitpid(pid, os.WNOHANG)  # a daemon this process started, which exited: reaped
        return False
    return conf.encode() in args


def started_with(conf):
    """PIDs of the processes started with -c `conf`."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and ours(int(entry), conf):
            pids.append(int(entry))
    return pids


def _is_child(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid()
    except OSError:
        return False


def stop(pid, conf, grace=10):
    if not ours(pid, conf):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + grace
    while time.time() < deadline and ours(pid, conf):
        time.sleep(0.1)
    if ours(pid, conf):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    while _is_child(pid):
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            break


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("action", choices=("up", "down", "user", "rgw"))
    p.add_argument("--state", help="the state file (JSON)")
    p.add_argument("--dir", help="up: the cluster's directory (default: a new temporary one)")
    p.add_argument("--tenant", help="user: the new user's tenant")
    p.add_argument("--timeout", type=float, default=90, help="up: seconds allowed (default 90)")
    a = p.parse_args()
    if a.action != "up" and not a.state:
        p.error("%s needs --state" % a.action)

    def write(state):
        if a.state:
            os.makedirs(os.path.dirname(os.path.abspath(a.state)), exist_ok=True)
            with open(a.state + ".new", "w") as f:
                json.dump(state, f, indent=1)
            os.replace(a.state + ".new", a.state)

    if a.action == "up":
        if a.state and os.path.exists(a.state):  # a cluster a run before this one left: stop it first
            try:
                old = load(a.state)
                if "dir" in old:
                    Cluster.from_state(old).down()
            except (OSError, ValueError, KeyError):
                pass
        if a.dir:
            os.makedirs(a.dir, exist_ok=True)
        cluster = Cluster(a.dir)
        try:
            cluster.up(a.timeout)
        except Unavailable as e:
            print("SKIPPED: Ceph cannot start here:", e)
            cluster.down()
            write({"skip": "Ceph cannot start here: %s" % e})
            return SKIP
        except Exception as e:  # noqa: BLE001
            print("FAILED: %s" % e, file=sys.stderr)
            cluster.down()
            write({"skip": None, "failed": str(e)})
            return 1
        try:
            write(cluster.state())
        except OSError:
            cluster.down()
            raise
        print(json.dumps(cluster.state()))
        print("rgw_fixture: ready in %.1f s at %s" % (cluster.ready_s, cluster.endpoint), file=sys.stderr)
        return 0
    state = load(a.state)
    if "dir" not in state:
        print("no cluster: %s" % (state.get("skip") or state.get("failed")))
        if a.action == "down":
            os.unlink(a.state)
            return 0
        return SKIP if state.get("skip") else 1
    cluster = Cluster.from_state(state)
    if a.action == "down":
        cluster.down()
        os.unlink(a.state)
        return 0
    if a.action == "user":
        uid = "u" + secrets.token_hex(4)
        ak, sk = cluster.user(uid, a.tenant)
        print(json.dumps({"uid": uid, "tenant": a.tenant, "access_key": ak, "secret_key": sk}))
        return 0
    name = "client.rgw." + secrets.token_hex(3)
    endpoint = cluster.start_rgw(name)
    print(json.dumps({"endpoint": endpoint, "pid": cluster.pids[name], "name": name}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
