#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Each test of a configured build tree, N at a time, with its wall time and the CPU time
(user + system) of its whole process tree: what `ctest` does not report, and what decides how
long the suite takes on a machine of few cores.

    scripts/test_cpu.py BUILD_DIR [JOBS] [OUT.tsv] [--exclude SUBSTRING]...

Runs the tests as `ctest --show-only=json-v1` lists them (command, working directory,
ENVIRONMENT), each under wait4(2), so the CPU time counts every descendant the test waited for.
Set the test preset's environment yourself (the asan preset's ASAN_OPTIONS, UBSAN_OPTIONS).
Prints a total; writes one line per test (name, wall s, CPU s, exit code), most CPU first."""

import concurrent.futures
import json
import os
import subprocess
import sys
import time


def main():
    args = [a for a in sys.argv[1:]]
    excludes = []
    while "--exclude" in args:
        i = args.index("--exclude")
        excludes.append(args[i + 1])
        del args[i:i + 2]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    build = os.path.abspath(args[0])
    jobs = int(args[1]) if len(args) > 1 else os.cpu_count()
    out = args[2] if len(args) > 2 else os.path.join(build, "test_cpu.tsv")
    listing = json.loads(subprocess.check_output(["ctest", "--show-only=json-v1"], cwd=build))
    tests = []
    for test in listing["tests"]:
        if "command" not in test or any(e in test["name"] for e in excludes):
            continue
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        env = dict(os.environ)
        env.update(kv.split("=", 1) for kv in props.get("ENVIRONMENT", []))
        tests.append((test["name"], test["command"], props.get("WORKING_DIRECTORY", build), env))

    def run(test):
        name, command, cwd, env = test
        start = time.monotonic()
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        _, status, usage = os.wait4(proc.pid, 0)
        return name, time.monotonic() - start, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(run, tests))
    with open(out, "w") as f:
        for name, wall, cpu, code in sorted(results, key=lambda r: -r[2]):
            f.write("%s\t%.1f\t%.1f\t%d\n" % (name, wall, cpu, code))
    print("%d tests: CPU %.0f s, wall %.0f s summed over tests; per test: %s" %
          (len(results), sum(r[2] for r in results), sum(r[1] for r in results), out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
