// The Python module `sluice`: sluice.Client over the C API (libsluice_c.so), so Python sees exactly
// the C API's behaviour, errors and reports. Transfers release the GIL; the memory of the object
// they read into or write from is held (a buffer export, or the CUDA array's owner) until they end.
#include <sluice/sluice.h>

#include <pybind11/eval.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace py = pybind11;

namespace {

/// Raises sluice.S3Error (the server answered) or sluice.Error (anything else) for `e`.
[[noreturn]] void raise(const sluice_error& e) {
  const py::module_ module = py::module_::import("sluice");
  const py::object type = module.attr(e.code == SLUICE_ERR_S3 ? "S3Error" : "Error");
  const py::object value =
      type(std::string(e.message), std::string(e.s3_code), e.http_status, std::string(sluice_status_name(e.code)));
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
         const std::optional<std::string>& grant_socket) {
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
  ~client() {
    const py::gil_scoped_release unlocked;
    sluice_client_destroy(client_);
  }

  py::dict get_object(const std::string& bucket, const std::string& key, const py::handle& out) {
    sluice_transfer_report report{};
    sluice_error e{};
    int status = SLUICE_OK;
    if (const auto device = cuda_array_of(out)) {
      if (device->read_only) throw py::value_error("the CUDA array is read-only");
      const py::gil_scoped_release unlocked;  // `out` (held by the caller) keeps the memory
      status = sluice_get_object_to_device(client_, bucket.c_str(), key.c_str(),
                                           reinterpret_cast<void*>(device->pointer),  // NOLINT: the interface's int
                                           device->bytes, nullptr, &report, &e);
    } else {
      const buffer_view view(out, true);
      const py::gil_scoped_release unlocked;
      status = sluice_get_object(client_, bucket.c_str(), key.c_str(), view.data(), view.size(), nullptr, &report, &e);
    }
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
      status = sluice_put_object_from_device(client_, bucket.c_str(), key.c_str(),
                                             reinterpret_cast<const void*>(device->pointer),  // NOLINT: as above
                                             device->bytes, &report, &e);
    } else {
      const buffer_view view(data, false);
      const py::gil_scoped_release unlocked;
      status = sluice_put_object(client_, bucket.c_str(), key.c_str(), view.data(), view.size(),
                                 content_type ? content_type->c_str() : nullptr, &report, &e);
    }
    if (status != SLUICE_OK) raise(e);
    return report_dict(report);
  }

  py::dict head_object(const std::string& bucket, const std::string& key) {
    sluice_object_info info{};
    sluice_error e{};
    int status = SLUICE_OK;
    {
      const py::gil_scoped_release unlocked;
      status = sluice_head_object(client_, bucket.c_str(), key.c_str(), &info, &e);
    }
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
      status = std::forward<Call>(call)(&e);
    }
    if (status != SLUICE_OK) raise(e);
  }

  sluice_client* client_ = nullptr;
};

}  // namespace

PYBIND11_MODULE(sluice, m) {
  m.doc() = "sluice: an S3 client with RDMA and GPU data paths (over libsluice_c)";
  py::exec(R"(
class Error(Exception):
    """A sluice call failed. .status_name: the C API's code ("SLUICE_ERR_CONNECTION", ...);
    .code and .status: the S3 error code and HTTP status when the server answered, else "" and 0."""
    def __init__(self, message, code="", status=0, status_name=""):
        super().__init__(message)
        self.code, self.status, self.status_name = code, status, status_name

class S3Error(Error):
    """The server answered with an S3 error: .code ("NoSuchKey"), .status (404)."""
)",
           m.attr("__dict__"));
  m.attr("__version__") = sluice_version();
  m.attr("built_with_cuda") = sluice_built_with_cuda() != 0;

  py::class_<client>(m, "Client", "An S3 client: a connection pool and its threads, for one endpoint and key pair.")
      .def(py::init<const std::string&, const std::string&, const std::string&, const std::string&, std::uint64_t,
                    std::uint32_t, const std::string&, const std::optional<std::string>&>(),
           py::arg("endpoint"), py::arg("access_key") = "", py::arg("secret_key") = "", py::arg("region") = "us-east-1",
           py::arg("part_size") = 0, py::arg("parts_in_flight") = 0, py::arg("plane") = "auto",
           py::arg("grant_socket") = py::none(),
           "endpoint: http(s)://host:port; plane: \"auto\" (RDMA when it opens, else HTTP) or \"http\"; "
           "grant_socket: a sluice server's same-host grant socket. part_size/parts_in_flight 0: defaults.")
      .def("get_object", &client::get_object, py::arg("bucket"), py::arg("key"), py::arg("out"),
           "GETs the whole object into `out`: a writable buffer (numpy array, bytearray, memoryview) or an "
           "object with __cuda_array_interface__ (a torch CUDA tensor). Returns the report dict "
           "(bytes, path, ...). Raises S3Error (.code 'NoSuchKey') or Error (buffer too small, connection).")
      .def("put_object", &client::put_object, py::arg("bucket"), py::arg("key"), py::arg("data"),
           py::arg("content_type") = py::none(),
           "PUTs all of `data` (any contiguous buffer, or a CUDA array: synchronize its stream first). "
           "Returns the report dict with the ETag.")
      .def("head_object", &client::head_object, py::arg("bucket"), py::arg("key"),
           "A dict: size, etag, content_type, last_modified (seconds since the epoch).")
      .def("list_objects", &client::list_objects, py::arg("bucket"), py::arg("prefix") = "",
           "Every key under `prefix`, in order: a list of dicts (key, size, etag).")
      .def("delete_object", &client::delete_object, py::arg("bucket"), py::arg("key"))
      .def("create_bucket", &client::create_bucket, py::arg("bucket"))
      .def("delete_bucket", &client::delete_bucket, py::arg("bucket"))
      .def_property_readonly("last_report", &client::last_report,
                             "The report of the last GET or PUT that succeeded on this client.");
}
