#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The many-object and stream commands of the `sluice` CLI (cp -r, sync, rm -r, rb --force, cat, stat,
cp - and cp KEY -) against a real `sluice serve`, with keys that try the download side (.., //, a leading
/, unicode, 1,024 bytes, names differing only in case), an unreadable file among many, SIGINT mid-job,
a server that accepts and never answers, errors that must name the real cause, and ~/.aws profiles.
cli_bulk_test.py SLUICE_BINARY SCENARIO   (SCENARIO: copy, sync, unsafe, unreadable, sigint, timeout, errors, docs)
Exit 0: passed; 77: skipped (printed why); anything else: failed."""
import hashlib
import json
import os
import pty
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MIB, expect, make_file, run_scenario  # noqa: E402

AK, SK = "SLUICEBULKAK", "sluice-bulk-secret"


class Cli:
    def __init__(self, binary, server, tmp):
        self.binary, self.server, self.tmp = binary, server, tmp
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.env["HOME"] = tmp  # no ~/.aws of the machine's

    def run(self, *args, keys=True, env=None, timeout=120, **kw):
        cmd = [self.binary] + list(args)
        if self.server is not None:
            cmd += ["--endpoint", self.server.url]
        if keys:
            cmd += ["--access-key", AK, "--secret-key", SK]
        e = dict(self.env)
        e.update(env or {})
        return subprocess.run(cmd, capture_output=True, env=e, timeout=timeout, **kw)

    def ok(self, *args, **kw):
        r = self.run(*args, **kw)
        if r.returncode != 0:
            raise AssertionError("sluice %s failed (%d):\nstdout: %s\nstderr: %s" % (
                " ".join(args), r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
        return r


def digest(path):
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


def tree(root):
    """relative path -> md5 of every file under root."""
    out = {}
    for base, _, files in os.walk(root):
        for name in files:
            path = os.path.join(base, name)
            out[os.path.relpath(path, root)] = digest(path)
    return out


def json_lines(r):
    return [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]


def make_tree(root, names, size=1000):
    for i, name in enumerate(names):
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        make_file(path, size + i, i + 1)


# With the prefix "up/" (or "cp/"), a key of exactly 1,024 bytes (S3's limit), in segments a file
# system takes (NAME_MAX 255).
LONG = "/".join(["x" * 200] * 4) + "/"
LONG = LONG + "y" * (1024 - len("up/") - len(LONG))
NAMES = ["a.txt", "A.txt", "dir/b.bin", "dir/sub/c.bin", "\u00fcnic\u00f8de/\u65e5\u672c.txt", "sp ace/+plus&amp",
         LONG]


def copy(binary, server, tmp):
    """cp -r up, down and across buckets; --json lines and the summary; --include/--exclude; cp - and cp KEY -;
    cat; stat; rm of several keys; rm -r; rb --force; mb of several buckets."""
    cli = Cli(binary, server, tmp)
    src, down, again = (os.path.join(tmp, d) for d in ("src", "down", "again"))
    make_tree(src, NAMES + ["many/%03d" % i for i in range(40)])
    expect(len(("up/" + LONG).encode()) == 1024, "the long key is 1,024 bytes")
    r = cli.ok("mb", "s3://bulk", "s3://bulk2", "s3://bulk3")
    expect(r.stdout.decode().count("make_bucket:") == 3, "mb makes three buckets in one command")
    r = cli.ok("cp", "-r", src, "s3://bulk/up", "--json")
    lines = json_lines(r)
    summary = lines[-1]
    expect(summary["summary"] == "cp" and summary["files"] == len(NAMES) + 40 and summary["failed"] == 0,
           "cp -r up: every file, a summary line (%s)" % summary)
    expect(all(x["op"] == "upload" and x["error"] is None for x in lines[:-1]) and len(lines) == len(NAMES) + 41,
           "cp -r --json: one line per object")
    listed = {x["key"] for x in json_lines(cli.ok("ls", "--recursive", "--json", "s3://bulk/up/"))}
    expect(listed == {"up/" + n for n in tree(src)}, "the keys are the relative paths (case, unicode, 1,024 bytes)")
    expect(b"ETA" not in r.stderr, "no progress line when stdout is not a terminal")
    # On a terminal: one progress line for the whole job (files, bytes, rate, ETA).
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([binary, "cp", "-r", src, "s3://bulk/pt/", "--endpoint", server.url, "--access-key", AK,
                             "--secret-key", SK], stdout=secondary, stderr=secondary, env=cli.env)
    proc.wait(timeout=120)
    os.close(secondary)
    seen = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(primary)
    expect(proc.returncode == 0 and re.search(rb"cp: \d+/%d files, .*/s, ETA" % (len(NAMES) + 40), seen),
           "on a terminal, one progress line: %r" % seen[:120])
    r = cli.ok("cp", "-r", "s3://bulk/up", down)
    expect(tree(down) == tree(src), "cp -r down: the same files, byte for byte")
    expect(b"of %d done" % (len(NAMES) + 40) in r.stdout, "cp -r prints a summary: %s" % r.stdout[-200:])
    cli.ok("cp", "-r", "s3://bulk/up/", "s3://bulk2/cp/")
    cli.ok("cp", "-r", "s3://bulk2/cp", again)
    expect(tree(again) == tree(src), "cp -r S3 -> S3, then down: the same files")
    only = os.path.join(tmp, "only")
    cli.ok("cp", "-r", "s3://bulk/up", only, "--exclude", "*", "--include", "dir/*")
    expect(sorted(tree(only)) == ["dir/b.bin", "dir/sub/c.bin"], "--exclude '*' --include 'dir/*'")
    # One object: to a directory, to a file, across buckets.
    cli.ok("cp", "s3://bulk/up/a.txt", only + "/")
    expect(digest(os.path.join(only, "a.txt")) == digest(os.path.join(src, "a.txt")), "cp KEY DIR/")
    # A large object (above 2 x 8 MiB parts x 4 in flight) comes down as two ranged GETs of its
    # version, each written at its place in one temporary file.
    big = make_file(os.path.join(tmp, "big.bin"), 64 * MIB + 5, 7)
    cli.ok("cp", big, "s3://bulk3/big")
    big_down = os.path.join(tmp, "big-down.bin")
    cli.ok("cp", "s3://bulk3/big", big_down)
    expect(digest(big_down) == digest(big) and not [n for n in os.listdir(tmp) if n.endswith(".partial")],
           "cp KEY FILE of 64 MiB + 5 in two pieces: byte-exact, no temporary file left")
    # Streams: stdin of unknown length (over the multipart threshold, 16 MiB) and stdout.
    blob = os.urandom(3 * MIB) * 7  # 21 MiB
    cli.ok("cp", "-", "s3://bulk/stream", input=blob)
    r = cli.ok("cp", "s3://bulk/stream", "-")
    expect(r.stdout == blob, "cp - (21 MiB of stdin) then cp KEY -: the same bytes")
    r = cli.ok("cat", "s3://bulk/up/a.txt", "s3://bulk/up/A.txt")
    with open(os.path.join(src, "a.txt"), "rb") as f1, open(os.path.join(src, "A.txt"), "rb") as f2:
        expect(r.stdout == f1.read() + f2.read(), "cat of two objects")
    cli.ok("cp", "-", "s3://bulk/tiny", input=b"tiny")
    expect(cli.ok("cat", "s3://bulk/tiny").stdout == b"tiny", "cp - of 4 bytes, cat")
    r = cli.ok("stat", "s3://bulk/stream", "--json")
    st = json.loads(r.stdout)
    expect(st["size"] == len(blob) and st["key"] == "stream", "stat --json: size %d" % st["size"])
    r = cli.ok("stat", "s3://bulk/up/a.txt")
    expect(b"size:" in r.stdout and b"etag:" in r.stdout, "stat prints size and etag")
    r = cli.ok("rm", "s3://bulk/tiny", "s3://bulk/stream")
    expect(r.stdout.decode().count("delete:") == 2, "rm of two keys")
    r = cli.ok("rm", "-r", "s3://bulk/up/many", "--json")
    expect(json_lines(r)[-1]["files"] == 40, "rm -r deletes the 40 objects under the prefix")
    left = json_lines(cli.ok("ls", "--recursive", "--json", "s3://bulk/up/"))
    expect(len(left) == len(NAMES), "the rest stays (%d keys)" % len(left))
    r = cli.run("rb", "s3://bulk")
    expect(r.returncode == 1 and b"BucketNotEmpty" in r.stderr, "rb of a bucket with objects: BucketNotEmpty")
    cli.ok("rb", "--force", "s3://bulk", "s3://bulk2", "s3://bulk3")
    r = cli.ok("ls", "--json")
    expect(not any(x.get("bucket", "").startswith("bulk") for x in json_lines(r)), "rb --force removes three buckets")


def sync(binary, server, tmp):
    """sync up, again (nothing to do), after a change, --delete, --dry-run; down; bucket to bucket."""
    cli = Cli(binary, server, tmp)
    src, down = os.path.join(tmp, "src"), os.path.join(tmp, "down")
    make_tree(src, ["one", "two", "d/three", "d/four"])
    cli.ok("mb", "s3://sync", "s3://sync2")
    r = cli.ok("sync", src, "s3://sync/p", "--json")
    expect(json_lines(r)[-1]["files"] == 4, "sync up: 4 files")
    r = cli.ok("sync", src, "s3://sync/p", "--json")
    expect(json_lines(r)[-1]["files"] == 0 and len(json_lines(r)) == 1, "sync again: nothing to do")
    with open(os.path.join(src, "two"), "ab") as f:
        f.write(b"more")
    os.unlink(os.path.join(src, "d/four"))
    r = cli.ok("sync", src, "s3://sync/p", "--delete", "--dry-run")
    expect(b"(dry run)" in r.stdout and b"two" in r.stdout and b"four" in r.stdout, "--dry-run says the plan")
    keys = {x["key"] for x in json_lines(cli.ok("ls", "--recursive", "--json", "s3://sync/p/"))}
    expect("p/d/four" in keys, "--dry-run changes nothing")
    r = cli.ok("sync", src, "s3://sync/p", "--delete", "--json")
    ops = sorted((x["op"], x.get("target")) for x in json_lines(r)[:-1])
    expect(ops == [("delete", "s3://sync/p/d/four"), ("upload", "s3://sync/p/two")],
           "sync --delete: the changed file up, the removed one deleted (%s)" % ops)
    cli.ok("sync", "s3://sync/p", down)
    expect(tree(down) == tree(src), "sync down: the same files")
    r = cli.ok("sync", "s3://sync/p", down, "--json")
    expect(json_lines(r)[-1]["files"] == 0, "sync down again: nothing to do (mtime set to LastModified)")
    with open(os.path.join(down, "extra"), "w") as f:
        f.write("x")
    cli.ok("sync", "s3://sync/p", down, "--delete")
    expect(not os.path.exists(os.path.join(down, "extra")), "sync down --delete removes a local extra")
    cli.ok("sync", "s3://sync/p", "s3://sync2/q")
    r = cli.ok("sync", "s3://sync/p", "s3://sync2/q", "--json")
    expect(json_lines(r)[-1]["files"] == 0, "sync bucket to bucket, again: nothing (ETags equal)")


def unsafe(binary, server, tmp):
    """Keys that would write outside the target directory are refused and named; the rest complete."""
    cli = Cli(binary, server, tmp)
    cli.ok("mb", "s3://evil")
    body = os.path.join(tmp, "body")
    make_file(body, 100, 7)
    bad = ["p/../../escaped", "p//double", "p/./dot", "p/..", "p/ok/../../../x"]
    for key in bad + ["p/fine", "p/folder/"]:
        req = urllib.request.Request("%s/evil/%s" % (server.url, key), data=b"x", method="PUT")
        # Unsigned: the server runs with --anonymous for this scenario.
        urllib.request.urlopen(req, timeout=30).close()
    listed = {x["key"] for x in json_lines(cli.ok("ls", "--recursive", "--json", "s3://evil/"))}
    stored = [k for k in bad if k in listed]
    expect(len(stored) >= 2, "the server stored keys with .. and // as they are: %s" % sorted(listed))
    target = os.path.join(tmp, "inner", "target")
    os.makedirs(target)
    r = cli.run("cp", "-r", "s3://evil/p", target)
    err = r.stderr.decode()
    expect(r.returncode == 1, "cp -r with unsafe keys: exit 1")
    for key in stored:
        expect(key in err, "the summary names %r" % key)
    expect(not os.path.exists(os.path.join(tmp, "escaped"))
           and not os.path.exists(os.path.join(tmp, "inner", "escaped")) and not os.path.exists(os.path.join(tmp, "x")),
           "nothing was written outside the target")
    expect(os.path.isfile(os.path.join(target, "fine")), "the safe key was downloaded")
    # A directory on the way that is a symbolic link out of the target.
    outside = os.path.join(tmp, "outside")
    os.makedirs(outside)
    os.symlink(outside, os.path.join(target, "link"))
    req = urllib.request.Request("%s/evil/p/link/planted" % server.url, data=b"x", method="PUT")
    urllib.request.urlopen(req, timeout=30).close()
    r = cli.run("cp", "-r", "s3://evil/p", target)
    expect(r.returncode == 1 and not os.listdir(outside) and b"link/planted" in r.stderr,
           "a key through a symbolic link out of the target is refused")


def unreadable(binary, server, tmp):
    """One file that cannot be read among many: the rest complete, exit 1, the summary names it."""
    cli = Cli(binary, server, tmp)
    src = os.path.join(tmp, "src")
    make_tree(src, ["f%02d" % i for i in range(30)])
    secret = os.path.join(src, "f13")
    os.chmod(secret, 0)
    for d in (tmp, src):
        os.chmod(d, 0o755)
    cli.ok("mb", "s3://unread")
    drop = None
    if os.geteuid() == 0:  # root reads any file: run the upload as nobody
        drop = lambda: (os.setgid(65534), os.setuid(65534))  # noqa: E731
    r = cli.run("cp", "-r", src, "s3://unread/", "--json", preexec_fn=drop)
    lines = json_lines(r)
    expect(r.returncode == 1, "exit 1 (%d): %s" % (r.returncode, r.stderr.decode()[-300:]))
    failed = [x for x in lines[:-1] if x["error"]]
    expect(len(failed) == 1 and failed[0]["source"] == secret, "one object failed: f13")
    expect(lines[-1]["files"] == 29 and lines[-1]["failed"] == 1, "the summary: 29 done, 1 failed")
    r = cli.run("cp", "-r", src, "s3://unread/", preexec_fn=drop)
    expect(r.returncode == 1 and secret.encode() in r.stderr and b"29 of 30 done" in r.stderr,
           "the text summary names it: %s" % r.stderr.decode()[-300:])
    listed = json_lines(cli.ok("ls", "--json", "s3://unread/"))
    expect(len(listed) == 29, "29 objects stored")


def sigint(binary, server, tmp):
    """SIGINT mid-job: no partial files; the summary says what completed; exit 130."""
    cli = Cli(binary, server, tmp)
    src, down = os.path.join(tmp, "src"), os.path.join(tmp, "down")
    make_tree(src, ["o%03d" % i for i in range(120)], size=2 * MIB)
    cli.ok("mb", "s3://int")
    cli.ok("cp", "-r", src, "s3://int/")
    cmd = [binary, "cp", "-r", "s3://int/", down, "--jobs", "2", "--json", "--endpoint", server.url,
           "--access-key", AK, "--secret-key", SK]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli.env)
    first = proc.stdout.readline()  # one object done: the job is under way
    proc.send_signal(signal.SIGINT)
    out, err = proc.stdout.read(), proc.stderr.read()  # (communicate() would skip what readline buffered)
    proc.wait(timeout=60)
    text = (first + out).decode()
    lines = [json.loads(x) for x in text.splitlines() if x.strip()]
    summary = lines[-1]
    expect(proc.returncode == 130, "exit 130 after SIGINT (%d): %s" % (proc.returncode, err.decode()[-300:]))
    expect(summary["interrupted"] and 0 < summary["files"] < 120, "the summary: %d of 120 done, interrupted"
           % summary["files"])
    names = os.listdir(down)
    expect(not [n for n in names if "partial" in n or n.startswith(".")], "no partial files: %s" % names[:5])
    expect(len(names) == summary["files"], "the files present are the ones it says completed (%d)" % len(names))
    for name in names:
        expect(digest(os.path.join(down, name)) == digest(os.path.join(src, name)), "%s is complete" % name)


def timeout(binary, server, tmp):
    """A server that accepts and never answers: the command fails at --timeout, naming host:port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    held = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                pass
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        cli = Cli(binary, None, tmp)
        for args in (["ls", "s3://b"], ["cp", "s3://b/k", os.path.join(tmp, "k")], ["stat", "s3://b/k"]):
            started = time.monotonic()
            r = cli.run(*args, "--endpoint", "http://127.0.0.1:%d" % port, "--timeout", "1.5", timeout=60)
            took = time.monotonic() - started
            err = r.stderr.decode()
            expect(r.returncode == 1 and 1.4 < took < 10 and ("127.0.0.1:%d" % port) in err and "no answer" in err,
                   "sluice %s fails after %.1f s: %s" % (args[0], took, err.strip()[-200:]))
        expect(len(held) >= 3, "the server accepted the connections")
    finally:
        stop.set()
        thread.join()
        for s in held:
            s.close()
        listener.close()

    # A listener whose backlog is full and who never accepts: the connect itself waits.
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    port = full.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):  # fill the accept queue (its length is the backlog + 1 or so)
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            fillers.append(c)
        time.sleep(0.2)
        started = time.monotonic()
        r = Cli(binary, None, tmp).run("ls", "s3://b", "--endpoint", "http://127.0.0.1:%d" % port,
                                       "--connect-timeout", "1", timeout=60)
        took = time.monotonic() - started
        err = r.stderr.decode()
        expect(r.returncode == 1 and 0.9 < took < 10 and ("no TCP connection to 127.0.0.1:%d within 1 s" % port) in err,
               "a connect that is never completed fails at --connect-timeout after %.1f s: %s" % (took, err.strip()))
    finally:
        for c in fillers:
            c.close()
        full.close()


def errors(binary, server, tmp):
    """Errors that name the real cause; profiles; AWS_ENDPOINT_URL; --version."""
    cli = Cli(binary, server, tmp)
    cli.ok("mb", "s3://err")
    r = cli.run("cp", "s3://missing-bucket/k", os.path.join(tmp, "k"))
    expect(r.returncode == 1 and b"NoSuchBucket" in r.stderr, "a GET from a missing bucket: NoSuchBucket: %s" % r.stderr)
    r = cli.run("cat", "s3://err/nope")
    expect(r.returncode == 1 and b"NoSuchKey" in r.stderr, "a missing key: NoSuchKey")
    # A web server that is not S3.
    www = os.path.join(tmp, "www")
    os.makedirs(www)
    web = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", www],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = web.stdout.readline()
        port = int(line.split("port ")[1].split()[0])
        plain = Cli(binary, None, tmp)
        r = plain.run("ls", "s3://err", "--endpoint", "http://127.0.0.1:%d" % port)
        expect(r.returncode == 1 and b"without an S3 error: is it an S3 server?" in r.stderr,
               "a 404 web page: 'is it an S3 server?': %s" % r.stderr)
    finally:
        web.kill()
        web.wait()
    # No credentials: said before anything is sent.
    r = cli.run("ls", "s3://err", keys=False)
    expect(r.returncode == 2 and b"no credentials" in r.stderr, "no credentials: said, exit 2")
    r = cli.run("ls", "s3://err", "--no-sign-request", keys=False)
    expect(r.returncode == 1 and b"AccessDenied" in r.stderr, "--no-sign-request sends it unsigned: AccessDenied")
    # Profiles and AWS_ENDPOINT_URL.
    aws = os.path.join(tmp, ".aws")
    os.makedirs(aws)
    with open(os.path.join(aws, "credentials"), "w") as f:
        f.write("[default]\naws_access_key_id = WRONG\naws_secret_access_key = wrong\n\n"
                "[bulk]\naws_access_key_id = %s\naws_secret_access_key = %s\n" % (AK, SK))
    with open(os.path.join(aws, "config"), "w") as f:
        f.write("[profile bulk]\nregion = us-east-1\nendpoint_url = %s\n" % server.url)
    bare = Cli(binary, None, tmp)
    r = bare.run("ls", "s3://err", "--profile", "bulk", keys=False)
    expect(r.returncode == 0, "--profile bulk: keys and endpoint_url from ~/.aws: %s" % r.stderr)
    r = bare.run("ls", "s3://err", keys=False, env={"AWS_PROFILE": "bulk"})
    expect(r.returncode == 0, "AWS_PROFILE=bulk")
    r = bare.run("ls", "s3://err", keys=False, env={"AWS_ENDPOINT_URL": server.url})
    expect(r.returncode == 1 and b"InvalidAccessKeyId" in r.stderr, "the default profile's keys, AWS_ENDPOINT_URL")
    r = bare.run("ls", "s3://err", "--profile", "nope", keys=False)
    expect(r.returncode == 2 and b"'nope'" in r.stderr, "an unknown profile is named")
    r = bare.run("ls", "--endpoint", "ftp://x", keys=True)
    expect(r.returncode == 2 and b"--endpoint" in r.stderr, "a bad endpoint names --endpoint: %s" % r.stderr)
    r = subprocess.run([binary, "--version"], capture_output=True, text=True)
    expect(r.returncode == 0 and r.stdout.startswith("sluice ") and r.stdout.split()[1][0].isdigit(), "--version")


def docs(binary, server, tmp):
    """The completions and the man page generated from the help text (scripts/cli_docs.py, as the build runs it)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "cli_docs.py")
    out = os.path.join(tmp, "share")
    subprocess.run([sys.executable, script, binary, out], check=True, timeout=120)
    with open(os.path.join(out, "sluice.bash")) as f:
        completion = f.read()
    for command in ("cp", "sync", "rm", "rb", "cat", "stat", "ls", "uploads", "serve"):
        expect(re.search(r"^    %s\) opts=" % command, completion, re.M), "bash completes sluice %s" % command)
    cp_line = next(line for line in completion.splitlines() if line.strip().startswith("cp)"))
    expect(all(o in cp_line for o in ("--recursive", "--jobs", "--include", "--timeout", "--profile")),
           "bash completes cp's options: %s" % cp_line.strip()[:200])
    expect(subprocess.run(["bash", "-n", os.path.join(out, "sluice.bash")]).returncode == 0, "bash -n accepts it")
    with open(os.path.join(out, "_sluice")) as f:
        zsh = f.read()
    expect(zsh.startswith("#compdef sluice") and "'sync:" in zsh and "--delete" in zsh, "zsh completion")
    with open(os.path.join(out, "sluice.1")) as f:
        page = f.read()
    expect(page.startswith(".TH SLUICE 1") and ".SS cp" in page and "\\-\\-connect\\-timeout" in page,
           "the man page has every command and option")
    expect(".SS uploads" in page and "\\-\\-shutdown\\-grace" in page and "\\-\\-upload\\-expiry" in page,
           "and the uploads command and serve's --shutdown-grace and --upload-expiry")
    if subprocess.run(["which", "man"], capture_output=True).returncode == 0:
        r = subprocess.run(["man", "-l", os.path.join(out, "sluice.1")], capture_output=True, text=True,
                           env=dict(os.environ, MANPAGER="cat", PAGER="cat"))
        expect(r.returncode == 0 and "sync" in r.stdout, "man renders it")


SCENARIOS = {"docs": docs, "copy": copy, "sync": sync, "unsafe": unsafe, "unreadable": unreadable, "sigint": sigint,
             "timeout": timeout, "errors": errors}


def main():
    binary, name = sys.argv[1], sys.argv[2]
    body = SCENARIOS[name]
    if name == "unsafe":
        # Unsigned PUTs (keys a signing client would normalise) need an anonymous-capable server.
        import common
        original = common.Server.__init__

        def init(self, *a, **kw):
            original(self, *a, **kw)
            self.extra.append("--anonymous")
        common.Server.__init__ = init
    return run_scenario(binary, "cli bulk: " + name, "sluice-cli-bulk-", AK, SK,
                        lambda server, tmp: body(binary, server, tmp))


if __name__ == "__main__":
    sys.exit(main())
