// SPDX-License-Identifier: Apache-2.0
// The C API (include/sluice/sluice.h) over sluice::s3::client, sluice::cuda and
// sluice::s3::server. Every entry point catches everything: no exception leaves it.
#include <sluice/sluice.h>

#include <sluice/error.hpp>
#include <sluice/region.hpp>
#include <sluice/s3/client.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/fs_store.hpp>
#include <sluice/s3/local_plane.hpp>
#include <sluice/s3/server.hpp>
#ifdef SLUICE_CAPI_WITH_FABRIC
#include <sluice/fabric/s3_plane.hpp>
#endif
#ifdef SLUICE_CAPI_WITH_CUDA
#include <sluice/cuda/error.hpp>
#include <sluice/cuda/grant.hpp>
#include <sluice/cuda/s3.hpp>

#include <cuda_runtime_api.h>
#endif

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct sluice_client {
  std::unique_ptr<sluice::s3::client> client;
  mutable std::mutex mutex;  // guards last
  sluice_transfer_report last{};
};

/// The calls a cancel handle aborts: each runs its transfer's completion on a private io_context
/// (as the blocking overloads do) with a cancellation signal; trigger() posts the signal's emit to
/// that context, so the signal is emitted on the thread that owns its slot (Asio's rule).
struct sluice_cancel {
  struct call {
    boost::asio::io_context* context;
    boost::asio::cancellation_signal* signal;
  };
  mutable std::mutex mutex;  // guards triggered and calls
  bool triggered = false;
  std::vector<call> calls;

  void trigger() {
    const std::lock_guard lock(mutex);
    triggered = true;
    for (const call& c : calls) {
      // A post after the context stopped is never run: the call has completed by then.
      boost::asio::post(c.context->get_executor(),
                        [signal = c.signal] { signal->emit(boost::asio::cancellation_type::terminal); });
    }
  }
};

struct sluice_server {
  // Declared before the server, so destroyed after it: the server must not outlive its store.
  std::unique_ptr<sluice::s3::fs_store> store;
  std::unique_ptr<sluice::s3::server> server;
};

namespace {

namespace s3 = sluice::s3;
using sluice::error_code;

/// Copies `text` into the fixed array `out`, truncated, always NUL-terminated.
template <std::size_t N>
void copy_string(char (&out)[N], std::string_view text) noexcept {
  const std::size_t n = std::min(text.size(), N - 1);
  if (n > 0) std::memcpy(out, text.data(), n);  // an empty view may hold a null pointer
  out[n] = '\0';
}

int succeed(sluice_error* error) noexcept {
  if (error != nullptr) *error = sluice_error{};
  return SLUICE_OK;
}

int fail(sluice_error* error, int code, std::string_view message, int http_status = 0,
         std::string_view s3_code = {}) noexcept {
  if (error != nullptr) {
    *error = sluice_error{};
    error->code = code;
    error->http_status = http_status;
    copy_string(error->s3_code, s3_code);
    copy_string(error->message, message);
  }
  return code;
}

/// The status code for an error_code from the client, the stores or CUDA.
int status_of(const error_code& ec) noexcept {
  if (ec.category() == s3::s3_category()) return SLUICE_ERR_S3;
  if (ec == boost::asio::error::operation_aborted) return SLUICE_ERR_CANCELLED;
  if (ec == boost::asio::error::timed_out) return SLUICE_ERR_TIMEOUT;
  if (ec.category() == s3::tls_verify_category() || ec.category() == boost::asio::error::get_ssl_category()) {
    return SLUICE_ERR_TLS;
  }
#ifdef SLUICE_CAPI_WITH_CUDA
  if (ec.category() == sluice::cuda::cuda_category()) return SLUICE_ERR_CUDA;
#endif
  if (ec.category() == sluice::sluice_category()) {
    switch (static_cast<sluice::errc>(ec.value())) {
      case sluice::errc::region_too_small: return SLUICE_ERR_BUFFER_TOO_SMALL;
      case sluice::errc::bad_range: return SLUICE_ERR_RANGE;
      case sluice::errc::invalid_name:
      case sluice::errc::invalid_config:
      case sluice::errc::invalid_argument: return SLUICE_ERR_INVALID_ARGUMENT;
      case sluice::errc::unsupported_memory:
      case sluice::errc::declined:
      case sluice::errc::unavailable: return SLUICE_ERR_UNSUPPORTED;
      case sluice::errc::no_device: return SLUICE_ERR_CUDA;
      case sluice::errc::protocol_violation: return SLUICE_ERR_CONNECTION;
      default: return SLUICE_ERR_INTERNAL;
    }
  }
  // The system, asio (misc, netdb, ssl) and TLS-verification categories: the request did not
  // complete.
  return SLUICE_ERR_CONNECTION;
}

/// Fills `error` from `ec`, the message prefixed with what was being done.
int fail(sluice_error* error, const error_code& ec, std::string_view what) noexcept {
  try {
    const int code = status_of(ec);
    std::string message(what);
    message += ": ";
    if (code == SLUICE_ERR_S3) {
      const auto e = static_cast<s3::errc>(ec.value());
      const auto text = s3::default_message(e);
      message += s3::code_string(e);
      if (!text.empty()) message += std::string(" (") + std::string(text) + ")";
      return fail(error, code, message, static_cast<int>(s3::http_status(e)), s3::code_string(e));
    }
    message += ec.message();
    return fail(error, code, message);
  } catch (...) {
    return fail(error, SLUICE_ERR_INTERNAL, "out of memory while reporting an error");
  }
}

/// Runs `body` (which returns a status code), turning any exception into a status code.
template <class Body>
int guarded(sluice_error* error, Body&& body) noexcept {
  try {
    return std::forward<Body>(body)();
  } catch (const std::bad_alloc&) {
    return fail(error, SLUICE_ERR_INTERNAL, "out of memory");
  } catch (const std::invalid_argument& e) {
    return fail(error, SLUICE_ERR_INVALID_ARGUMENT, e.what());
  } catch (const std::exception& e) {
    return fail(error, SLUICE_ERR_INTERNAL, e.what());
  } catch (...) {
    return fail(error, SLUICE_ERR_INTERNAL, "unknown exception");
  }
}

/// Registers one call with a cancel handle (none when it is null) for the registration's life.
class cancel_registration {
 public:
  cancel_registration(sluice_cancel* cancel, boost::asio::io_context& context, boost::asio::cancellation_signal& signal)
      : cancel_(cancel), signal_(&signal) {
    if (cancel_ == nullptr) return;
    const std::lock_guard lock(cancel_->mutex);
    triggered_ = cancel_->triggered;
    if (!triggered_) cancel_->calls.push_back({&context, &signal});
  }
  cancel_registration(const cancel_registration&) = delete;
  cancel_registration& operator=(const cancel_registration&) = delete;
  ~cancel_registration() {
    if (cancel_ == nullptr || triggered_) return;
    const std::lock_guard lock(cancel_->mutex);
    std::erase_if(cancel_->calls, [this](const sluice_cancel::call& c) { return c.signal == signal_; });
  }
  /// True when the handle was triggered before the call started: the call must not start.
  [[nodiscard]] bool triggered() const noexcept { return triggered_; }

 private:
  sluice_cancel* cancel_;
  const boost::asio::cancellation_signal* signal_;
  bool triggered_ = false;
};

/// Runs `initiate(handler)` (an async client operation) to its completion on a private
/// io_context, abortable through `cancel` (may be null), and returns the handler's value.
template <class Result, class Initiate>
Result run_cancellable(sluice_cancel* cancel, Initiate&& initiate, error_code& ec) {
  boost::asio::io_context context;
  boost::asio::cancellation_signal signal;
  Result result{};
  const cancel_registration registration(cancel, context, signal);
  if (registration.triggered()) {
    ec = boost::asio::error::operation_aborted;
    return result;
  }
  std::forward<Initiate>(initiate)(boost::asio::bind_cancellation_slot(
      signal.slot(), boost::asio::bind_executor(context, [&](error_code e, Result r) {
        ec = e;
        result = std::move(r);
      })));
  context.run();
  return result;
}

bool empty(const char* text) noexcept { return text == nullptr || *text == '\0'; }

/// The common checks of an object call; SLUICE_OK or the failure already reported.
int check_object_call(const sluice_client* client, const char* bucket, const char* key, sluice_error* error) noexcept {
  if (client == nullptr) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "client is NULL");
  if (empty(bucket)) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "bucket is NULL or empty");
  if (empty(key)) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "key is NULL or empty");
  return SLUICE_OK;
}

std::string describe(const char* verb, const char* bucket, const char* key) {
  return std::string(verb) + " " + bucket + "/" + key;
}

void set_path(sluice_transfer_report& report, int path) noexcept {
  static constexpr const char* names[] = {"none", "http", "rdma", "mixed", "staged", "direct"};
  report.path = path;
  copy_string(report.path_name, names[path]);
}

sluice_transfer_report to_report(std::uint64_t bytes, const s3::transfer_report& r, std::string_view etag) noexcept {
  sluice_transfer_report out{};
  out.bytes = bytes;
  out.rdma_bytes = r.rdma_bytes;
  out.http_bytes = r.http_bytes;
  out.rdma_requests = r.rdma_requests;
  out.http_requests = r.http_requests;
  out.declined = r.declined;
  const int path = r.rdma_bytes > 0 && r.http_bytes > 0 ? SLUICE_PATH_MIXED
                   : r.rdma_bytes > 0                   ? SLUICE_PATH_RDMA
                   : bytes > 0                          ? SLUICE_PATH_HTTP
                                                        : SLUICE_PATH_NONE;
  set_path(out, path);
  copy_string(out.etag, etag);
  return out;
}

/// Hands `report` to the caller and keeps it as the client's last one.
void publish(sluice_client* client, const sluice_transfer_report& report, sluice_transfer_report* out) {
  if (out != nullptr) *out = report;
  const std::lock_guard lock(client->mutex);
  client->last = report;
}

/// The host of "scheme://host[:port][/...]", without brackets.
std::string host_of(std::string_view endpoint) {
  if (const auto scheme = endpoint.find("://"); scheme != std::string_view::npos) endpoint.remove_prefix(scheme + 3);
  endpoint = endpoint.substr(0, endpoint.find('/'));
  if (endpoint.starts_with('[')) return std::string(endpoint.substr(1, endpoint.find(']') - 1));
  return std::string(endpoint.substr(0, endpoint.rfind(':')));
}

bool is_loopback(std::string_view host) noexcept {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

#ifdef SLUICE_CAPI_WITH_CUDA
/// The region of a CUDA device pointer; SLUICE_ERR_CUDA when it is not one (or there is no GPU).
int device_region(const void* pointer, std::size_t size, sluice::const_region& out, sluice_error* error) noexcept {
  cudaPointerAttributes attributes{};
  const cudaError_t e = cudaPointerGetAttributes(&attributes, pointer);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls do not see it
    return fail(error, SLUICE_ERR_CUDA, std::string("not a usable CUDA pointer: ") + cudaGetErrorString(e));
  }
  if (attributes.type != cudaMemoryTypeDevice) {
    return fail(error, SLUICE_ERR_CUDA, "not CUDA device memory (allocate it with cudaMalloc)");
  }
  out = {pointer, size, sluice::memory_kind::cuda_device, attributes.device};
  return SLUICE_OK;
}

sluice_transfer_report to_report(std::uint64_t bytes, const sluice::cuda::device_transfer_report& r,
                                 std::string_view etag) noexcept {
  sluice_transfer_report out{};
  out.bytes = bytes;
  out.rdma_bytes = r.rdma_bytes;
  out.http_bytes = r.http_bytes;
  set_path(out, bytes == 0                                    ? SLUICE_PATH_NONE
                : r.path == sluice::cuda::device_path::direct ? SLUICE_PATH_DIRECT
                                                              : SLUICE_PATH_STAGED);
  copy_string(out.etag, etag);
  return out;
}
#endif

}  // namespace

extern "C" {

const char* sluice_status_name(int code) {
  switch (code) {
    case SLUICE_OK: return "SLUICE_OK";
    case SLUICE_ERR_INVALID_ARGUMENT: return "SLUICE_ERR_INVALID_ARGUMENT";
    case SLUICE_ERR_S3: return "SLUICE_ERR_S3";
    case SLUICE_ERR_BUFFER_TOO_SMALL: return "SLUICE_ERR_BUFFER_TOO_SMALL";
    case SLUICE_ERR_NO_CUDA: return "SLUICE_ERR_NO_CUDA";
    case SLUICE_ERR_CONNECTION: return "SLUICE_ERR_CONNECTION";
    case SLUICE_ERR_UNSUPPORTED: return "SLUICE_ERR_UNSUPPORTED";
    case SLUICE_ERR_CUDA: return "SLUICE_ERR_CUDA";
    case SLUICE_ERR_SERVER_START: return "SLUICE_ERR_SERVER_START";
    case SLUICE_ERR_INTERNAL: return "SLUICE_ERR_INTERNAL";
    case SLUICE_ERR_CANCELLED: return "SLUICE_ERR_CANCELLED";
    case SLUICE_ERR_TIMEOUT: return "SLUICE_ERR_TIMEOUT";
    case SLUICE_ERR_RANGE: return "SLUICE_ERR_RANGE";
    case SLUICE_ERR_TLS: return "SLUICE_ERR_TLS";
    default: return "SLUICE_ERR_UNKNOWN";
  }
}

int sluice_cancel_create(sluice_cancel** out, sluice_error* error) {
  if (out == nullptr) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "out is NULL");
  *out = nullptr;
  return guarded(error, [&] {
    *out = new sluice_cancel{};  // NOLINT(cppcoreguidelines-owning-memory): the C caller owns it
    return succeed(error);
  });
}

void sluice_cancel_trigger(sluice_cancel* cancel) {
  if (cancel == nullptr) return;
  try {
    cancel->trigger();
  } catch (...) {  // a post that cannot allocate: nothing a C caller could do
  }
}

int sluice_cancel_triggered(const sluice_cancel* cancel) {
  if (cancel == nullptr) return 0;
  const std::lock_guard lock(cancel->mutex);
  return cancel->triggered ? 1 : 0;
}

void sluice_cancel_destroy(sluice_cancel* cancel) {
  delete cancel;  // NOLINT(cppcoreguidelines-owning-memory): made by sluice_cancel_create
}

const char* sluice_version(void) { return SLUICE_VERSION_STRING; }

int sluice_built_with_cuda(void) {
#ifdef SLUICE_CAPI_WITH_CUDA
  return 1;
#else
  return 0;
#endif
}

int sluice_client_create(const sluice_client_options* options, sluice_client** out, sluice_error* error) {
  if (out == nullptr) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "out is NULL");
  *out = nullptr;
  if (options == nullptr) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "options is NULL");
  if (empty(options->endpoint)) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "endpoint is NULL or empty");
  if (options->plane != SLUICE_PLANE_AUTO && options->plane != SLUICE_PLANE_HTTP) {
    return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "plane must be SLUICE_PLANE_AUTO or SLUICE_PLANE_HTTP");
  }
  return guarded(error, [&] {
    s3::client_config config;
    config.endpoint = options->endpoint;
    if (options->access_key != nullptr) config.creds.access_key_id = options->access_key;
    if (options->secret_key != nullptr) config.creds.secret_access_key = options->secret_key;
    if (!empty(options->region)) config.region = options->region;
    if (!empty(options->ca_bundle)) config.ca_bundle = options->ca_bundle;
    if (options->part_size != 0) config.part_size = options->part_size;
    if (options->parts_in_flight != 0) config.parts_in_flight = options->parts_in_flight;
    if (options->timeout_seconds != 0) config.request_timeout = std::chrono::seconds(options->timeout_seconds);
    if (auto problem = config.validate()) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, problem->message());

    std::vector<std::shared_ptr<s3::rdma_client_plane>> planes;
    if (!empty(options->grant_socket)) {
      s3::local_client_plane_config grants{options->grant_socket, config.creds, nullptr};
#ifdef SLUICE_CAPI_WITH_CUDA
      grants.device = sluice::cuda::make_grant_exporter();
#endif
      error_code ec;
      auto local = s3::local_client_plane::open(grants, ec);
      if (ec) return fail(error, ec, std::string("grant socket ") + options->grant_socket);
      planes.push_back(std::move(local));
    }
#ifdef SLUICE_CAPI_WITH_FABRIC
    if (options->plane == SLUICE_PLANE_AUTO) {
      // Hardware providers, then tcp (shm too when the server is on this host); none is fine.
      const bool local = is_loopback(host_of(config.endpoint));
      sluice::fabric::client_plane_config plane;
      plane.fabric.provider = "auto";
      if (local) plane.fabric.node = "127.0.0.1";
      error_code ec;
      if (auto fabric = sluice::fabric::client_plane::open(plane, local, ec); !ec && fabric) {
        planes.push_back(std::move(fabric));
      }
    }
#endif
    if (planes.size() == 1) {
      config.rdma = std::move(planes.front());
    } else if (!planes.empty()) {
      config.rdma = std::make_shared<s3::rdma_client_planes>(std::move(planes));
    }
    auto made = std::make_unique<sluice_client>();
    made->client = std::make_unique<s3::client>(std::move(config));
    set_path(made->last, SLUICE_PATH_NONE);
    *out = made.release();
    return succeed(error);
  });
}

void sluice_client_destroy(sluice_client* client) {
  delete client;  // the client's destructor joins its threads; it does not throw
}

int sluice_get_object(sluice_client* client, const char* bucket, const char* key, void* buffer, size_t capacity,
                      uint64_t* bytes, sluice_transfer_report* report, sluice_error* error) {
  return sluice_get_object_ex(client, bucket, key, nullptr, buffer, capacity, bytes, report, error);
}

int sluice_get_object_ex(sluice_client* client, const char* bucket, const char* key, const sluice_get_options* options,
                         void* buffer, size_t capacity, uint64_t* bytes, sluice_transfer_report* report,
                         sluice_error* error) {
  if (const int status = check_object_call(client, bucket, key, error); status != SLUICE_OK) return status;
  if (buffer == nullptr && capacity > 0) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "buffer is NULL");
  const sluice_get_options none_given{};
  const sluice_get_options& o = options != nullptr ? *options : none_given;
  constexpr auto largest = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());  // HTTP: signed 64-bit
  if (o.offset > largest || o.length > largest - o.offset) {
    return fail(error, SLUICE_ERR_RANGE, describe("GET", bucket, key) + ": byte range past any object's end");
  }
  return guarded(error, [&] {
    std::byte none{};  // a valid address for an empty destination
    const sluice::region destination{buffer != nullptr ? buffer : &none, capacity};
    s3::transfer_report transfer;
    s3::get_options get;
    get.range.offset = o.offset;
    if (o.length != 0) get.range.length = o.length;
    get.report = &transfer;
    error_code ec;
    sluice::s3::client& c = *client->client;
    const auto got = run_cancellable<std::uint64_t>(
        o.cancel,
        [&](auto handler) { c.async_get_object(bucket, key, destination, std::move(get), std::move(handler)); }, ec);
    if (ec) return fail(error, ec, describe("GET", bucket, key));
    if (bytes != nullptr) *bytes = got;
    publish(client, to_report(got, transfer, {}), report);
    return succeed(error);
  });
}

int sluice_get_object_to_device(sluice_client* client, const char* bucket, const char* key, void* device_buffer,
                                size_t capacity, uint64_t* bytes, sluice_transfer_report* report, sluice_error* error) {
  if (const int status = check_object_call(client, bucket, key, error); status != SLUICE_OK) return status;
  if (device_buffer == nullptr) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "device_buffer is NULL");
  if (capacity == 0) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "capacity is 0");
#ifdef SLUICE_CAPI_WITH_CUDA
  return guarded(error, [&] {
    sluice::const_region found;
    if (const int status = device_region(device_buffer, capacity, found, error); status != SLUICE_OK) return status;
    const sluice::region destination{device_buffer, capacity, found.kind, found.device};
    sluice::cuda::device_transfer_options options;
    options.parts_in_flight = std::min(client->client->config().parts_in_flight, std::uint32_t{4});
    sluice::cuda::device_transfer_report transfer;
    error_code ec;
    const std::uint64_t got =
        sluice::cuda::get_object_to_device(*client->client, bucket, key, destination, options, &transfer, ec);
    if (ec) return fail(error, ec, describe("GET", bucket, key) + " into device memory");
    if (bytes != nullptr) *bytes = got;
    publish(client, to_report(got, transfer, {}), report);
    return succeed(error);
  });
#else
  (void)bytes;
  (void)report;
  return fail(error, SLUICE_ERR_NO_CUDA, "this libsluice_c was built without CUDA");
#endif
}

int sluice_put_object(sluice_client* client, const char* bucket, const char* key, const void* data, size_t length,
                      const char* content_type, sluice_transfer_report* report, sluice_error* error) {
  sluice_put_options options{};
  options.content_type = content_type;
  return sluice_put_object_ex(client, bucket, key, data, length, &options, report, error);
}

int sluice_put_object_ex(sluice_client* client, const char* bucket, const char* key, const void* data, size_t length,
                         const sluice_put_options* options, sluice_transfer_report* report, sluice_error* error) {
  if (const int status = check_object_call(client, bucket, key, error); status != SLUICE_OK) return status;
  if (data == nullptr && length > 0) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "data is NULL");
  const sluice_put_options none_given{};
  const sluice_put_options& o = options != nullptr ? *options : none_given;
  return guarded(error, [&] {
    const std::byte none{};
    const sluice::const_region source{data != nullptr ? data : &none, length};
    s3::transfer_report transfer;
    s3::put_options put;
    if (o.content_type != nullptr) put.attributes.content_type = o.content_type;
    put.report = &transfer;
    error_code ec;
    sluice::s3::client& c = *client->client;
    const std::string etag = run_cancellable<std::string>(
        o.cancel, [&](auto handler) { c.async_put_object(bucket, key, source, std::move(put), std::move(handler)); },
        ec);
    if (ec) return fail(error, ec, describe("PUT", bucket, key));
    publish(client, to_report(length, transfer, etag), report);
    return succeed(error);
  });
}

int sluice_put_object_from_device(sluice_client* client, const char* bucket, const char* key, const void* device_data,
                                  size_t length, sluice_transfer_report* report, sluice_error* error) {
  if (const int status = check_object_call(client, bucket, key, error); status != SLUICE_OK) return status;
  if (device_data == nullptr) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "device_data is NULL");
  if (length == 0) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "length is 0");
#ifdef SLUICE_CAPI_WITH_CUDA
  return guarded(error, [&] {
    sluice::const_region source;
    if (const int status = device_region(device_data, length, source, error); status != SLUICE_OK) return status;
    sluice::cuda::device_transfer_options options;
    options.parts_in_flight = std::min(client->client->config().parts_in_flight, std::uint32_t{4});
    sluice::cuda::device_transfer_report transfer;
    error_code ec;
    const std::string etag =
        sluice::cuda::put_object_from_device(*client->client, bucket, key, source, options, &transfer, ec);
    if (ec) return fail(error, ec, describe("PUT", bucket, key) + " from device memory");
    publish(client, to_report(length, transfer, etag), report);
    return succeed(error);
  });
#else
  (void)report;
  return fail(error, SLUICE_ERR_NO_CUDA, "this libsluice_c was built without CUDA");
#endif
}

int sluice_client_last_report(const sluice_client* client, sluice_transfer_report* report, sluice_error* error) {
  if (client == nullptr) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "client is NULL");
  if (report == nullptr) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "report is NULL");
  const std::lock_guard lock(client->mutex);
  *report = client->last;
  return succeed(error);
}

int sluice_head_object(sluice_client* client, const char* bucket, const char* key, sluice_object_info* info,
                       sluice_error* error) {
  if (const int status = check_object_call(client, bucket, key, error); status != SLUICE_OK) return status;
  if (info == nullptr) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "info is NULL");
  return guarded(error, [&] {
    error_code ec;
    const auto head = client->client->head_object(bucket, key, ec);
    if (ec) return fail(error, ec, describe("HEAD", bucket, key));
    *info = sluice_object_info{};
    info->size = head.size;
    info->last_modified =
        std::chrono::duration_cast<std::chrono::seconds>(head.last_modified.time_since_epoch()).count();
    copy_string(info->etag, head.attributes.etag);
    copy_string(info->content_type, head.attributes.content_type.empty() ? std::string_view("application/octet-stream")
                                                                         : head.attributes.content_type);
    return succeed(error);
  });
}

int sluice_list_objects(sluice_client* client, const char* bucket, const char* prefix, sluice_list_callback callback,
                        void* context, sluice_error* error) {
  if (client == nullptr) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "client is NULL");
  if (empty(bucket)) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "bucket is NULL or empty");
  if (callback == nullptr) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "callback is NULL");
  return guarded(error, [&] {
    s3::list_options options;
    if (prefix != nullptr) options.prefix = prefix;
    for (;;) {
      error_code ec;
      auto page = client->client->list_objects(bucket, options, ec);
      if (ec) return fail(error, ec, std::string("LIST ") + bucket);
      for (const auto& object : page.objects) {
        if (callback(context, object.key.c_str(), object.size, object.attributes.etag.c_str()) != 0) {
          return succeed(error);
        }
      }
      if (!page.truncated || page.next_continuation_token.empty()) return succeed(error);
      options.continuation_token = std::move(page.next_continuation_token);
    }
  });
}

int sluice_delete_object(sluice_client* client, const char* bucket, const char* key, sluice_error* error) {
  if (const int status = check_object_call(client, bucket, key, error); status != SLUICE_OK) return status;
  return guarded(error, [&] {
    error_code ec;
    client->client->delete_object(bucket, key, ec);
    if (ec) return fail(error, ec, describe("DELETE", bucket, key));
    return succeed(error);
  });
}

int sluice_create_bucket(sluice_client* client, const char* bucket, sluice_error* error) {
  if (client == nullptr) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "client is NULL");
  if (empty(bucket)) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "bucket is NULL or empty");
  return guarded(error, [&] {
    error_code ec;
    client->client->create_bucket(bucket, ec);
    if (ec) return fail(error, ec, std::string("CREATE BUCKET ") + bucket);
    return succeed(error);
  });
}

int sluice_delete_bucket(sluice_client* client, const char* bucket, sluice_error* error) {
  if (client == nullptr) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "client is NULL");
  if (empty(bucket)) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "bucket is NULL or empty");
  return guarded(error, [&] {
    error_code ec;
    client->client->delete_bucket(bucket, ec);
    if (ec) return fail(error, ec, std::string("DELETE BUCKET ") + bucket);
    return succeed(error);
  });
}

int sluice_server_start(const sluice_server_options* options, sluice_server** out, sluice_error* error) {
  if (out == nullptr) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "out is NULL");
  *out = nullptr;
  if (options == nullptr) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "options is NULL");
  if (empty(options->root)) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "root is NULL or empty");
  if (options->users == nullptr && options->user_count > 0) {
    return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "users is NULL with user_count > 0");
  }
  if (options->plane != SLUICE_PLANE_AUTO && options->plane != SLUICE_PLANE_HTTP) {
    return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "plane must be SLUICE_PLANE_AUTO or SLUICE_PLANE_HTTP");
  }
  return guarded(error, [&] {
    s3::server_config config;
    if (!empty(options->listen_address)) config.listen_address = options->listen_address;
    config.port = options->port;
    config.allow_anonymous = options->allow_anonymous != 0;
    if (!empty(options->region)) config.region = std::string(options->region);
    config.virtual_host_suffixes = {"localhost"};  // as sluice serve
    for (std::size_t i = 0; i < options->user_count; ++i) {
      const sluice_user& u = options->users[i];
      if (empty(u.access_key) || empty(u.secret_key)) {
        return fail(error, SLUICE_ERR_INVALID_ARGUMENT, "users[" + std::to_string(i) + "] has a NULL or empty key");
      }
      config.users.push_back({u.access_key, u.secret_key});
    }
    if (auto problem = config.validate()) return fail(error, SLUICE_ERR_INVALID_ARGUMENT, problem->message());

    std::vector<std::shared_ptr<s3::rdma_server_plane>> planes;
    if (!empty(options->grant_socket)) {
      s3::local_server_plane_config grants;
      grants.socket_path = options->grant_socket;
      for (const auto& u : config.users) grants.users.push_back({u.access_key_id, u.secret_access_key});
#ifdef SLUICE_CAPI_WITH_CUDA
      error_code cuda_ec;  // no GPU here: device grants are declined, memfd grants still work
      grants.device = sluice::cuda::make_grant_opener({}, cuda_ec);
#endif
      error_code ec;
      auto local = s3::local_server_plane::open(grants, ec);
      if (ec) {
        return fail(error, SLUICE_ERR_SERVER_START,
                    "grant socket " + grants.socket_path.string() + ": " + ec.message());
      }
      planes.push_back(std::move(local));
    }
#ifdef SLUICE_CAPI_WITH_FABRIC
    if (options->plane == SLUICE_PLANE_AUTO) {
      sluice::fabric::server_plane_config plane;
      plane.fabric.provider = "auto";
      if (config.listen_address != "0.0.0.0" && config.listen_address != "::")
        plane.fabric.node = config.listen_address;
      error_code ec;  // no provider opens: tokens are declined, HTTP serves everything
      if (auto fabric = sluice::fabric::server_plane::open(plane, ec); !ec && fabric)
        planes.push_back(std::move(fabric));
    }
#endif
    if (planes.size() == 1) {
      config.rdma = std::move(planes.front());
    } else if (!planes.empty()) {
      config.rdma = std::make_shared<s3::rdma_server_planes>(std::move(planes));
    }

    auto made = std::make_unique<sluice_server>();
    error_code ec;
    made->store = s3::fs_store::open({.root = options->root}, ec);
    if (ec || !made->store) {
      return fail(error, SLUICE_ERR_SERVER_START, std::string("store at ") + options->root + ": " + ec.message());
    }
    made->server = std::make_unique<s3::server>(*made->store, std::move(config));
    made->server->listen(ec);
    if (ec) return fail(error, SLUICE_ERR_SERVER_START, "listen: " + ec.message());
    *out = made.release();
    return succeed(error);
  });
}

uint16_t sluice_server_port(const sluice_server* server) {
  if (server == nullptr) return 0;
  try {
    return server->server->local_endpoint().port();
  } catch (...) {
    return 0;
  }
}

void sluice_server_stop(sluice_server* server) {
  if (server == nullptr) return;
  try {
    server->server->stop();
  } catch (...) {  // nothing a C caller could do; the destructor below still releases everything
  }
  delete server;
}

}  // extern "C"
