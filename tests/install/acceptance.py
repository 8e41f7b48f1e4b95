# SPDX-License-Identifier: Apache-2.0
"""The installed packages, used as an embedder would use them (issue 44), one mode per CTest test:

  acceptance.py prefix  BUILD PREFIX        cmake --install BUILD into a fresh PREFIX (the fixture)
  acceptance.py symbols LIBSLUICE_C         libsluice_c exports sluice_* only and has its SONAME
  acceptance.py version SOURCE PREFIX       0.2.0 from project(VERSION) everywhere it is reported
  acceptance.py c       SOURCE PREFIX WORK  a C program built through pkg-config (sluice-c)
  acceptance.py cmake   SOURCE PREFIX WORK  a CMake consumer of sluice::c and sluice::s3, no nvcc on PATH
  acceptance.py python  SOURCE PREFIX WORK  pip install ./bindings/python into a fresh venv; HTTPS ranged GET
  acceptance.py go      SOURCE PREFIX WORK  a Go module outside the tree (replace -> bindings/go)

Every consumer runs outside the source and build trees against the installed `sluice serve` on
loopback, over HTTP and HTTPS (a CA made here with the openssl CLI, and a second CA the server's
certificate does not chain to). Exit 0: passed; 77: skipped, the reason printed (a tool missing).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
AK, SK = "AK", "SK"


def say(*args):
    print(*args, flush=True)


def run(cmd, **kw):
    say("+", " ".join(str(c) for c in cmd))
    r = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.stdout:
        say(r.stdout.rstrip())
    if r.returncode != 0:
        raise SystemExit("FAILED (exit %d): %s" % (r.returncode, " ".join(str(c) for c in cmd)))
    return r.stdout


def skip(reason):
    say("SKIP:", reason)
    sys.exit(SKIP)


def project_version(source):
    with open(os.path.join(source, "CMakeLists.txt")) as f:
        return re.search(r"project\(sluice VERSION ([0-9.]+)", f.read()).group(1)


def libdir(prefix):
    for d in ("lib", "lib64", "lib/x86_64-linux-gnu"):
        if os.path.exists(os.path.join(prefix, d, "pkgconfig", "sluice-c.pc")):
            return os.path.join(prefix, d)
    raise SystemExit("no lib/pkgconfig/sluice-c.pc under " + prefix + " (did install.prefix run?)")


def env_for(prefix, **extra):
    """The environment of a consumer: the installed package found through pkg-config and CMake's
    prefix path, the installed library at run time, and no nvcc on PATH."""
    env = dict(os.environ)
    lib = libdir(prefix)
    env["PKG_CONFIG_PATH"] = os.path.join(lib, "pkgconfig")
    env["CMAKE_PREFIX_PATH"] = prefix
    env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    path = [p for p in env.get("PATH", "").split(":") if p and not os.path.exists(os.path.join(p, "nvcc"))]
    env["PATH"] = ":".join(path)
    env.update(extra)
    return env


class Server:
    """The installed `sluice serve`, HTTP and HTTPS on ephemeral loopback ports, HTTP bodies only."""

    def __init__(self, prefix, work):
        self.work = work
        os.makedirs(work, exist_ok=True)
        self.ca, self.wrong_ca = self.make_certificates()
        cmd = [os.path.join(prefix, "bin", "sluice"), "serve", "--root", os.path.join(work, "store"),
               "--listen", "127.0.0.1:0", "--access-key", AK, "--secret-key", SK, "--fabric", "off",
               "--grant-socket", "off", "--tls-cert", os.path.join(work, "server.pem"),
               "--tls-key", os.path.join(work, "server.key"), "--tls-listen", "127.0.0.1:0"]
        say("+", " ".join(cmd))
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=env_for(prefix))
        self.http = self.https = None
        lines = []
        for line in self.proc.stdout:
            lines.append(line.rstrip())
            m = re.search(r"https on [0-9.]+:(\d+)", line)
            if m:
                self.https = "https://localhost:%s" % m.group(1)
            m = re.search(r"listening on ([0-9.]+:\d+)", line)
            if m:
                self.http = "http://" + m.group(1)
                break
        if not self.http or not self.https:
            self.stop()
            raise SystemExit("sluice serve did not start:\n" + "\n".join(lines))
        say("server:", self.http, self.https)

    def make_certificates(self):
        """A CA, the server's certificate for localhost and 127.0.0.1 signed by it, and a second
        CA that signed nothing (the wrong CA)."""
        if not shutil.which("openssl"):
            skip("openssl is not installed (scripts/deps.sh installs it)")
        w = lambda name: os.path.join(self.work, name)  # noqa: E731
        for ca in ("ca", "wrong-ca"):
            run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", w(ca + ".key"), "-out",
                 w(ca + ".pem"), "-days", "2", "-subj", "/CN=sluice test " + ca])
        run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", w("server.key"), "-out", w("server.csr"),
             "-subj", "/CN=localhost"])
        with open(w("server.ext"), "w") as f:
            f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        run(["openssl", "x509", "-req", "-in", w("server.csr"), "-CA", w("ca.pem"), "-CAkey", w("ca.key"),
             "-CAcreateserial", "-out", w("server.pem"), "-days", "2", "-extfile", w("server.ext")])
        return w("ca.pem"), w("wrong-ca.pem")

    def args(self):
        return [self.http, self.https, self.ca, self.wrong_ca, AK, SK]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def with_server(prefix, work, body):
    server = Server(prefix, os.path.join(work, "server"))
    try:
        body(server)
    finally:
        server.stop()


def fresh(work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    return work


def mode_prefix(build, prefix):
    shutil.rmtree(prefix, ignore_errors=True)
    run(["cmake", "--install", build, "--prefix", prefix])
    lib = libdir(prefix)
    for need in ("include/sluice/sluice.h", "include/sluice/path.hpp", "bin/sluice",
                 "share/doc/sluice/LICENSE", "lib/cmake/sluice/sluiceConfig.cmake"):
        if not os.path.exists(os.path.join(prefix, need)):
            raise SystemExit("not installed: " + need)
    if os.path.exists(os.path.join(prefix, "src")) or not os.path.islink(os.path.join(lib, "libsluice_c.so")):
        raise SystemExit("the installation's layout is wrong")


def mode_symbols(library):
    if not shutil.which("nm") or not shutil.which("readelf"):
        skip("nm/readelf (binutils) are not installed")
    out = run(["nm", "-D", "--defined-only", library])
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    foreign = [n for n in names if not n.startswith("sluice_")]
    if foreign:
        raise SystemExit("libsluice_c exports %d symbols that are not sluice_*: %s" % (len(foreign), foreign[:20]))
    if len(names) < 20:
        raise SystemExit("libsluice_c exports only %d symbols" % len(names))
    soname = re.search(r"SONAME.*\[(.*)\]", run(["readelf", "-d", library]))
    if not soname or not re.fullmatch(r"libsluice_c\.so\.\d+", soname.group(1)):
        raise SystemExit("libsluice_c has no SONAME libsluice_c.so.MAJOR")
    say("ok: %d symbols, all sluice_*; SONAME %s" % (len(names), soname.group(1)))


def mode_version(source, prefix):
    want = project_version(source)
    got = {"sluice --version": run([os.path.join(prefix, "bin", "sluice"), "--version"], env=env_for(prefix)).split()[-1],
           "sluice-c.pc": run(["pkg-config", "--modversion", "sluice-c"], env=env_for(prefix)).strip(),
           "sluice.pc": run(["pkg-config", "--modversion", "sluice"], env=env_for(prefix)).strip()}
    with open(os.path.join(source, "bindings", "go", "version.go")) as f:
        got["bindings/go BindingVersion"] = re.search(r'BindingVersion = "([^"]+)"', f.read()).group(1)
    with open(os.path.join(source, "CHANGELOG.md")) as f:
        got["CHANGELOG.md"] = re.search(r"^## \[([0-9.]+)\]", f.read(), re.M).group(1)
    bad = {k: v for k, v in got.items() if v != want}
    for k, v in got.items():
        say("%-28s %s" % (k, v))
    if bad:
        raise SystemExit("not %s (project(VERSION)): %s" % (want, bad))


def mode_c(source, prefix, work):
    if not shutil.which("pkg-config") or not shutil.which("cc"):
        skip("pkg-config or cc is not installed")
    work = fresh(work)
    env = env_for(prefix)
    flags = run(["pkg-config", "--cflags", "--libs", "sluice-c"], env=env).split()
    exe = os.path.join(work, "c_consumer")
    run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", os.path.join(source, "tests/install/c_consumer.c"), "-o", exe]
        + flags, env=env, cwd=work)
    with_server(prefix, work, lambda s: run([exe] + s.args(), env=env, cwd=work))


def mode_cmake(source, prefix, work):
    work = fresh(work)
    # No nvcc on PATH, and a CUDA toolkit that cannot be found: the package must not need it.
    env = env_for(prefix)
    gen = os.environ.get("SLUICE_GENERATOR", "Ninja" if shutil.which("ninja") else "Unix Makefiles")
    run(["cmake", "-S", os.path.join(source, "tests/install/consumer"), "-B", os.path.join(work, "build"), "-G", gen,
         "-DCMAKE_PREFIX_PATH=" + prefix, "-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON",
         "-DCMAKE_CXX_COMPILER=" + os.environ.get("SLUICE_CXX_COMPILER", "c++"),
         "-DCMAKE_CXX_FLAGS=" + os.environ.get("SLUICE_CXX_FLAGS", ""),
         "-DCMAKE_EXE_LINKER_FLAGS=" + os.environ.get("SLUICE_EXE_LINKER_FLAGS", "")], env=env, cwd=work)
    run(["cmake", "--build", os.path.join(work, "build")], env=env, cwd=work)
    exe = os.path.join(work, "build", "consumer")
    with_server(prefix, work, lambda s: run([exe] + s.args(), env=env, cwd=work))


def mode_python(source, prefix, work):
    python = os.environ.get("SLUICE_PYTHON", "/usr/bin/python3")
    probe = subprocess.run([python, "-c", "import venv, ensurepip, setuptools, pybind11"], capture_output=True)
    if probe.returncode != 0:
        skip("%s lacks venv/ensurepip, setuptools or pybind11 (Debian: python3-venv python3-setuptools "
             "python3-pybind11; scripts/deps.sh installs them)" % python)
    work = fresh(work)
    venv = os.path.join(work, "venv")
    run([python, "-m", "venv", "--system-site-packages", venv])
    vpython = os.path.join(venv, "bin", "python")
    # A copy outside the source tree, as a user's checkout or sdist would be: nothing is written
    # into the repository.
    package = os.path.join(work, "python-src")
    shutil.copytree(os.path.join(source, "bindings/python"), package,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    env = env_for(prefix, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    run([vpython, "-m", "pip", "install", "--no-build-isolation", "--no-deps", package], env=env, cwd=work)
    with_server(prefix, work, lambda s: run([vpython, os.path.join(source, "tests/install/python_consumer.py"),
                                             project_version(source)] + s.args(), env=env, cwd=work))


def mode_go(source, prefix, work):
    go = shutil.which("go")
    if not go:
        skip("go is not installed (golang-go: scripts/deps.sh)")
    work = fresh(work)
    module = os.path.join(work, "consumer")
    os.makedirs(module)
    shutil.copy(os.path.join(source, "tests/install/go_consumer/main.go"), module)
    with open(os.path.join(module, "go.mod"), "w") as f:
        f.write("module example.com/sluice-consumer\n\ngo 1.19\n\nrequire sluice.dev/sluice v0.0.0\n\n"
                "replace sluice.dev/sluice => %s\n" % os.path.join(source, "bindings/go"))
    gocache = os.environ.get("SLUICE_GOCACHE") or os.path.join(work, "gocache")
    env = env_for(prefix, CGO_ENABLED="1", GOFLAGS="-mod=mod", GOPROXY="off", GOTOOLCHAIN="local",
                  GO111MODULE="on", GOCACHE=gocache, GOPATH=os.path.join(work, "gopath"))
    env.pop("CGO_CFLAGS", None)
    env.pop("CGO_LDFLAGS", None)
    exe = os.path.join(work, "go_consumer")
    run([go, "vet", "./..."], env=env, cwd=module)
    run([go, "build", "-o", exe, "."], env=env, cwd=module)
    with_server(prefix, work, lambda s: run([exe, project_version(source)] + s.args(), env=env, cwd=work))


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    mode, args = sys.argv[1], sys.argv[2:]
    modes = {"prefix": mode_prefix, "symbols": mode_symbols, "version": mode_version, "c": mode_c,
             "cmake": mode_cmake, "python": mode_python, "go": mode_go}
    if mode not in modes:
        raise SystemExit(__doc__)
    args = [os.path.abspath(a) for a in args]
    os.chdir(tempfile.gettempdir())  # outside the source and build trees
    modes[mode](*args)
    say("PASSED:", mode)


if __name__ == "__main__":
    main()
