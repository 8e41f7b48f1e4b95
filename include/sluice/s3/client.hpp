// SPDX-License-Identifier: Apache-2.0
// sluice::s3::client: an S3 client (Boost.Beast, HTTP/1.1 keep-alive, plain or over TLS with
// OpenSSL) with a connection pool per host, retries with backoff, a deadline per request,
// multipart uploads and parallel ranged downloads straight into the caller's memory.
//
// Executor model. The client runs its own io_context on `client_config::io_threads` threads, as
// the server does, so it can be embedded in any program. Every asynchronous operation takes an
// Asio completion token and completes exactly once, through the handler's associated executor
// (the client's executor when the handler has none), never inside the initiating call; the
// client keeps that executor's work outstanding until then. Each operation also has two
// blocking overloads, an `error_code&` one and a throwing one (sluice::system_error); they run
// the asynchronous operation with a handler bound to a private io_context
// (sluice::detail::run_blocking), so they work from any plain thread. Do not call them from a
// handler that runs on the client's own threads.
//
// Cancellation, in two forms; either way an aborted operation completes with
// boost::asio::error::operation_aborted (unless it had already finished), its requests' sockets
// are closed and a multipart upload it interrupts is aborted on the server, best effort.
// - One operation: every async_* honours the completion handler's associated cancellation slot
//   (asio::bind_cancellation_slot, a co_await'ed operation's coroutine, awaitable operators).
//   A signal of any type (terminal, partial or total) aborts that operation alone: all its
//   requests, the parts of a parallel GET or multipart upload included; others go on. What it
//   did before stays done (an object a PUT's request already published stays). The slot is
//   cleared on the handler's executor just before the handler runs, so emit the signal there
//   too (Asio's rule: a signal and its slot are not thread-safe); a signal after the completion
//   does nothing. A handler without a connected slot costs nothing more.
// - Everything: client::cancel() aborts every operation in flight. Operations started after
//   cancel() run normally.
//
// Errors (error_code):
// - the "s3" category (s3::errc) for what the server answered: the <Code> of its error body, or
//   from the HTTP status when there is no body (404 on HEAD object: no_such_key; on a bucket:
//   no_such_bucket; 403 access_denied, 412 precondition_failed, 416 invalid_range, 5xx
//   internal_error / not_implemented / service_unavailable);
// - the "sluice" category: region_too_small (the destination cannot hold the bytes asked for),
//   bad_range (the range lies outside the object), protocol_violation (an answer that breaks
//   HTTP or S3, such as a part of the wrong size);
// - the system category: connection errors, boost::asio::error::timed_out when a request ran
//   past client_config::request_timeout, operation_aborted after cancel();
// - over https: tls_verify_category() when the server's certificate was refused (not issued by a
//   trusted CA, expired, or for another host name), Boost.Asio's "asio.ssl" category for other
//   TLS failures (no common protocol version, an alert from the server). Neither is retried.
//
// Retries. Idempotent requests (GET, HEAD, PUT of a whole object or of a part, DELETE) are
// retried with exponential backoff and jitter (retry_base_delay × 2^n, n = 0, 1, ..., capped at
// 20 s, each delay drawn from [d/2, d]) up to max_retries times on 5xx answers (SlowDown and
// InternalError included), RequestTimeout, and connection errors (reset, EOF, refused, a body
// cut short). A request that ran past its deadline is not retried.
// - CreateMultipartUpload (POST, not idempotent: a repeat creates another upload) is retried
//   only on a 503 answer (SlowDown, ServiceUnavailable), which says the request was refused.
// - CompleteMultipartUpload is retried like an idempotent request, because repeating it with the
//   same parts is safe: when a repeat answers NoSuchUpload (an earlier attempt completed it and
//   its answer was lost), the client HEADs the object and accepts it if its ETag is the
//   multipart ETag computed locally from the parts' MD5s.
// - Pooled connections (over https, each with its TLS session, reused for the same host and
//   port only): before reusing an idle keep-alive connection the client checks (with a
//   non-blocking peek) that the server has not closed it. If one still fails before any byte of
//   the answer arrived (the server closed it meanwhile), the request is sent once more on a fresh
//   connection, whatever its method; this does not count against max_retries.
#pragma once

#include <sluice/config.hpp>
#include <sluice/error.hpp>
#include <sluice/region.hpp>
#include <sluice/request.hpp>
#include <sluice/s3/rdma.hpp>
#include <sluice/s3/sigv4.hpp>
#include <sluice/s3/xml_client.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice::s3 {

/// The category of a server certificate that an https client refused ("tls-verify"): the value
/// is OpenSSL's verification result (an X509_V_ERR_* code: X509_V_ERR_HOSTNAME_MISMATCH or
/// X509_V_ERR_IP_ADDRESS_MISMATCH for a certificate of another host), the message "TLS
/// certificate verification failed: " and OpenSSL's reason.
[[nodiscard]] const boost::system::error_category& tls_verify_category() noexcept;

/// What a client request failed at that is neither an answer nor a system error ("s3-client"):
/// the phase a connect_timeout or idle_timeout expired in, or an answer that is not S3's. Its
/// default_error_condition is std::errc::timed_out for the timeouts.
enum class client_errc : int {
  connect_timeout = 1,  ///< no TCP connection within connect_timeout
  handshake_timeout,    ///< https: the TLS handshake did not finish within connect_timeout
  send_timeout,         ///< the request could not be written: no progress for idle_timeout
  answer_timeout,       ///< no byte of the answer for idle_timeout after the request was sent
  body_timeout,         ///< the answer's body stalled: no byte for idle_timeout
  not_s3_answer,        ///< a 404 whose body is not an S3 error (the endpoint is not an S3 server)
};

/// The category of client_errc values; its name() is "s3-client".
[[nodiscard]] const boost::system::error_category& client_category() noexcept;

inline error_code make_error_code(client_errc e) noexcept { return {static_cast<int>(e), client_category()}; }

/// Everything the client can be told; validated when the client is built.
struct client_config {
  /// Where the server is: "http://host[:port]" (port 80 when left out) or "https://host[:port]"
  /// (port 443; TLS 1.2 or 1.3); an IPv6 address in brackets.
  std::string endpoint;
  /// https only: a PEM file of the certificate authorities to trust (the server's certificate, or
  /// its issuer). Empty: the system's default store (OpenSSL's default verify paths).
  std::filesystem::path ca_bundle;
  /// https only: check the server's certificate chain and that it names the endpoint's host
  /// (RFC 6125: a DNS name against its DNS SANs, an IP literal against its IP SANs). Turning it
  /// off accepts any certificate, so anyone on the path can read and change the traffic: for
  /// tests only.
  bool verify_peer = true;
  /// The key pair that signs every request (SigV4). Both empty: requests go unsigned (anonymous).
  credentials creds;
  std::string region = "us-east-1";  ///< the region requests are signed for
  /// Path-style addressing (http://host/bucket/key). When false, virtual-host style
  /// (http://bucket.host/key): bucket names must then be valid DNS labels and resolve.
  bool path_style = true;
  std::size_t max_connections_per_host = 16;        ///< open connections to one host, in use or idle
  std::uint32_t max_retries = 3;                    ///< extra attempts of a retryable request
  std::chrono::milliseconds retry_base_delay{100};  ///< the first backoff delay (then doubled)
  std::chrono::seconds request_timeout{300};        ///< deadline of one attempt: connect, send, receive
  /// Time to open a connection (resolve, TCP connect, TLS handshake): client_errc::connect_timeout
  /// or handshake_timeout when it runs out. Not retried.
  std::chrono::milliseconds connect_timeout{10'000};
  /// Time a request may go without moving a byte (sending it, waiting for the answer, reading the
  /// body): client_errc::send_timeout, answer_timeout or body_timeout when it runs out. Not retried.
  /// A request carrying an RDMA token waits for its answer up to request_timeout instead: the
  /// server answers it once the bytes have moved out of band.
  std::chrono::milliseconds idle_timeout{60'000};
  std::uint64_t part_size = 8 * mib;                 ///< bytes per multipart part and per ranged GET
  std::uint32_t parts_in_flight = 4;                 ///< parts of one transfer moving at once
  std::uint64_t multipart_threshold = 16 * mib;      ///< larger transfers are split into parts
  std::size_t io_threads = 2;                        ///< threads of the client's own io_context
  std::chrono::seconds idle_connection_timeout{20};  ///< idle pooled connections older than this are closed
  /// The data plane for x-amz-rdma-token (sluice::fabric::client_plane); null: HTTP bodies only.
  std::shared_ptr<rdma_client_plane> rdma;

  /// The first problem, or nullopt: endpoint not "http://host[:port]" or "https://host[:port]"
  /// (another scheme is named in the message), a ca_bundle with an http:// endpoint, region
  /// empty, only one of the two keys given, max_connections_per_host, parts_in_flight or
  /// io_threads 0, part_size outside 5 MiB..5 GiB (S3's part limits), multipart_threshold below
  /// 5 MiB, a timeout or delay that is not positive (connect_timeout, idle_timeout included).
  [[nodiscard]] std::optional<config_error> validate() const;
};

/// Called as a transfer moves: bytes done so far and the transfer's total. Runs on a client
/// thread, never concurrently for one transfer; `done` never decreases except when a failed
/// attempt's bytes are sent or received again. Keep it short and do not call the client's
/// blocking overloads from it.
using progress_callback = std::function<void(std::uint64_t done, std::uint64_t total)>;

/// How to read an object.
struct get_options {
  /// Whole object, or a range of it, as a path reads: a range starting past the end, or with an
  /// explicit length past the end, is errc::bad_range. Implicit from a byte_range, so that
  /// `get_object(bucket, key, destination, byte_range{offset, length})` reads a range.
  get_options(byte_range r = {}, progress_callback p = {}) : range(r), progress(std::move(p)) {}
  byte_range range;            ///< which bytes
  progress_callback progress;  ///< optional
  /// Which path carries the bytes. With RDMA each request (the first and every part) carries its
  /// own token for its part of `destination`; a server that declines sends the body over HTTP
  /// instead (automatic), or fails the transfer with s3::errc::rdma_not_supported (rdma).
  transfer_via via = transfer_via::automatic;
  /// When set, filled in at the completion with what carried the bytes. Must outlive the operation.
  transfer_report* report = nullptr;
  /// When not empty, the object must still have this ETag (If-Match on every request), else the
  /// transfer fails with s3::errc::precondition_failed: a download read in several GETs stays one
  /// version of the object.
  std::string if_match;
  /// When set, sees the status and header fields (looked up by name, case-insensitively; empty
  /// when absent) of each success answer before its body is read, the first request's and every
  /// part's, on a client thread; an error it returns fails the transfer at once, without a retry.
  /// For a caller that does not trust the server's answers (a gateway checks its upstream's ETag
  /// and sizes).
  std::function<error_code(unsigned status, const std::function<std::string_view(std::string_view)>& field)> check;
  /// When set, the transfer goes over HTTP (no token is sent) and each answer's body is handed to
  /// it as it arrives, through a small buffer of the client's, instead of written into
  /// `destination` (which must still be given, and which it does not touch): `offset` is the bytes'
  /// place in `destination`. Called on a client thread, the calls of one request in order; a
  /// retried request's bytes come again from its first. An error it returns fails the transfer
  /// at once, without a retry, with that error. For a caller that moves the bytes on at once (a
  /// gateway writes them into its cache file) and would otherwise read them back from memory.
  std::function<error_code(std::uint64_t offset, std::span<const std::byte> bytes)> sink;
};

/// How to write an object.
struct put_options {
  /// Attributes to publish (etag and checksums are ignored: the server computes them).
  put_options(object_attributes a = {}, progress_callback p = {}) : attributes(std::move(a)), progress(std::move(p)) {}
  object_attributes attributes;  ///< Content-Type, Content-Encoding, ..., x-amz-meta-* metadata
  progress_callback progress;    ///< optional
  /// Which path carries the bytes. A PUT (or part) by RDMA has no body: it carries a token, the
  /// payload's size (x-amz-decoded-content-length), Content-MD5 and x-amz-checksum-crc32c, so a
  /// server that ignores the token rejects it rather than storing 0 bytes. A server that declines
  /// (x-amz-rdma-reply: 501, or a failure answer without x-amz-rdma-reply other than 403 and 404,
  /// as from a server that does not know the protocol) gets the request again with a body
  /// (automatic), or the transfer fails with s3::errc::rdma_not_supported (rdma).
  transfer_via via = transfer_via::automatic;
  /// As get_options::report.
  transfer_report* report = nullptr;
  /// A conditional write: If-None-Match: * (if_absent) and If-Match (if_etag) on the PutObject,
  /// or on the CompleteMultipartUpload of a multipart PUT, so the server publishes atomically
  /// or answers 412 PreconditionFailed (s3::errc::precondition_failed). A retried attempt whose
  /// earlier one succeeded unseen also answers 412, as with any S3 client.
  write_precondition precondition;
};

/// How to copy an object inside the server (CopyObject): no byte passes through the client.
struct copy_options {
  /// When not empty, the source must still have this ETag (x-amz-copy-source-if-match on every
  /// request), else the copy fails with s3::errc::precondition_failed.
  std::string if_match;
  /// The source's size, when the caller knows it (from a listing); unknown, the source is HEADed
  /// first. It picks the form of the copy: see multipart_threshold.
  std::optional<std::uint64_t> source_size;
  /// A source larger than this (S3's CopyObject limit: 5 GiB) is copied as a multipart upload of
  /// UploadPartCopy parts of client_config::part_size (more when 10,000 would not hold it),
  /// parts_in_flight at once, each conditional on the source's ETag; a failure aborts the upload.
  std::uint64_t multipart_threshold = 5 * gib;
  /// Unset: the copy keeps the source's Content-Type, metadata and tags (S3's COPY directive).
  /// Set: the copy gets these instead (REPLACE).
  std::optional<object_attributes> attributes;
  progress_callback progress;  ///< optional; a multipart copy reports each part's bytes as it completes
};

/// What to list (ListObjectsV2).
struct list_options {
  std::string prefix;              ///< only keys that start with this
  std::string delimiter;           ///< fold keys that share prefix + … + delimiter into a common prefix
  std::string continuation_token;  ///< from the previous page's next_continuation_token
  std::string start_after;         ///< only keys after this one (first page)
  std::uint32_t max_keys = 1000;   ///< keys plus common prefixes per page (S3 caps it at 1000)
};

/// One page of a listing (or all of them, concatenated, from list_all_objects).
using list_objects_result = xml::list_bucket_result;

/// Counters since the client was built, for monitoring and tests.
struct client_statistics {
  std::uint64_t connections_opened = 0;  ///< TCP connections established
  std::uint64_t requests = 0;            ///< HTTP requests sent (every attempt counts)
  std::uint64_t retries = 0;             ///< attempts repeated after a retryable failure
  std::uint64_t rdma_bytes = 0;          ///< object bytes moved by RDMA (GET and PUT)
  std::uint64_t http_bytes = 0;          ///< object bytes moved in HTTP bodies
};

namespace detail {

struct client_state;

namespace client_impl {
struct op_cancellation;
}

/// The cancellation group of one operation, shared by its coroutines (src/s3/client_internal.hpp);
/// null for an operation whose handler has no connected cancellation slot.
using op_cancellation_ptr = std::shared_ptr<client_impl::op_cancellation>;

/// A new, empty group.
[[nodiscard]] op_cancellation_ptr make_op_cancellation();

/// What an operation puts in its handler's cancellation slot: a signal aborts the group, if the
/// operation has not released it yet (a weak reference: the slot may outlive the operation).
class op_cancel_handler {
 public:
  explicit op_cancel_handler(const op_cancellation_ptr& group) noexcept : group_(group) {}
  void operator()(boost::asio::cancellation_type type) const;

 private:
  std::weak_ptr<client_impl::op_cancellation> group_;
};

/// Tag of client_handler's constructor for a public operation: honour the handler's slot.
struct with_slot_t {
  explicit with_slot_t() = default;
};
inline constexpr with_slot_t with_slot{};

/// A completion handler of signature void(error_code, Values...), erased, that keeps its
/// executor's work outstanding until it is invoked and then runs the handler through that
/// executor (never inline). Move-only; invoked at most once.
template <class... Values>
class client_handler {
  struct base {
    virtual ~base() = default;
    virtual void complete(error_code ec, Values... values) = 0;
  };
  template <class Handler, class Executor>
  struct holder final : base {
    holder(Handler&& h, const Executor& ex, bool slot) : handler(std::move(h)), work(ex), clears_slot(slot) {}
    void complete(error_code ec, Values... values) override {
      boost::asio::post(work.get_executor(),
                        [h = std::move(handler), clear = clears_slot, ec, ... v = std::move(values)]() mutable {
                          // Asio's rule: the slot is cleared before the handler runs.
                          if (clear) boost::asio::get_associated_cancellation_slot(h).clear();
                          std::move(h)(ec, std::move(v)...);
                        });
      work.reset();
    }
    Handler handler;
    boost::asio::executor_work_guard<Executor> work;
    bool clears_slot;
  };

 public:
  /// Wraps `handler`; a handler without an associated executor completes on `fallback`.
  template <class Handler, class Fallback>
  requires(!std::is_same_v<std::decay_t<Handler>, client_handler>)
      client_handler(Handler&& handler, const Fallback& fallback) {
    wrap(std::forward<Handler>(handler), fallback, false);
  }

  /// As above, for a public operation: when the handler's cancellation slot is connected, the
  /// operation gets a group of its own (cancellation()) that a signal on the slot aborts.
  template <class Handler, class Fallback>
  client_handler(Handler&& handler, const Fallback& fallback, with_slot_t) {
    auto slot = boost::asio::get_associated_cancellation_slot(handler);
    const bool connected = slot.is_connected();
    if (connected) {
      cancellation_ = make_op_cancellation();
      slot.template emplace<op_cancel_handler>(cancellation_);
    }
    wrap(std::forward<Handler>(handler), fallback, connected);
  }

  /// The operation's cancellation group; null when nothing but client::cancel() can abort it.
  [[nodiscard]] const op_cancellation_ptr& cancellation() const noexcept { return cancellation_; }
  /// Makes this the handler of an operation inside another (the path's transport): the inner
  /// one is aborted with `group`.
  void join(op_cancellation_ptr group) noexcept { cancellation_ = std::move(group); }

  /// Completes the operation: posts the handler with these arguments to its executor.
  void operator()(error_code ec, Values... values) {
    auto impl = std::move(impl_);  // exactly once
    cancellation_.reset();
    impl->complete(ec, std::move(values)...);
  }

 private:
  template <class Handler, class Fallback>
  void wrap(Handler&& handler, const Fallback& fallback, bool clears_slot) {
    auto executor = boost::asio::get_associated_executor(handler, fallback);
    impl_ = std::make_unique<holder<std::decay_t<Handler>, decltype(executor)>>(std::forward<Handler>(handler),
                                                                                executor, clears_slot);
  }

  std::unique_ptr<base> impl_;
  op_cancellation_ptr cancellation_;
};

}  // namespace detail

/// Where the bytes of an upload come from, for sources that are neither host memory nor a file
/// (device memory, a generator). Parts are read by several workers at once: read() must be
/// thread-safe. The source must not change until the upload completes.
class upload_source {
 public:
  upload_source() = default;
  upload_source(const upload_source&) = delete;
  upload_source& operator=(const upload_source&) = delete;
  virtual ~upload_source() = default;
  /// The upload's length.
  [[nodiscard]] virtual std::uint64_t size() const noexcept = 0;
  /// Bytes [offset, offset + length): a view into the source, or into `scratch` (the caller's,
  /// one per worker; resize it as needed) once copied there. The view stays valid until the
  /// next read with the same scratch.
  virtual std::span<const std::byte> read(std::uint64_t offset, std::size_t length, std::vector<std::byte>& scratch,
                                          error_code& ec) = 0;
};

/// An S3 client. Thread-safe: any thread may start operations at any time. Not movable (its
/// threads refer to it). The destructor cancels what is in flight (as cancel() does), waits
/// for those operations to complete, then joins its threads.
template <transfer_via Via>
class object_transport;

class client {
 public:
  /// The executor of the client's io_context.
  using executor_type = boost::asio::io_context::executor_type;

  /// Starts the client's threads. Throws std::invalid_argument ("field: reason") when `config`
  /// is invalid or its ca_bundle cannot be loaded. Connects to nothing until the first request.
  explicit client(client_config config);
  client(const client&) = delete;
  client& operator=(const client&) = delete;
  /// Cancels everything in flight, waits for it to complete, joins the threads.
  ~client();

  /// The executor of the client's own threads: handlers without an associated executor run here.
  [[nodiscard]] executor_type get_executor() const noexcept;
  /// The configuration the client was built with.
  [[nodiscard]] const client_config& config() const noexcept;
  /// Counters since construction.
  [[nodiscard]] client_statistics statistics() const noexcept;

  /// Aborts every operation in flight: each completes with boost::asio::error::operation_aborted
  /// (and a multipart upload it interrupts is aborted on the server, best effort). Operations
  /// started afterwards are not affected. One operation is aborted through its handler's
  /// cancellation slot (see "Cancellation" above).
  void cancel();

  // -- HeadObject ----------------------------------------------------------------------------

  /// Reads the metadata of `bucket`/`key`: size, Last-Modified, ETag (unquoted), Content-Type
  /// and friends, x-amz-meta-* (lower-case names, without the prefix).
  /// Completion: `void(error_code, object_info)`; a missing object is s3::errc::no_such_key.
  template <class CompletionToken>
  auto async_head_object(std::string bucket, std::string key, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, object_info)>(
        [this](auto handler, std::string b, std::string k) {
          start_head_object(std::move(b), std::move(k),
                            detail::client_handler<object_info>(std::move(handler), get_executor(), detail::with_slot));
        },
        token, std::move(bucket), std::move(key));
  }
  /// Blocking async_head_object.
  object_info head_object(const std::string& bucket, const std::string& key, error_code& ec);
  /// Blocking async_head_object; throws sluice::system_error.
  object_info head_object(const std::string& bucket, const std::string& key);

  // -- GetObject -----------------------------------------------------------------------------

  /// Reads `options.range` of `bucket`/`key` into the start of `destination`, the body straight
  /// from the socket into the caller's buffer. It runs the path s3::negotiator × s3::token_registrar
  /// × s3::object_transport<options.via> (include/sluice/s3/path.hpp), agreed without a HEAD. Device memory is read by
  /// RDMA only (the plane must register it: a provider with FI_HMEM); cuda::get_object_to_device also stages it. A
  /// transfer larger than multipart_threshold is read as ranged GETs of part_size, parts_in_flight at once, each
  /// conditional on the ETag of the first answer (an object replaced meanwhile fails with
  /// s3::errc::precondition_failed instead of mixing versions).
  ///
  /// Completion: `void(error_code, std::uint64_t bytes)`, the bytes written. errc::region_too_small
  /// when `destination` cannot hold them (nothing is read past its end; the start may have been
  /// written), errc::bad_range for a range outside the object, errc::unsupported_memory for
  /// device memory with via http or a plane that cannot register it, s3::errc::rdma_not_supported
  /// when the server declines a part into device memory. `destination` must stay valid until the completion; its bytes
  /// are unspecified after an error.
  template <class CompletionToken>
  auto async_get_object(std::string bucket, std::string key, region destination, get_options options,
                        CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::uint64_t)>(
        [this](auto handler, std::string b, std::string k, region d, get_options o) {
          start_get_object(
              std::move(b), std::move(k), d, std::move(o),
              detail::client_handler<std::uint64_t>(std::move(handler), get_executor(), detail::with_slot));
        },
        token, std::move(bucket), std::move(key), destination, std::move(options));
  }
  /// Blocking async_get_object.
  std::uint64_t get_object(const std::string& bucket, const std::string& key, region destination, get_options options,
                           error_code& ec);
  /// Blocking async_get_object; throws sluice::system_error.
  std::uint64_t get_object(const std::string& bucket, const std::string& key, region destination,
                           get_options options = {});

  // -- PutObject / multipart upload ----------------------------------------------------------

  /// Writes all of `source` as `bucket`/`key`. Up to multipart_threshold bytes: one PUT with
  /// Content-MD5 (the payload is sent as UNSIGNED-PAYLOAD and checked by the server against the
  /// MD5). Larger: a multipart upload of part_size parts (more when 10,000 parts would not
  /// hold it), parts_in_flight at once, each with its Content-MD5; when anything fails the upload
  /// is aborted, so nothing is left behind. It runs the path s3::negotiator × s3::token_registrar ×
  /// s3::object_transport<options.via> (include/sluice/s3/path.hpp).
  ///
  /// Completion: `void(error_code, std::string etag)`, the object's ETag without quotes.
  /// `source` must stay valid and unchanged until the completion.
  template <class CompletionToken>
  auto async_put_object(std::string bucket, std::string key, const_region source, put_options options,
                        CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::string)>(
        [this](auto handler, std::string b, std::string k, const_region s, put_options o) {
          start_put_object(std::move(b), std::move(k), s, std::move(o),
                           detail::client_handler<std::string>(std::move(handler), get_executor(), detail::with_slot));
        },
        token, std::move(bucket), std::move(key), source, std::move(options));
  }
  /// As async_put_object with a region, reading the bytes from the regular file `file` (a part
  /// at a time, so memory stays bounded by parts_in_flight × part_size). The file must not
  /// change until the completion. Errors opening or reading it are system errors.
  template <class CompletionToken>
  auto async_put_object(std::string bucket, std::string key, std::filesystem::path file, put_options options,
                        CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::string)>(
        [this](auto handler, std::string b, std::string k, std::filesystem::path f, put_options o) {
          start_put_file(std::move(b), std::move(k), std::move(f), std::move(o),
                         detail::client_handler<std::string>(std::move(handler), get_executor(), detail::with_slot));
        },
        token, std::move(bucket), std::move(key), std::move(file), std::move(options));
  }
  /// As async_put_object with a region, reading the bytes from `source` a part at a time
  /// (memory stays bounded by parts_in_flight × part_size of scratch).
  template <class CompletionToken>
  auto async_put_object(std::string bucket, std::string key, std::shared_ptr<upload_source> source, put_options options,
                        CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::string)>(
        [this](auto handler, std::string b, std::string k, std::shared_ptr<upload_source> s, put_options o) {
          start_put_source(std::move(b), std::move(k), std::move(s), std::move(o),
                           detail::client_handler<std::string>(std::move(handler), get_executor(), detail::with_slot));
        },
        token, std::move(bucket), std::move(key), std::move(source), std::move(options));
  }
  /// Blocking async_put_object from an upload_source.
  std::string put_object(const std::string& bucket, const std::string& key, std::shared_ptr<upload_source> source,
                         put_options options, error_code& ec);
  /// Blocking async_put_object from memory.
  std::string put_object(const std::string& bucket, const std::string& key, const_region source, put_options options,
                         error_code& ec);
  /// Blocking async_put_object from memory; throws sluice::system_error.
  std::string put_object(const std::string& bucket, const std::string& key, const_region source,
                         put_options options = {});
  /// Blocking async_put_object from a file.
  std::string put_object(const std::string& bucket, const std::string& key, const std::filesystem::path& file,
                         put_options options, error_code& ec);
  /// Blocking async_put_object from a file; throws sluice::system_error.
  std::string put_object(const std::string& bucket, const std::string& key, const std::filesystem::path& file,
                         put_options options = {});

  /// Writes everything `fd` delivers until its end (a pipe, socket or terminal; not a regular
  /// file: pass its path instead), of a length not known in advance, as `bucket`/`key`. The
  /// descriptor is read asynchronously on the client's threads (a duplicate of it, made
  /// non-blocking while it runs: the flag is shared with `fd`, and restored at the end), a
  /// part_size part at a time. A stream shorter than one part is one PUT; a longer one (or one of
  /// exactly a part) a multipart upload with parts_in_flight parts read or sent at once, so memory
  /// stays at parts_in_flight × part_size. The part size doubles every 1,000 parts (S3 allows
  /// 10,000), so 8 MiB parts hold a stream of up to ~8 TiB; a longer one fails with
  /// s3::errc::entity_too_large. On any failure, cancellation or a read error the upload is
  /// aborted: no object and no upload is left behind. The progress callback's total is 0 (not
  /// known). `fd` must stay open until the completion; nothing else may read it meanwhile.
  ///
  /// Completion: `void(error_code, std::string etag)`; read errors are system errors.
  template <class CompletionToken>
  auto async_put_stream(std::string bucket, std::string key, int fd, put_options options, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::string)>(
        [this](auto handler, std::string b, std::string k, int f, put_options o) {
          start_put_stream(std::move(b), std::move(k), f, std::move(o),
                           detail::client_handler<std::string>(std::move(handler), get_executor(), detail::with_slot));
        },
        token, std::move(bucket), std::move(key), fd, std::move(options));
  }
  /// Blocking async_put_stream.
  std::string put_stream(const std::string& bucket, const std::string& key, int fd, put_options options,
                         error_code& ec);

  // -- CopyObject ----------------------------------------------------------------------------

  /// Copies `src_bucket`/`src_key` to `dst_bucket`/`dst_key` inside the server (CopyObject, the
  /// source named in x-amz-copy-source; UploadPartCopy parts above options.multipart_threshold).
  /// A 200 whose body is an <Error> (S3 sends one when a copy fails after the answer started)
  /// is that error. Completion: `void(error_code, std::string etag)`, the copy's ETag without
  /// quotes; a missing source is s3::errc::no_such_key.
  template <class CompletionToken>
  auto async_copy_object(std::string src_bucket, std::string src_key, std::string dst_bucket, std::string dst_key,
                         copy_options options, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::string)>(
        [this](auto handler, object_ref from, object_ref to, copy_options o) {
          start_copy_object(std::move(from), std::move(to), std::move(o),
                            detail::client_handler<std::string>(std::move(handler), get_executor(), detail::with_slot));
        },
        token, object_ref{std::move(src_bucket), std::move(src_key)},
        object_ref{std::move(dst_bucket), std::move(dst_key)}, std::move(options));
  }
  /// Blocking async_copy_object.
  std::string copy_object(const std::string& src_bucket, const std::string& src_key, const std::string& dst_bucket,
                          const std::string& dst_key, copy_options options, error_code& ec);
  /// Blocking async_copy_object; throws sluice::system_error.
  std::string copy_object(const std::string& src_bucket, const std::string& src_key, const std::string& dst_bucket,
                          const std::string& dst_key, copy_options options = {});

  // -- DeleteObject --------------------------------------------------------------------------

  /// Deletes `bucket`/`key`. Deleting a key that does not exist succeeds, as in S3.
  /// Completion: `void(error_code)`.
  template <class CompletionToken>
  auto async_delete_object(std::string bucket, std::string key, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code)>(
        [this](auto handler, std::string b, std::string k) {
          start_delete_object(std::move(b), std::move(k),
                              detail::client_handler<>(std::move(handler), get_executor(), detail::with_slot));
        },
        token, std::move(bucket), std::move(key));
  }
  /// Blocking async_delete_object.
  void delete_object(const std::string& bucket, const std::string& key, error_code& ec);
  /// Blocking async_delete_object; throws sluice::system_error.
  void delete_object(const std::string& bucket, const std::string& key);

  // -- ListObjectsV2 -------------------------------------------------------------------------

  /// Lists one page of `bucket` (ListObjectsV2, encoding-type=url so that any key survives).
  /// Pass the page's next_continuation_token in the next call's options while it is truncated.
  /// Completion: `void(error_code, list_objects_result)`.
  template <class CompletionToken>
  auto async_list_objects(std::string bucket, list_options options, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, list_objects_result)>(
        [this](auto handler, std::string b, list_options o) {
          start_list_objects(
              std::move(b), std::move(o), false,
              detail::client_handler<list_objects_result>(std::move(handler), get_executor(), detail::with_slot));
        },
        token, std::move(bucket), std::move(options));
  }
  /// Lists every page, following the continuation tokens, and returns them concatenated
  /// (objects, then common prefixes, in key order; truncated false, no token).
  /// Completion: `void(error_code, list_objects_result)`.
  template <class CompletionToken>
  auto async_list_all_objects(std::string bucket, list_options options, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, list_objects_result)>(
        [this](auto handler, std::string b, list_options o) {
          start_list_objects(
              std::move(b), std::move(o), true,
              detail::client_handler<list_objects_result>(std::move(handler), get_executor(), detail::with_slot));
        },
        token, std::move(bucket), std::move(options));
  }
  /// Blocking async_list_objects (one page).
  list_objects_result list_objects(const std::string& bucket, const list_options& options, error_code& ec);
  /// Blocking async_list_objects (one page); throws sluice::system_error.
  list_objects_result list_objects(const std::string& bucket, const list_options& options = {});
  /// Blocking async_list_all_objects.
  list_objects_result list_all_objects(const std::string& bucket, const list_options& options, error_code& ec);
  /// Blocking async_list_all_objects; throws sluice::system_error.
  list_objects_result list_all_objects(const std::string& bucket, const list_options& options = {});

  // -- Buckets -------------------------------------------------------------------------------

  /// Creates `bucket` (with a LocationConstraint when the region is not us-east-1).
  /// Completion: `void(error_code)`; s3::errc::bucket_already_owned_by_you when it exists.
  template <class CompletionToken>
  auto async_create_bucket(std::string bucket, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code)>(
        [this](auto handler, std::string b) {
          start_bucket_request(std::move(b), true,
                               detail::client_handler<>(std::move(handler), get_executor(), detail::with_slot));
        },
        token, std::move(bucket));
  }
  /// Blocking async_create_bucket.
  void create_bucket(const std::string& bucket, error_code& ec);
  /// Blocking async_create_bucket; throws sluice::system_error.
  void create_bucket(const std::string& bucket);

  /// Deletes the empty `bucket`. Completion: `void(error_code)`; s3::errc::bucket_not_empty
  /// when it holds objects.
  template <class CompletionToken>
  auto async_delete_bucket(std::string bucket, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code)>(
        [this](auto handler, std::string b) {
          start_bucket_request(std::move(b), false,
                               detail::client_handler<>(std::move(handler), get_executor(), detail::with_slot));
        },
        token, std::move(bucket));
  }
  /// Blocking async_delete_bucket.
  void delete_bucket(const std::string& bucket, error_code& ec);
  /// Blocking async_delete_bucket; throws sluice::system_error.
  void delete_bucket(const std::string& bucket);

  /// Lists the buckets the credentials own. Completion: `void(error_code, std::vector<bucket_info>)`.
  template <class CompletionToken>
  auto async_list_buckets(CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::vector<bucket_info>)>(
        [this](auto handler) {
          start_list_buckets(
              detail::client_handler<std::vector<bucket_info>>(std::move(handler), get_executor(), detail::with_slot));
        },
        token);
  }
  /// Blocking async_list_buckets.
  std::vector<bucket_info> list_buckets(error_code& ec);
  /// Blocking async_list_buckets; throws sluice::system_error.
  std::vector<bucket_info> list_buckets();

  // -- Multipart uploads in progress --------------------------------------------------------

  /// The multipart uploads in progress in `bucket` whose keys start with `prefix`
  /// (ListMultipartUploads, every page: key-marker and upload-id-marker followed), each with its
  /// key, upload id and initiation time. Completion: `void(error_code, std::vector<upload_info>)`.
  template <class CompletionToken>
  auto async_list_multipart_uploads(std::string bucket, std::string prefix, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::vector<upload_info>)>(
        [this](auto handler, std::string b, std::string p) {
          start_list_uploads(
              std::move(b), std::move(p),
              detail::client_handler<std::vector<upload_info>>(std::move(handler), get_executor(), detail::with_slot));
        },
        token, std::move(bucket), std::move(prefix));
  }
  /// Blocking async_list_multipart_uploads.
  std::vector<upload_info> list_multipart_uploads(const std::string& bucket, const std::string& prefix, error_code& ec);
  /// Blocking async_list_multipart_uploads; throws sluice::system_error.
  std::vector<upload_info> list_multipart_uploads(const std::string& bucket, const std::string& prefix = {});

  /// Aborts the multipart upload `upload_id` of `bucket`/`key` (AbortMultipartUpload): its parts
  /// are removed. Completion: `void(error_code)`; s3::errc::no_such_upload when there is none.
  template <class CompletionToken>
  auto async_abort_multipart_upload(std::string bucket, std::string key, std::string upload_id,
                                    CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code)>(
        [this](auto handler, std::string b, std::string k, std::string id) {
          start_abort_upload(std::move(b), std::move(k), std::move(id),
                             detail::client_handler<>(std::move(handler), get_executor(), detail::with_slot));
        },
        token, std::move(bucket), std::move(key), std::move(upload_id));
  }
  /// Blocking async_abort_multipart_upload.
  void abort_multipart_upload(const std::string& bucket, const std::string& key, const std::string& upload_id,
                              error_code& ec);
  /// Blocking async_abort_multipart_upload; throws sluice::system_error.
  void abort_multipart_upload(const std::string& bucket, const std::string& key, const std::string& upload_id);

 private:
  // The transports of s3/path.hpp move the bytes of the paths that start_get_object and
  // start_put_object run, with start_read_object and start_write_object.
  template <transfer_via>
  friend class object_transport;

  void start_head_object(std::string bucket, std::string key, detail::client_handler<object_info> handler);
  void start_get_object(std::string bucket, std::string key, region destination, get_options options,
                        detail::client_handler<std::uint64_t> handler);
  void start_put_object(std::string bucket, std::string key, const_region source, put_options options,
                        detail::client_handler<std::string> handler);
  void start_read_object(std::string bucket, std::string key, region destination, get_options options,
                         detail::client_handler<std::uint64_t> handler);
  void start_write_object(std::string bucket, std::string key, const_region source, put_options options,
                          detail::client_handler<std::string> handler);
  void start_put_source(std::string bucket, std::string key, std::shared_ptr<upload_source> source, put_options options,
                        detail::client_handler<std::string> handler);
  void start_put_file(std::string bucket, std::string key, std::filesystem::path file, put_options options,
                      detail::client_handler<std::string> handler);
  void start_put_stream(std::string bucket, std::string key, int fd, put_options options,
                        detail::client_handler<std::string> handler);
  void start_copy_object(object_ref from, object_ref to, copy_options options,
                         detail::client_handler<std::string> handler);
  void start_delete_object(std::string bucket, std::string key, detail::client_handler<> handler);
  void start_list_objects(std::string bucket, list_options options, bool all,
                          detail::client_handler<list_objects_result> handler);
  void start_bucket_request(std::string bucket, bool create, detail::client_handler<> handler);
  void start_list_buckets(detail::client_handler<std::vector<bucket_info>> handler);
  void start_list_uploads(std::string bucket, std::string prefix,
                          detail::client_handler<std::vector<upload_info>> handler);
  void start_abort_upload(std::string bucket, std::string key, std::string upload_id, detail::client_handler<> handler);

  std::shared_ptr<detail::client_state> state_;
};

}  // namespace sluice::s3

template <>
struct boost::system::is_error_code_enum<sluice::s3::client_errc> : std::true_type {};
