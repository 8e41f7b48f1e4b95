#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""clang-tidy over sources of a configured build, remembering the sources that passed.

    scripts/tidy.py BUILD_DIR SOURCE...

A source passes when clang-tidy exits 0 (.clang-tidy makes every warning an error). A pass is remembered under a
key that holds everything its result depends on: the clang-tidy version, every tracked
.clang-tidy file, the extra arguments and the source's translation unit as clang preprocesses
it with its compile command's flags (the source and every header it includes, after the
preprocessor has chosen its branches; the checkout's and the build's folders written as
placeholders, so another clone of the same commit finds the same key). A remembered pass is
not run again: like ccache for the compiler, the same input gives the same result. Failures
are never remembered.

The cache is SLUICE_TIDY_CACHE (default: $XDG_CACHE_HOME/sluice-tidy or ~/.cache/sluice-tidy);
SLUICE_TIDY_CACHE=off runs clang-tidy every time."""

import hashlib
import json
import os
import shlex
import subprocess
import sys

# The dev build is GCC's; Asio 1.18 detects coroutines on GCC only, so tell clang-tidy.
EXTRA_ARGS = ["-DBOOST_ASIO_HAS_CO_AWAIT=1", "-DBOOST_ASIO_HAS_STD_COROUTINE=1"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cache_dir():
    configured = os.environ.get("SLUICE_TIDY_CACHE")
    if configured == "off":
        return None
    if configured:
        return configured
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sluice-tidy")


def flags_of(entry):
    """The entry's compile flags, without the compiler, the output and dependency files, `-c`
    and colour; None when the entry cannot be read."""
    args = entry.get("arguments") or shlex.split(entry.get("command", ""))
    if not args:
        return None
    flags, skip = [], False
    for arg in args[1:]:
        if skip:
            skip = False
        elif arg in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
        elif arg not in ("-c", "-MD", "-MMD") and not arg.startswith("-fdiagnostics-color"):
            flags.append(arg)
    return flags


def preprocess_command(entry):
    """The entry's compile command turned into `clang++ -E` with the same flags."""
    flags = flags_of(entry)
    return None if flags is None else ["clang++"] + flags + EXTRA_ARGS + ["-E", "-Wno-unknown-warning-option"]


def entry_for(source, entries):
    """The source's compile command; for a source the build compiles only through another file
    (src/s3/server/unity.cpp includes the server's parts), a neighbour's command in the same
    folder with the source put in its place, as clang-tidy would interpolate it."""
    if source in entries:
        return entries[source], True
    folder = os.path.dirname(source)
    for path, entry in sorted(entries.items()):
        if os.path.dirname(path) == folder:
            args = entry.get("arguments") or shlex.split(entry.get("command", ""))
            args = [source if os.path.abspath(os.path.join(entry["directory"], a)) == path else a for a in args]
            return {"directory": entry["directory"], "file": source, "arguments": args}, False
    return None, False


def tidy_command(build, source, entry, exact):
    """clang-tidy on the source: with the build's database when it holds the source, else with
    the compile command entry_for() made (after `--`), the same flags its key was made with."""
    command = ["clang-tidy", "--quiet"] + ["--extra-arg=" + a for a in EXTRA_ARGS]
    if exact or entry is None:
        return command + ["-p", build, source]
    flags = [arg for arg in flags_of(entry) if arg != source]
    return command + [source, "--"] + flags


def key_of(entry, build, version, configs):
    command = preprocess_command(entry)
    if command is None:
        return None
    run = subprocess.run(command, cwd=entry["directory"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    if run.returncode != 0:
        return None
    digest = hashlib.sha256()
    for part in (version, configs, " ".join(EXTRA_ARGS).encode(), " ".join(command).encode(), run.stdout):
        # Placeholders for the two folders: the same commit in another clone gives the same key.
        digest.update(part.replace(build.encode(), b"<build>").replace(ROOT.encode(), b"<source>"))
        digest.update(b"\0")
    return digest.hexdigest()


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    build = os.path.abspath(sys.argv[1])
    sources = [os.path.abspath(os.path.join(ROOT, s)) for s in sys.argv[2:]]
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = {}
        for entry in json.load(f):  # the first entry of a file is the one clang-tidy uses
            entries.setdefault(os.path.abspath(os.path.join(entry["directory"], entry["file"])), entry)
    cache = cache_dir()
    version = subprocess.run(["clang-tidy", "--version"], stdout=subprocess.PIPE, check=True).stdout
    tracked = subprocess.run(["git", "ls-files", "*.clang-tidy", ".clang-tidy"], cwd=ROOT, stdout=subprocess.PIPE,
                             text=True, check=True).stdout.split()
    configs = b"".join(open(os.path.join(ROOT, path), "rb").read() for path in sorted(tracked))
    failed = 0
    for source in sources:
        name = os.path.relpath(source, ROOT)
        entry, exact = entry_for(source, entries)
        key = key_of(entry, build, version, configs) if cache and entry else None
        marker = os.path.join(cache, key[:2], key) if key else None
        if marker and os.path.exists(marker):
            print("tidy: %s: passed before with the same input (%s)" % (name, marker))
            continue
        run = subprocess.run(tidy_command(build, source, entry, exact), cwd=entry["directory"] if entry else None,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        sys.stdout.write(run.stdout)
        if run.returncode != 0:  # .clang-tidy: WarningsAsErrors '*'
            failed += 1
            print("tidy: %s: FAILED (exit %d)" % (name, run.returncode))
            continue
        print("tidy: %s: passed" % name)
        if marker:
            os.makedirs(os.path.dirname(marker), exist_ok=True)
            with open(marker + ".tmp", "w") as f:
                f.write(name + "\n")
            os.replace(marker + ".tmp", marker)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
