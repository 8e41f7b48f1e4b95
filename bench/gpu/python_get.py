#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""GET → CUDA tensor through the Python module against the same GET through the C API underneath,
in one run against one `sluice serve` (the same object, the same grant socket): the cost of the
Python layer (pybind11, the GIL released, __cuda_array_interface__) on the GPU host.

  python_get.py SLUICE_BINARY CAPI_GET [SIZE_MIB (1024)] [REPEAT (7)]

Starts `sluice serve` with a grant socket, PUTs a SIZE_MIB object of random bytes, then runs the
C program (capi_get, in its own process), the Python loop, and the C program again; each does one
untimed GET (the first GET registers the server's page cache) and REPEAT timed ones into device
memory, checks the bytes once, and reports its median. Prints the ratio Python / C (the better of
the two C runs as the baseline). Exit 0 when it ran, whatever the ratio; 1 on an error."""
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "integration"))
from common import Server  # noqa: E402

import numpy as np  # noqa: E402
import sluice  # noqa: E402
import torch  # noqa: E402

MIB = 1 << 20


def main():
    binary, capi_get = sys.argv[1], sys.argv[2]
    size = (int(sys.argv[3]) if len(sys.argv) > 3 else 1024) * MIB
    repeat = int(sys.argv[4]) if len(sys.argv) > 4 else 7
    with tempfile.TemporaryDirectory(prefix="sluice-pybench-", dir="/tmp") as root:
        sock = os.path.join(root, "grants.sock")
        server = Server(binary, os.path.join(root, "store"), "AK", "SK", extra=["--grant-socket", sock]).start()
        try:
            client = sluice.Client(server.url, "AK", "SK", grant_socket=sock)
            client.create_bucket("bench")
            data = np.random.default_rng(11).integers(0, 256, size=size, dtype=np.uint8)
            client.put_object("bench", "object", data)

            def c_run():
                r = subprocess.run([capi_get, server.url, "AK", "SK", sock, "bench", "object", str(size), str(repeat)],
                                   capture_output=True, text=True, timeout=300)
                if r.returncode != 0:
                    raise RuntimeError("capi_get failed: %s %s" % (r.stdout, r.stderr))
                print("  " + r.stdout.strip())
                return float(r.stdout.split()[2])

            tensor = torch.empty(size, dtype=torch.uint8, device="cuda")
            c_first = c_run()
            client.get_object("bench", "object", tensor)  # untimed
            torch.cuda.synchronize()
            if not np.array_equal(tensor.cpu().numpy(), data):
                raise RuntimeError("the tensor does not hold the object")
            seconds = []
            for _ in range(repeat):
                start = time.perf_counter()
                client.get_object("bench", "object", tensor)
                seconds.append(time.perf_counter() - start)
            py = statistics.median(seconds)
            print("  python: median %.5f s, GiB/s %.2f, path %s" % (py, size / py / (1 << 30),
                                                                   client.last_report["path"]))
            c_second = c_run()
            c = min(c_first, c_second)
            print("python GET -> CUDA tensor vs the C API, %d MiB, median of %d: %.3fx (target >= 0.95)" %
                  (size // MIB, repeat, c / py))
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
