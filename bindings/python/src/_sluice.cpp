// SPDX-License-Identifier: Apache-2.0
// The extension `sluice._sluice` of the Python package `sluice` (bindings/python/sluice/): Client
// over the C API (libsluice_c.so), so Python sees exactly the C API's behaviour, errors and
// reports. Transfers release the GIL; the memory of the object they read into or write from is
// held (a buffer export, or the CUDA array's owner) until they end. The exception classes live in
// sluice/__init__.py: a failed call raises the one registered for its status in
// sluice._error_types.
#include <sluice/sluice.h>

#include <pybind11/eval.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>

namespace py = pybind11;

namespace {

/// Raises the exception `sluice._error_types` names for `status` (sluice.Error when none).
[[noreturn]] void raise_status(int status, const std::string& message, const std::string& s3_code = {},
                               int http_status = 0) {
  const py::module_ module = py::module_::import("sluice");
  const py::dict types = module.attr("_error_types");
  const py::object type = types.contains(py::int_(status)) ? py::object(types[py::int_(status)]) : module.attr("Error");
  const py::object value = type(message, s3_code, http_status, std::string(sluice_status_name(status)));
  PyErr_SetObject(type.ptr(), value.ptr());
  throw py::error_already_set();
}

/// Raises the exception for what the C API filled in.
[[noreturn]] void raise(const sluice_error& e) {
  raise_status(e.code, std::string(e.message), std::string(e.s3_code), e.http_status);
}

/// Raises sluice.ClosedError: the client was closed.
[[noreturn]] void raise_closed() {
  const py::object type = py::module_::import("sluice").attr("ClosedError");
  const py::object value = type("the client is closed", "", 0, "SLUICE_ERR_INVALID_ARGUMENT");
  PyErr_SetObject(type.ptr(), value.ptr());
  throw py::error_already_set();
}

py::dict report_dict(const sluice_transfer_report& r) {
  py::dict d;
  d["bytes"] = r.bytes;
  d["path"] = std::string(r.path_name);
  d["rdma_bytes"] = r.rdma_bytes;
  d["http_bytes"] = r.http_bytes;
  d["rdma_requests"] = r.rdma_requests;
  d["http_requests"] = r.http_requests;
  d["declined"] = r.declined;
  if (r.etag[0] != '\0') d["etag"] = std::string(r.etag);
  return d;
}

/// A contiguous buffer exported by a Python object, released when this ends.
class buffer_view {
 public:
  buffer_view(const py::handle& object, bool writable) {
    const int flags = PyBUF_ANY_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) throw py::error_already_set();
  }
  buffer_view(const buffer_view&) = delete;
  buffer_view& operator=(const buffer_view&) = delete;
  ~buffer_view() { PyBuffer_Release(&view_); }
  [[nodiscard]] void* data() const noexcept { return view_.buf; }
  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

/// Device memory described by __cuda_array_interface__ (torch CUDA tensors, CuPy, Numba):
/// a C-contiguous array; its pointer and size in bytes.
struct cuda_array {
  std::uintptr_t pointer = 0;
  std::size_t bytes = 0;
  bool read_only = false;
};

std::optional<cuda_array> cuda_array_of(const py::handle& object) {
  if (!py::hasattr(object, "__cuda_array_interface__")) return std::nullopt;
  const py::dict interface = object.attr("__cuda_array_interface__");
  const py::tuple data = interface["data"];
  cuda_array out;
  out.pointer = data[0].cast<std::uintptr_t>();
  out.read_only = data[1].cast<bool>();
  const std::string typestr = interface["typestr"].cast<std::string>();
  std::size_t count = 1;
  for (const auto extent : interface["shape"].cast<py::tuple>()) count *= extent.cast<std::size_t>();
  std::size_t item = typestr.size() > 2 ? std::stoul(typestr.substr(2)) : 0;
  if (item == 0) throw py::value_error("__cuda_array_interface__: unknown typestr " + typestr);
  if (interface.contains("strides") && !interface["strides"].is_none()) {
    // Contiguous arrays may still give strides: accept exactly the C-contiguous ones.
    const auto shape = interface["shape"].cast<py::tuple>();
    const auto strides = interface["strides"].cast<py::tuple>();
    std::size_t expected = item;
    for (std::size_t i = shape.size(); i-- > 0;) {
      if (shape[i].cast<std::size_t>() > 1 && strides[i].cast<std::size_t>() != expected) {
        throw py::value_error("the CUDA array is not C-contiguous");
      }
      expected *= shape[i].cast<std::size_t>();
    }
  }
  out.bytes = count * item;
  return out;
}

class client {
 public:
  client(const std::string& endpoint, const std::string& access_key, const std::string& secret_key,
         const std::string& region, std::uint64_t part_size, std::uint32_t parts_in_flight, const std::string& plane,
         const std::optional<std::string>& grant_socket, const std::optional<std::string>& ca_bundle,
         std::optional<double> timeout) {
    sluice_client_options options{};
    options.endpoint = endpoint.c_str();
    options.access_key = access_key.c_str();
    options.secret_key = secret_key.c_str();
    options.region = region.c_str();
    options.part_size = part_size;
    options.parts_in_flight = parts_in_flight;
    if (plane == "auto") {
      options.plane = SLUICE_PLANE_AUTO;
    } else if (plane == "http") {
      options.plane = SLUICE_PLANE_HTTP;
    } else {
      throw py::value_error("plane must be \"auto\" or \"http\"");
    }
    if (grant_socket) options.grant_socket = grant_socket->c_str();
    if (ca_bundle) options.ca_bundle = ca_bundle->c_str();
    if (timeout) {
      if (!(*timeout > 0) || *timeout > double{std::numeric_limits<std::uint32_t>::max()}) {
        raise_status(SLUICE_ERR_INVALID_ARGUMENT, "timeout must be a positive number of seconds");
      }
      options.timeout_seconds = static_cast<std::uint32_t>(std::ceil(*timeout));  // whole seconds, rounded up
    }
    sluice_error e{};
    int status = SLUICE_OK;
    {
      const py::gil_scoped_release unlocked;
      status = sluice_client_create(&options, &client_, &e);
    }
    if (status != SLUICE_OK) raise(e);
  }
  client(const client&) = delete;
  client& operator=(const client&) = delete;
  ~client() { close(); }

  /// Closes the client: waits for the calls in flight on other threads, then frees it. Calls
  /// afterwards raise ClosedError; closing twice is fine.
  void close() {
    const py::gil_scoped_release unlocked;
    const std::unique_lock lock(mutex_);
    sluice_client_destroy(client_);
    client_ = nullptr;
  }
  [[nodiscard]] bool closed() const {
    const std::shared_lock lock(mutex_);
    return client_ == nullptr;
  }

  py::dict get_object(const std::string& bucket, const std::string& key, const py::handle& out, std::int64_t offset,
                      std::optional<std::int64_t> length) {
    if (offset < 0) raise_status(SLUICE_ERR_RANGE, "offset must not be negative");
    if (length && *length <= 0) raise_status(SLUICE_ERR_RANGE, "length must be positive (None: to the end)");
    sluice_get_options options{};
    options.offset = static_cast<std::uint64_t>(offset);
    options.length = length ? static_cast<std::uint64_t>(*length) : 0;
    sluice_transfer_report report{};
    sluice_error e{};
    int status = SLUICE_OK;
    if (const auto device = cuda_array_of(out)) {
      if (device->read_only) throw py::value_error("the CUDA array is read-only");
      if (offset != 0 || length) raise_status(SLUICE_ERR_UNSUPPORTED, "a byte range into device memory");
      const py::gil_scoped_release unlocked;  // `out` (held by the caller) keeps the memory
      const std::shared_lock lock(mutex_);
      if (client_ == nullptr)
        status = closed_status;
      else
        status = sluice_get_object_to_device(client_, bucket.c_str(), key.c_str(),
                                             reinterpret_cast<void*>(device->pointer),  // NOLINT: the interface's int
                                             device->bytes, nullptr, &report, &e);
    } else {
      const buffer_view view(out, true);
      const py::gil_scoped_release unlocked;
      const std::shared_lock lock(mutex_);
      if (client_ == nullptr)
        status = closed_status;
      else
        status = sluice_get_object_ex(client_, bucket.c_str(), key.c_str(), &options, view.data(), view.size(), nullptr,
                                      &report, &e);
    }
    if (status == closed_status) raise_closed();
    if (status != SLUICE_OK) raise(e);
    return report_dict(report);
  }

  py::dict put_object(const std::string& bucket, const std::string& key, const py::handle& data,
                      const std::optional<std::string>& content_type) {
    sluice_transfer_report report{};
    sluice_error e{};
    int status = SLUICE_OK;
    if (const auto device = cuda_array_of(data)) {
      const py::gil_scoped_release unlocked;
      const std::shared_lock lock(mutex_);
      if (client_ == nullptr)
        status = closed_status;
      else
        status = sluice_put_object_from_device(client_, bucket.c_str(), key.c_str(),
                                               reinterpret_cast<const void*>(device->pointer),  // NOLINT: as above
                                               device->bytes, &report, &e);
    } else {
      const buffer_view view(data, false);
      const py::gil_scoped_release unlocked;
      const std::shared_lock lock(mutex_);
      if (client_ == nullptr)
        status = closed_status;
      else
        status = sluice_put_object(client_, bucket.c_str(), key.c_str(), view.data(), view.size(),
                                   content_type ? content_type->c_str() : nullptr, &report, &e);
    }
    if (status == closed_status) raise_closed();
    if (status != SLUICE_OK) raise(e);
    return report_dict(report);
  }

  py::dict head_object(const std::string& bucket, const std::string& key) {
    sluice_object_info info{};
    sluice_error e{};
    int status = SLUICE_OK;
    {
      const py::gil_scoped_release unlocked;
      const std::shared_lock lock(mutex_);
      status = client_ == nullptr ? closed_status : sluice_head_object(client_, bucket.c_str(), key.c_str(), &info, &e);
    }
    if (status == closed_status) raise_closed();
    if (status != SLUICE_OK) raise(e);
    py::dict d;
    d["size"] = info.size;
    d["etag"] = std::string(info.etag);
    d["content_type"] = std::string(info.content_type);
    d["last_modified"] = info.last_modified;
    return d;
  }

  py::list list_objects(const std::string& bucket, const std::string& prefix) {
    py::list keys;
    sluice_error e{};
    const std::shared_lock lock(mutex_);  // with the GIL held: close() takes the lock without it
    if (client_ == nullptr) raise_closed();
    // The callback runs on this thread, which holds the GIL throughout (a listing moves no bulk data).
    const int status = sluice_list_objects(
        client_, bucket.c_str(), prefix.c_str(),
        [](void* context, const char* key, std::uint64_t size, const char* etag) -> int {
          py::dict d;
          d["key"] = std::string(key);
          d["size"] = size;
          d["etag"] = std::string(etag);
          static_cast<py::list*>(context)->append(std::move(d));
          return 0;
        },
        &keys, &e);
    if (status != SLUICE_OK) raise(e);
    return keys;
  }

  void delete_object(const std::string& bucket, const std::string& key) {
    run([&](sluice_error* e) { return sluice_delete_object(client_, bucket.c_str(), key.c_str(), e); });
  }
  void create_bucket(const std::string& bucket) {
    run([&](sluice_error* e) { return sluice_create_bucket(client_, bucket.c_str(), e); });
  }
  void delete_bucket(const std::string& bucket) {
    run([&](sluice_error* e) { return sluice_delete_bucket(client_, bucket.c_str(), e); });
  }

  py::dict last_report() const {
    sluice_transfer_report report{};
    sluice_error e{};
    const std::shared_lock lock(mutex_);
    if (client_ == nullptr) raise_closed();
    if (sluice_client_last_report(client_, &report, &e) != SLUICE_OK) raise(e);
    return report_dict(report);
  }

 private:
  template <class Call>
  void run(Call&& call) {
    sluice_error e{};
    int status = SLUICE_OK;
    {
      const py::gil_scoped_release unlocked;
      const std::shared_lock lock(mutex_);
      status = client_ == nullptr ? closed_status : std::forward<Call>(call)(&e);
    }
    if (status == closed_status) raise_closed();
    if (status != SLUICE_OK) raise(e);
  }

  static constexpr int closed_status = -1;  // not a SLUICE_* code: the client was closed
  mutable std::shared_mutex mutex_;         // calls share it; close() takes it alone
  sluice_client* client_ = nullptr;
};

}  // namespace

PYBIND11_MODULE(_sluice, m) {
  m.doc() = "sluice's extension over libsluice_c; import the package `sluice` instead";
  m.attr("version") = sluice_version();
  m.attr("built_with_cuda") = sluice_built_with_cuda() != 0;

  py::class_<client>(m, "Client", R"(An S3 client: a connection pool and its threads, for one endpoint and key pair.

Thread-safe: several threads may call it at once (transfers release the GIL). close() (or a
``with`` block) frees it; calls after that raise ClosedError.)")
      .def(py::init<const std::string&, const std::string&, const std::string&, const std::string&, std::uint64_t,
                    std::uint32_t, const std::string&, const std::optional<std::string>&,
                    const std::optional<std::string>&, std::optional<double>>(),
           py::arg("endpoint"), py::arg("access_key") = "", py::arg("secret_key") = "", py::arg("region") = "us-east-1",
           py::arg("part_size") = 0, py::arg("parts_in_flight") = 0, py::arg("plane") = "auto",
           py::arg("grant_socket") = py::none(), py::kw_only(), py::arg("ca_bundle") = py::none(),
           py::arg("timeout") = py::none(),
           R"(endpoint: "http(s)://host:port"; access_key/secret_key: empty for anonymous requests;
plane: "auto" (RDMA when it opens, else HTTP) or "http"; grant_socket: a sluice server's same-host
grant socket (GPU memory by CUDA IPC); part_size/parts_in_flight: 0 for the defaults (8 MiB, 4);
ca_bundle: https only, a PEM file of the CAs to trust (None: the system's); timeout: seconds one
request attempt may take (rounded up to whole seconds; None: 300). Raises InvalidArgumentError.)")
      .def("close", &client::close, "Frees the client (after the calls in flight); later calls raise ClosedError.")
      .def_property_readonly("closed", &client::closed, "True after close().")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](client& self, const py::args&) { self.close(); })
      .def("get_object", &client::get_object, py::arg("bucket"), py::arg("key"), py::arg("out"), py::kw_only(),
           py::arg("offset") = 0, py::arg("length") = py::none(),
           R"(GETs the object, or its bytes [offset, offset + length) (to its end when length is None), into
the start of `out`: a writable buffer (numpy array, bytearray, memoryview) or an object with
__cuda_array_interface__ (a torch CUDA tensor; whole objects only). Returns the report dict
(bytes, path, rdma_bytes, http_bytes, ...). Nothing is written past the end of `out`.
Raises S3Error (.code "NoSuchKey"), BufferTooSmallError, RangeError (a negative offset, a range
outside the object), TLSError, RequestTimeoutError, ConnectionFailedError, ClosedError.)")
      .def("put_object", &client::put_object, py::arg("bucket"), py::arg("key"), py::arg("data"),
           py::arg("content_type") = py::none(),
           R"(PUTs all of `data` (any contiguous buffer, or a CUDA array: synchronize its stream first);
multipart above 16 MiB. Returns the report dict with the ETag.)")
      .def("head_object", &client::head_object, py::arg("bucket"), py::arg("key"),
           "A dict: size, etag, content_type, last_modified (seconds since the epoch). Raises S3Error.")
      .def("list_objects", &client::list_objects, py::arg("bucket"), py::arg("prefix") = "",
           "Every key under `prefix`, in order: a list of dicts (key, size, etag).")
      .def("delete_object", &client::delete_object, py::arg("bucket"), py::arg("key"),
           "Deletes the object; a missing key is not an error.")
      .def("create_bucket", &client::create_bucket, py::arg("bucket"), "Creates the bucket.")
      .def("delete_bucket", &client::delete_bucket, py::arg("bucket"), "Deletes the empty bucket.")
      .def_property_readonly("last_report", &client::last_report,
                             "The report of the last GET or PUT that succeeded on this client.");
}
