# SPDX-License-Identifier: Apache-2.0
# Type stubs of the extension sluice._sluice (bindings/python/src/_sluice.cpp).
from types import TracebackType
from typing import Any, Optional, Type, TypedDict, Union


version: str
built_with_cuda: bool

class Report(TypedDict, total=False):
    bytes: int
    path: str  # "none", "http", "rdma", "mixed", "staged", "direct"
    rdma_bytes: int
    http_bytes: int
    rdma_requests: int
    http_requests: int
    declined: int
    etag: str  # PUT only

class ObjectInfo(TypedDict):
    size: int
    etag: str
    content_type: str
    last_modified: int

class Listed(TypedDict):
    key: str
    size: int
    etag: str

# A writable buffer (numpy array, bytearray, memoryview) or an object with __cuda_array_interface__.
Destination = Any
Source = Any

class Client:
    def __init__(self, endpoint: str, access_key: str = "", secret_key: str = "", region: str = "us-east-1",
                 part_size: int = 0, parts_in_flight: int = 0, plane: str = "auto",
                 grant_socket: Optional[str] = None, *, ca_bundle: Optional[str] = None,
                 timeout: Optional[float] = None) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> "Client": ...
    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None: ...
    def get_object(self, bucket: str, key: str, out: Destination, *, offset: int = 0,
                   length: Optional[int] = None) -> Report: ...
    def put_object(self, bucket: str, key: str, data: Union[bytes, Source],
                   content_type: Optional[str] = None) -> Report: ...
    def head_object(self, bucket: str, key: str) -> ObjectInfo: ...
    def list_objects(self, bucket: str, prefix: str = "") -> list[Listed]: ...
    def delete_object(self, bucket: str, key: str) -> None: ...
    def create_bucket(self, bucket: str) -> None: ...
    def delete_bucket(self, bucket: str) -> None: ...
    @property
    def last_report(self) -> Report: ...
