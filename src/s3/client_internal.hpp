// SPDX-License-Identifier: Apache-2.0
// The client's internal declarations (include/sluice/s3/client.hpp), shared by its translation
// units: client_connection.cpp (the endpoint URL, cancellation scopes, the connection pool),
// client_exchange.cpp (one HTTP exchange with retries, TLS), client_get.cpp (HeadObject,
// GetObject, the operations' shared parts), client_put.cpp (PutObject), client_copy.cpp
// (CopyObject), client_ops.cpp (the other operations) and client.cpp (the public class). Not
// installed.
#pragma once

#include <sluice/detail/completion.hpp>
#include <sluice/path.hpp>
#include <sluice/s3/checksum.hpp>
#include <sluice/s3/client.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/path.hpp>
#include <sluice/s3/sigv4.hpp>
#include <sluice/s3/xml.hpp>
#include <sluice/s3/xml_client.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <type_traits>

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/text.hpp"

namespace sluice::s3::detail {

namespace client_impl {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

/// The parts of an endpoint URL that requests need.
struct endpoint_parts {
  std::string host;       ///< to resolve and connect to ("127.0.0.1", "::1", "s3.example")
  std::string port;       ///< "9000"
  std::string authority;  ///< the Host header: host[:port] as written
  bool tls = false;       ///< https
};

/// "http://host[:port][/]" or "https://host[:port][/]" → its parts; nullopt for anything else.
std::optional<endpoint_parts> parse_endpoint(std::string_view url);

/// What cancel() reaches: an action posted to the strand of the coroutine that registered it.
struct cancel_slot {
  asio::any_io_executor executor;
  std::function<void()> action;
  bool armed = true;  // read and written on `executor` only
};

/// Posts `slot`'s action to its strand, where it runs unless its scope ended meanwhile.
inline void fire(const std::shared_ptr<cancel_slot>& slot) {
  asio::post(slot->executor, [slot] {
    if (slot->armed) slot->action();
  });
}

/// The cancellation group of one operation whose handler has a connected cancellation slot: the
/// cancel_scopes of all its coroutines (its workers, the requests of the path's transport). A
/// signal on the slot (op_cancel_handler) aborts them, as client_state::cancel_all() aborts all.
struct op_cancellation {
  std::mutex mutex;  // guards slots and cancelled's change
  std::atomic<bool> cancelled{false};
  std::map<std::uint64_t, std::shared_ptr<cancel_slot>> slots;

  void cancel() {
    std::lock_guard lock(mutex);
    cancelled.store(true);
    for (const auto& [id, slot] : slots) fire(slot);
  }
};

/// The state of one top-level operation: its client, the cancel() generation it started in and
/// its own cancellation group, if any (shared by every coroutine of the operation).
struct op_context {
  std::shared_ptr<client_state> state;
  std::uint64_t epoch = 0;
  op_cancellation_ptr cancellation;
  /// True once cancel() was called after the operation started, or its group was cancelled.
  [[nodiscard]] bool aborted() const noexcept;
  [[nodiscard]] const client_config& config() const noexcept;
};

/// Registers `action` with the client, and with the operation's group if it has one, while
/// alive: cancel() (or a signal on the operation's slot) posts it to `executor`, which must be
/// the strand of the coroutine that owns this scope (so the action never outlives what it
/// touches). Check op_context::aborted() after building one, before the operation it guards.
class cancel_scope {
 public:
  cancel_scope(const op_context& op, const asio::any_io_executor& executor, std::function<void()> action);
  cancel_scope(const cancel_scope&) = delete;
  cancel_scope& operator=(const cancel_scope&) = delete;
  ~cancel_scope();

 private:
  client_state* state_;
  op_cancellation* group_;  // owned by the op_context, which outlives the scope
  std::uint64_t id_;
  std::shared_ptr<cancel_slot> slot_;
};

/// Whether the peer has not closed an idle socket and sent nothing unexpected (a peek that
/// would block).
bool still_open(tcp::socket& socket);

/// The layer under a TLS session: forwards to a beast::tcp_stream that it does not own (the
/// lease's), so that the session survives when its connection moves to another strand and the
/// stream is replaced by one adopted there (reset()).
class tcp_layer {
 public:
  using executor_type = beast::tcp_stream::executor_type;
  using lowest_layer_type = beast::tcp_stream::socket_type;

  explicit tcp_layer(beast::tcp_stream* stream) noexcept : stream_(stream) {}
  void reset(beast::tcp_stream* stream) noexcept { stream_ = stream; }

  executor_type get_executor() noexcept { return stream_->get_executor(); }
  lowest_layer_type& lowest_layer() noexcept { return stream_->socket(); }
  [[nodiscard]] const lowest_layer_type& lowest_layer() const noexcept { return stream_->socket(); }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return stream_->async_read_some(buffers, std::forward<Token>(token));
  }
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return stream_->async_write_some(buffers, std::forward<Token>(token));
  }

 private:
  beast::tcp_stream* stream_;
};

/// A TLS session over a pooled connection.
using tls_stream = asio::ssl::stream<tcp_layer>;

/// Keep-alive connections, per host, bounded by max_connections_per_host (in use plus idle).
class connection_pool {
 public:
  /// A connection slot held by one request: a stream (connected when reused, to be connected
  /// otherwise) and, over https, the TLS session on it (made by start_tls() on a new
  /// connection). Gives the slot back when destroyed, dropping the connection unless
  /// give_back(true) said it may be reused.
  class lease {
   public:
    lease() = default;
    lease(connection_pool* pool, std::string host_key, std::unique_ptr<beast::tcp_stream> stream,
          std::unique_ptr<tls_stream> tls, bool reused)
        : pool_(pool),
          host_key_(std::move(host_key)),
          stream_(std::move(stream)),
          tls_(std::move(tls)),
          reused_(reused) {}
    lease(lease&& other) noexcept
        : pool_(std::exchange(other.pool_, nullptr)),
          host_key_(std::move(other.host_key_)),
          stream_(std::move(other.stream_)),
          tls_(std::move(other.tls_)),
          reused_(other.reused_) {}
    lease& operator=(lease&& other) noexcept {
      if (this != &other) {
        give_back(false);
        pool_ = std::exchange(other.pool_, nullptr);
        host_key_ = std::move(other.host_key_);
        stream_ = std::move(other.stream_);
        tls_ = std::move(other.tls_);
        reused_ = other.reused_;
      }
      return *this;
    }
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease() { give_back(false); }

    [[nodiscard]] beast::tcp_stream& stream() noexcept { return *stream_; }
    /// The TLS session; null on plain HTTP and before start_tls().
    [[nodiscard]] tls_stream* tls() noexcept { return tls_.get(); }
    /// A new TLS session over the (connected) stream.
    tls_stream& start_tls(asio::ssl::context& context) {
      tls_ = std::make_unique<tls_stream>(tcp_layer(stream_.get()), context);
      return *tls_;
    }
    [[nodiscard]] bool reused() const noexcept { return reused_; }
    [[nodiscard]] bool valid() const noexcept { return pool_ != nullptr; }

    /// Returns the slot; with `reusable`, the connection goes back to the pool (or to a waiter).
    void give_back(bool reusable);

   private:
    connection_pool* pool_ = nullptr;
    std::string host_key_;
    std::unique_ptr<beast::tcp_stream> stream_;
    std::unique_ptr<tls_stream> tls_;  // after stream_: refers to it, destroyed first
    bool reused_ = false;
  };

  connection_pool(asio::io_context& io, std::size_t max_per_host, std::chrono::seconds idle_timeout)
      : io_(io), max_per_host_(max_per_host), idle_timeout_(idle_timeout) {}

  /// A slot for `host_key`: an idle connection that is still open, or a new stream, or (when
  /// the host is at its bound) the next one given back. Waits at most until `deadline`
  /// (asio::error::timed_out) and ends with operation_aborted on cancel(). Runs on the caller's
  /// strand; the stream is bound to it.
  asio::awaitable<lease> acquire(const op_context& op, const std::string& host_key, steady::time_point deadline,
                                 error_code& ec);

 private:
  struct idle_connection {
    tcp::socket socket;
    std::unique_ptr<tls_stream> tls;  // https: the session, its layer pointing nowhere while idle
    steady::time_point since;
  };
  struct waiter {
    explicit waiter(const asio::any_io_executor& executor) : timer(executor) {}
    asio::steady_timer timer;               // on the waiter's strand
    bool granted = false;                   // guarded by mutex_: a slot was handed over
    std::optional<idle_connection> handed;  // guarded by mutex_: with this connection, if any
  };
  struct host_entry {
    std::size_t busy = 0;  // slots held by leases (and granted waiters)
    std::vector<idle_connection> idle;
    std::deque<std::shared_ptr<waiter>> waiters;
  };

  std::optional<idle_connection> take_idle(host_entry& host);
  void put_back(const std::string& host_key, std::optional<tcp::socket> socket, std::unique_ptr<tls_stream> tls);

  asio::io_context& io_;
  std::size_t max_per_host_;
  std::chrono::seconds idle_timeout_;
  std::mutex mutex_;
  std::map<std::string, host_entry, std::less<>> hosts_;
};

}  // namespace client_impl

/// Everything a client and its operations share.
struct client_state {
  explicit client_state(client_config c, client_impl::endpoint_parts e)
      : config(std::move(c)),
        where(std::move(e)),
        pool(io, config.max_connections_per_host, config.idle_connection_timeout),
        random(std::random_device{}()) {}

  client_config config;
  client_impl::endpoint_parts where;
  boost::asio::io_context io;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  std::optional<boost::asio::ssl::context> tls_context;  // https: protocol versions, trusted CAs
  client_impl::connection_pool pool;                     // after io: its idle sockets are destroyed first

  std::mutex cancel_mutex;  // guards cancel_slots and next_slot
  std::atomic<std::uint64_t> epoch{0};
  std::map<std::uint64_t, std::shared_ptr<client_impl::cancel_slot>> cancel_slots;
  std::uint64_t next_slot = 0;
  std::atomic<bool> closing{false};

  std::atomic<std::uint64_t> connections_opened{0};
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> retries{0};
  std::atomic<std::uint64_t> rdma_bytes{0};
  std::atomic<std::uint64_t> http_bytes{0};

  std::mutex random_mutex;
  std::minstd_rand random;

  /// Starts a new cancel() generation and runs every registered action on its strand.
  void cancel_all() {
    std::lock_guard lock(cancel_mutex);
    epoch.fetch_add(1);
    for (const auto& [id, slot] : cancel_slots) client_impl::fire(slot);
  }
};

namespace client_impl {

/// A new operation of `state`, in the current cancel() generation, aborted with `cancellation`
/// too when given (the group of the handler's slot, or of the operation it is part of).
op_context make_op(const std::shared_ptr<client_state>& state, op_cancellation_ptr cancellation = {});

// ---------------------------------------------------------------------------------------------
// One HTTP exchange, with retries

/// Reports the bytes of one transfer to its progress callback.
struct transfer_progress {
  progress_callback callback;
  std::uint64_t total = 0;
  std::uint64_t done = 0;

  void add(std::uint64_t bytes) {
    done += bytes;
    if (callback && bytes > 0) callback(done, total);
  }
  void take_back(std::uint64_t bytes) {
    done -= std::min(done, bytes);
    if (callback && bytes > 0) callback(done, total);
  }
};

/// Which failures a request may be repeated after (see the header's "Retries").
enum class retry_mode {
  idempotent,       ///< 5xx, RequestTimeout, SlowDown and connection errors
  rejected_only,    ///< only 503 answers (SlowDown, ServiceUnavailable): the server refused it
  complete_upload,  ///< as idempotent; the caller checks a NoSuchUpload after a repeat
};

/// A response's header, the success body as text (or the count of bytes put into a target), and
/// how many attempts it took.
struct response {
  unsigned status = 0;
  http::response_header<> header;
  std::string body;
  std::uint64_t body_bytes = 0;
  std::uint32_t attempts = 0;

  [[nodiscard]] std::string_view field(std::string_view name) const {
    auto it = header.find(beast::string_view(name.data(), name.size()));
    if (it == header.end()) return {};
    return {it->value().data(), it->value().size()};
  }
};

/// Decides, from a success answer's header, where its body goes: into `target`, exactly; with
/// `longer_ok` the rest of a longer body is dropped with the connection. An error ends the
/// request at once (not retried).
using target_chooser = std::function<error_code(const response&, std::span<std::byte>& target, bool& longer_ok)>;

/// One request to send: method, bucket, key, query (decoded; a flag such as "uploads" has an
/// empty value), extra headers, body and what to do with the answer.
struct request_spec {
  http::verb method = http::verb::get;
  std::string bucket;
  std::string key;
  std::vector<std::pair<std::string, std::string>> query;
  std::vector<std::pair<std::string, std::string>> headers;
  std::span<const std::byte> body;  // valid for every attempt
  bool has_body = false;            // sends Content-Length (also 0)
  std::string payload_hash;         // empty: SHA-256 of nothing without a body, else UNSIGNED-PAYLOAD
  retry_mode retry = retry_mode::idempotent;
  target_chooser choose;  // set: a success body goes into the chosen target; unset: into response::body
  transfer_progress* progress = nullptr;
  std::optional<std::chrono::seconds> timeout;  // instead of request_timeout
  // Set: a chosen success body goes to it (get_options::sink; offset in the chosen target) instead
  // of into the target, whose size alone counts.
  const std::function<error_code(std::uint64_t, std::span<const std::byte>)>* sink = nullptr;
};

constexpr std::size_t io_slice = 1 * mib;        // bytes per write or read call (progress granularity)
constexpr std::size_t max_text_body = 64 * mib;  // a listing page or an XML answer
constexpr std::size_t max_error_body = 1 * mib;  // an error answer
constexpr std::chrono::seconds max_backoff{20};
constexpr std::chrono::seconds abort_timeout{10};  // the best-effort AbortMultipartUpload

/// "bytes a-b/total" or "bytes */total".
struct content_range {
  std::optional<std::uint64_t> first;
  std::optional<std::uint64_t> last;
  std::optional<std::uint64_t> total;
};

std::optional<content_range> parse_content_range(std::string_view text);

using ::sluice::detail::unquote_etag;

/// `text` in lower case (ASCII).
std::string lower(std::string_view text);

/// The error an answer of status 300 or more stands for: its body's <Code>, or its status.
error_code error_of(const response& res, bool bucket_level);

/// OpenSSL's last error on this thread, in Asio's "asio.ssl" category (invalid_argument if none).
error_code last_ssl_error();

/// Sends `spec` with the retry policy. `ec` is set when no answer could be had (or the body
/// plan refused it); an answer of any status is returned otherwise, the last one after retries.
asio::awaitable<response> execute(const op_context& op, const request_spec& spec, error_code& ec);

// ---------------------------------------------------------------------------------------------
// Operations

/// What a top-level coroutine hands to its completion: an error, or a value.
template <class T>
struct outcome {
  error_code ec;
  T value{};
};
struct nothing {};

/// The error an exception a coroutine ended with stands for.
error_code error_from(const std::exception_ptr& failure);

/// Runs `work` on a new strand of the client and completes `handler` with its outcome.
template <class T, class... Values>
void spawn(const std::shared_ptr<client_state>& state, asio::awaitable<outcome<T>> work,
           client_handler<Values...> handler) {
  asio::co_spawn(asio::make_strand(state->io), std::move(work),
                 [h = std::move(handler)](std::exception_ptr failure, outcome<T> result) mutable {
                   if (failure) {
                     result.ec = error_from(failure);
                     result.value = T{};
                   }
                   if constexpr (sizeof...(Values) == 0) {
                     h(result.ec);
                   } else {
                     if (result.ec) result.value = T{};
                     h(result.ec, std::move(result.value));
                   }
                 });
}

/// Runs `count` workers made by `make` at once on this strand and returns when all ended.
asio::awaitable<void> run_workers(std::size_t count, const std::function<asio::awaitable<void>()>& make);

/// The headers that publish `attributes` with an object (PUT, CreateMultipartUpload).
void add_attribute_headers(std::vector<std::pair<std::string, std::string>>& headers,
                           const object_attributes& attributes, error_code& ec);

/// HEAD of one object.
asio::awaitable<object_info> head_request(const op_context& op, const std::string& bucket, const std::string& key,
                                          error_code& ec);

/// What carried one transfer's bytes; its parts count from several threads.
struct path_counter {
  std::atomic<std::uint64_t> rdma_bytes{0};
  std::atomic<std::uint64_t> http_bytes{0};
  std::atomic<std::uint32_t> rdma_requests{0};
  std::atomic<std::uint32_t> http_requests{0};
  std::atomic<std::uint32_t> declined{0};

  void rdma(client_state& state, std::uint64_t bytes) {
    rdma_bytes += bytes;
    ++rdma_requests;
    state.rdma_bytes += bytes;
  }
  void http(client_state& state, std::uint64_t bytes) {
    http_bytes += bytes;
    ++http_requests;
    state.http_bytes += bytes;
  }
  void report_to(transfer_report* report) const {
    if (report == nullptr) return;
    *report = {rdma_bytes.load(), http_bytes.load(), rdma_requests.load(), http_requests.load(), declined.load()};
  }
};

/// Whether the server moved an answer's bytes by RDMA (x-amz-rdma-reply: 200, 204 or 206).
bool moved_by_rdma(const response& res);

/// A grant for one request's memory, or null when the request goes over HTTP: `via` is http,
/// the client has no plane, or (automatic) the memory cannot be registered. The grant outlives
/// every retry of the request.
std::unique_ptr<rdma_client_plane::grant> grant_for(const client_config& config, transfer_via via, const region& memory,
                                                    rdma_op op, error_code& ec);

/// CreateMultipartUpload of `bucket`/`key` publishing `attributes`: the upload id, or `ec`.
asio::awaitable<std::string> create_upload(const op_context& op, const std::string& bucket, const std::string& key,
                                           const object_attributes& attributes, error_code& ec);

/// CompleteMultipartUpload of `parts` (ascending) with `precondition`: the object's ETag, or `ec`
/// (and the upload aborted). `expected` (may be empty) is the ETag the object must have for a
/// repeat answered NoSuchUpload to count as done (an earlier attempt completed it unseen).
asio::awaitable<std::string> complete_upload(const op_context& op, const std::string& bucket, const std::string& key,
                                             const std::string& upload_id,
                                             const std::vector<xml::completed_part>& parts,
                                             const write_precondition& precondition, const std::string& expected,
                                             error_code& ec);

/// Best effort: AbortMultipartUpload, so that a failed upload leaves nothing. Runs in a fresh
/// cancel() generation and outside the operation's cancellation group (the failure may be a
/// cancellation), with a short deadline.
asio::awaitable<void> abort_upload(const op_context& op, const std::string& bucket, const std::string& key,
                                   const std::string& upload_id);

/// The ETag S3 gives a multipart upload of parts with these MD5s: MD5 of the MD5s, "-N".
std::string multipart_etag(std::span<const std::array<std::byte, 16>> md5s);

/// A source of upload bytes (memory, a file, the caller's upload_source).
using byte_source = upload_source;

// The operations: each a top-level coroutine that client.cpp spawns (spawn()).

asio::awaitable<outcome<object_info>> head_object_op(op_context op, std::string bucket, std::string key);
asio::awaitable<outcome<std::uint64_t>> get_object_op(op_context op, std::string bucket, std::string key,
                                                      region destination, get_options options);
asio::awaitable<outcome<std::string>> put_region_op(op_context op, std::string bucket, std::string key,
                                                    const_region source, put_options options);
asio::awaitable<outcome<std::string>> put_source_op(op_context op, std::string bucket, std::string key,
                                                    std::shared_ptr<byte_source> source, put_options options);
asio::awaitable<outcome<std::string>> put_file_op(op_context op, std::string bucket, std::string key,
                                                  std::filesystem::path file, put_options options);
asio::awaitable<outcome<std::string>> put_stream_op(op_context op, std::string bucket, std::string key, int fd,
                                                    put_options options);
asio::awaitable<outcome<std::string>> copy_object_op(op_context op, object_ref from, object_ref to,
                                                     copy_options options);
asio::awaitable<outcome<nothing>> delete_object_op(op_context op, std::string bucket, std::string key);
asio::awaitable<outcome<nothing>> bucket_op(op_context op, std::string bucket, bool create);
asio::awaitable<outcome<list_objects_result>> list_objects_op(op_context op, std::string bucket, list_options options,
                                                              bool all);
asio::awaitable<outcome<std::vector<bucket_info>>> list_buckets_op(op_context op);
asio::awaitable<outcome<std::vector<upload_info>>> list_uploads_op(op_context op, std::string bucket,
                                                                   std::string prefix);
asio::awaitable<outcome<nothing>> abort_upload_op(op_context op, std::string bucket, std::string key,
                                                  std::string upload_id);

}  // namespace client_impl
}  // namespace sluice::s3::detail
