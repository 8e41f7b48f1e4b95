# SPDX-License-Identifier: Apache-2.0
"""The pip-installed package `sluice` (tests/install/acceptance.py python), outside the tree: the
version, a ranged GET over HTTP and over HTTPS with a private CA, and the bad inputs (a closed
client, a buffer too small, a negative offset, a length past the object, the wrong CA), each a
typed exception with nothing written past the buffer.
Usage: python_consumer.py VERSION HTTP HTTPS CA WRONG_CA AK SK"""
import os
import sys

import sluice

version, http, https, ca, wrong_ca, ak, sk = sys.argv[1:8]
failures = 0


def check(cond, what):
    global failures
    print(("ok: " if cond else "FAILED: ") + what, flush=True)
    failures += 0 if cond else 1


def raises(kind, call, what):
    try:
        call()
    except kind as e:
        check(isinstance(e, sluice.Error), "%s: %s (%s: %s)" % (what, type(e).__name__, e.status_name, e))
        return
    except Exception as e:  # noqa: BLE001
        check(False, "%s: raised %s %s, wanted %s" % (what, type(e).__name__, e, kind.__name__))
        return
    check(False, "%s: nothing raised, wanted %s" % (what, kind.__name__))


here = os.path.dirname(os.path.abspath(sluice.__file__))
check(not here.startswith(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
      "imported from the installation: %s" % here)
check(sluice.__version__ == version, "sluice.__version__ %s == %s" % (sluice.__version__, version))
check(os.path.exists(os.path.join(here, "__init__.pyi")) and os.path.exists(os.path.join(here, "py.typed")),
      "type stubs installed")
check(bool(sluice.Client.get_object.__doc__) and "offset" in sluice.Client.get_object.__doc__, "docstrings")

data = bytes((i * 29 + (i >> 8)) & 0xFF for i in range(1 << 20))
with sluice.Client(http, ak, sk, plane="http", timeout=30) as c:
    c.create_bucket("py-consumer")
    c.put_object("py-consumer", "blob", data)
    out = bytearray(5000)
    report = c.get_object("py-consumer", "blob", out, offset=1000, length=5000)
    check(report["bytes"] == 5000 and bytes(out) == data[1000:6000], "ranged GET over HTTP")

    backing = bytearray(b"\xee" * ((1 << 20) + 64))
    view = memoryview(backing)[: (1 << 20) - 1]
    raises(sluice.BufferTooSmallError, lambda: c.get_object("py-consumer", "blob", view), "buffer too small")
    raises(sluice.RangeError, lambda: c.get_object("py-consumer", "blob", backing, offset=-1), "negative offset")
    raises(sluice.RangeError, lambda: c.get_object("py-consumer", "blob", backing, offset=10, length=1 << 20),
           "length past the object")
    raises(sluice.RangeError, lambda: c.get_object("py-consumer", "blob", backing, offset=(1 << 20) + 1),
           "offset past the object")
    check(backing[(1 << 20) - 1:] == b"\xee" * 65, "nothing written past the buffer")
    raises(ValueError, lambda: c.get_object("py-consumer", "blob", backing, offset=-5), "a RangeError is a ValueError")
raises(sluice.ClosedError, lambda: c.get_object("py-consumer", "blob", out), "closed client")
check(c.closed, "Client.closed")
c.close()  # twice is fine

with sluice.Client(https, ak, sk, plane="http", ca_bundle=ca, timeout=30) as s:
    tail = bytearray(100)
    s.get_object("py-consumer", "blob", tail, offset=(1 << 20) - 100)
    check(bytes(tail) == data[-100:], "ranged GET over HTTPS (private CA)")
with sluice.Client(https, ak, sk, plane="http", ca_bundle=wrong_ca, timeout=30) as w:
    raises(sluice.TLSError, lambda: w.get_object("py-consumer", "blob", tail, offset=0, length=100), "wrong CA")
raises(sluice.InvalidArgumentError, lambda: sluice.Client(https, ak, sk, ca_bundle="/nonexistent.pem"),
       "a CA bundle that cannot be read")
raises(sluice.InvalidArgumentError, lambda: sluice.Client(http, ak, sk, timeout=-1), "a negative timeout")

print("python_consumer: %s" % ("passed" if failures == 0 else "%d FAILED" % failures))
sys.exit(1 if failures else 0)
