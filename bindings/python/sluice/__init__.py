# SPDX-License-Identifier: Apache-2.0
"""sluice: an S3 client with RDMA and GPU data paths, over the C API (libsluice_c).

    import sluice
    with sluice.Client("https://s3.example:9443", "AK", "SK", ca_bundle="ca.pem", timeout=30) as c:
        buf = bytearray(4096)
        c.get_object("bucket", "key", buf, offset=1 << 20, length=4096)

Every failure raises a subclass of sluice.Error, chosen by the C API's status (see _error_types);
.status_name is that status ("SLUICE_ERR_RANGE"), .code and .status the S3 error code and HTTP
status when the server answered. numpy and torch are optional: any writable buffer works, and an
object with __cuda_array_interface__ is device memory.
"""
import builtins as _builtins

from ._sluice import Client, built_with_cuda, version as _library_version

__version__ = _library_version
"""The library's version (project(VERSION) in sluice's CMakeLists.txt)."""


class Error(Exception):
    """A sluice call failed. .status_name: the C API's status ("SLUICE_ERR_CONNECTION", ...);
    .code and .status: the S3 error code and HTTP status when the server answered, else "" and 0."""

    def __init__(self, message, code="", status=0, status_name=""):
        super().__init__(message)
        self.code, self.status, self.status_name = code, status, status_name


class S3Error(Error):
    """The server answered with an S3 error: .code ("NoSuchKey"), .status (404)."""


class InvalidArgumentError(Error, ValueError):
    """An argument the library refuses: an empty name, a bad endpoint or option."""


class ClosedError(Error, ValueError):
    """A call on a client after close()."""


class BufferTooSmallError(Error, ValueError):
    """The destination cannot hold the bytes asked for; nothing was written past its end."""


class RangeError(Error, ValueError):
    """A negative offset, a non-positive length, or a range outside the object."""


class ConnectionFailedError(Error, _builtins.ConnectionError):
    """The request did not complete: connect, a broken answer, the server gone."""


class TLSError(ConnectionFailedError):
    """https: the server's certificate was refused (a CA not in ca_bundle, another host name) or
    the TLS handshake failed."""


class RequestTimeoutError(Error, _builtins.TimeoutError):
    """A request ran past the client's timeout."""


class CancelledError(Error):
    """The call was cancelled."""


class NoCUDAError(Error):
    """A device-memory call on a library built without CUDA."""


class CUDAError(Error):
    """A CUDA runtime error (no GPU, not device memory)."""


class UnsupportedError(Error):
    """A plane or memory kind this build or host cannot use."""


class InternalError(Error):
    """Anything else (out of memory, a bug): see the message."""


# The exception of each C API status (include/sluice/sluice.h's SLUICE_ERR_* values).
_error_types = {1: InvalidArgumentError, 2: S3Error, 3: BufferTooSmallError, 4: NoCUDAError,
                5: ConnectionFailedError, 6: UnsupportedError, 7: CUDAError, 8: Error, 9: InternalError,
                10: CancelledError, 11: RequestTimeoutError, 12: RangeError, 13: TLSError}

__all__ = ["Client", "built_with_cuda", "__version__", "Error", "S3Error", "InvalidArgumentError", "ClosedError",
           "BufferTooSmallError", "RangeError", "ConnectionFailedError", "TLSError", "RequestTimeoutError",
           "CancelledError", "NoCUDAError", "CUDAError", "UnsupportedError", "InternalError"]
