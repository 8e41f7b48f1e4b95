#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# The cost of a fresh read-only mapping of a 1 GiB file that is in the page cache: first touch of
# every page (what an RMA read of a GET's fresh mapping pays) against a second touch.
import mmap, os, time
import numpy as np
p = '/tmp/pf.bin'
n = 1 << 30
with open(p, 'wb') as f:
    block = os.urandom(1 << 20)
    for _ in range(1024):
        f.write(block)
with open(p, 'rb') as f:
    while f.read(1 << 24):
        pass
fd = os.open(p, os.O_RDONLY)
for i in range(5):
    m = mmap.mmap(fd, n, prot=mmap.PROT_READ)
    a = np.frombuffer(m, dtype=np.uint8)
    t0 = time.perf_counter(); a[::4096].sum(); t1 = time.perf_counter()
    a[::4096].sum(); t2 = time.perf_counter()
    t3 = time.perf_counter(); m2 = mmap.mmap(fd, n, prot=mmap.PROT_READ); t4 = time.perf_counter()
    print('1 GiB mapping: mmap %.3f ms, first touch of every page %.1f ms, second touch %.1f ms' % ((t4 - t3) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3))
    del a
    m.close(); m2.close()
os.unlink(p)
