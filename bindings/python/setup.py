# SPDX-License-Identifier: Apache-2.0
"""Builds sluice._sluice against libsluice_c: an installed sluice (SLUICE_PREFIX, or pkg-config
sluice-c) or the source tree this folder is in (SLUICE_BUILD_DIR). README.md says more."""
import os
import re
import shlex
import shutil
import subprocess

from setuptools import Extension, setup

try:
    import pybind11
    pybind11_include = pybind11.get_include()
except ImportError:  # headers only (a machine without the pybind11 module): SLUICE_PYBIND11_INCLUDE
    pybind11_include = os.environ.get("SLUICE_PYBIND11_INCLUDE")
    if not pybind11_include:
        raise SystemExit("sluice: pybind11 is missing (Debian: python3-pybind11; or SLUICE_PYBIND11_INCLUDE=DIR)")

here = os.path.dirname(os.path.abspath(__file__))
source_tree = os.path.normpath(os.path.join(here, "..", ".."))


def pkg_config(*args):
    if not shutil.which("pkg-config"):
        return None
    r = subprocess.run(["pkg-config"] + list(args), capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def from_prefix(prefix):
    for lib in ("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"):
        pc = os.path.join(prefix, lib, "pkgconfig")
        if os.path.exists(os.path.join(pc, "sluice-c.pc")):
            os.environ["PKG_CONFIG_PATH"] = pc + os.pathsep + os.environ.get("PKG_CONFIG_PATH", "")
            return from_pkg_config()
    raise SystemExit("SLUICE_PREFIX=%s holds no lib*/pkgconfig/sluice-c.pc" % prefix)


def from_pkg_config():
    if pkg_config("--exists", "sluice-c") is None:
        return None
    include_dirs = [f[2:] for f in shlex.split(pkg_config("--cflags-only-I", "sluice-c")) if f.startswith("-I")]
    library_dirs = [f[2:] for f in shlex.split(pkg_config("--libs-only-L", "sluice-c")) if f.startswith("-L")]
    return include_dirs, library_dirs, pkg_config("--modversion", "sluice-c")


def from_source_tree():
    cmake_lists = os.path.join(source_tree, "CMakeLists.txt")
    if not os.path.exists(os.path.join(source_tree, "include", "sluice", "sluice.h")):
        return None
    candidates = [os.environ["SLUICE_BUILD_DIR"]] if os.environ.get("SLUICE_BUILD_DIR") else [
        os.path.join(source_tree, "build", d) for d in ("release", "dev")]
    for build in candidates:
        lib = os.path.join(os.path.abspath(build), "src")
        if os.path.exists(os.path.join(lib, "libsluice_c.so")):
            with open(cmake_lists) as f:
                version = re.search(r"project\(sluice VERSION ([0-9.]+)", f.read()).group(1)
            return [os.path.join(source_tree, "include")], [lib], version
    return None


def locate():
    if os.environ.get("SLUICE_PREFIX"):
        return from_prefix(os.environ["SLUICE_PREFIX"])
    found = from_pkg_config() or from_source_tree()
    if found is None:
        raise SystemExit("sluice: libsluice_c not found: set SLUICE_PREFIX to an installation, put its "
                         "lib/pkgconfig on PKG_CONFIG_PATH, or build the source tree (cmake --preset release "
                         "&& cmake --build build/release --target sluice_c)")
    return found


include_dirs, library_dirs, version = locate()
print("sluice: building against libsluice_c %s in %s" % (version, " ".join(library_dirs)))

setup(
    version=version,
    ext_modules=[Extension(
        "sluice._sluice",
        sources=[os.path.join("src", "_sluice.cpp")],
        include_dirs=include_dirs + [pybind11_include],
        library_dirs=library_dirs,
        runtime_library_dirs=library_dirs,
        libraries=["sluice_c"],
        extra_compile_args=["-std=c++20", "-fvisibility=hidden"],
        language="c++",
    )],
)
