// Implementation of include/sluice/s3/client.hpp; included by src/s3/s3.cpp.
//
// Every operation is one coroutine on a strand of its own (asio::co_spawn). The parts of a
// multipart upload or of a parallel download are worker coroutines on that same strand, so
// the state they share needs no lock; operations run in parallel on the client's threads.
// A connection moves between operations through the pool: its descriptor is released from
// the socket of one strand and adopted by a socket of the next, so that a beast::tcp_stream
// (and its timeout timer) always lives on the strand of the coroutine that uses it. Over https
// the TLS session (an asio::ssl::stream, whose SSL object talks to the socket only through the
// layer below it) moves with the connection, and that layer is pointed at the adopted stream.
// Requests are one template, attempt<Tls>: plain HTTP reads and writes the beast::tcp_stream as
// before, https goes through the ssl::stream over it.
#include <sluice/detail/completion.hpp>
#include <sluice/s3/checksum.hpp>
#include <sluice/s3/client.hpp>
#include <sluice/s3/error.hpp>
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

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <sys/stat.h>
#include <unistd.h>

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

/// Whether `url` starts with `scheme` ("http://"), in any case.
bool has_scheme(std::string_view url, std::string_view scheme) {
  if (url.size() < scheme.size()) return false;
  for (std::size_t i = 0; i < scheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(url[i])) != scheme[i]) return false;
  }
  return true;
}

/// "http://host[:port][/]" or "https://host[:port][/]" → its parts; nullopt for anything else.
std::optional<endpoint_parts> parse_endpoint(std::string_view url) {
  const bool tls = has_scheme(url, "https://");
  if (!tls && !has_scheme(url, "http://")) return std::nullopt;
  std::string_view rest = url.substr(tls ? 8 : 7);
  if (rest.ends_with('/')) rest.remove_suffix(1);
  if (rest.empty() || rest.find_first_of("/?#@ \t\r\n") != std::string_view::npos) return std::nullopt;
  endpoint_parts out;
  out.authority = std::string(rest);
  out.tls = tls;
  std::string_view port = tls ? "443" : "80";
  if (rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string_view::npos || close == 1) return std::nullopt;
    out.host = std::string(rest.substr(1, close - 1));
    const std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return std::nullopt;
      port = after.substr(1);
    }
  } else {
    const auto colon = rest.rfind(':');
    out.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) port = rest.substr(colon + 1);
    if (out.host.empty() || out.host.find(':') != std::string::npos) return std::nullopt;
  }
  unsigned number = 0;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), number);
  if (port.empty() || error != std::errc{} || end != port.data() + port.size() || number == 0 || number > 65535) {
    return std::nullopt;
  }
  out.port = std::string(port);
  return out;
}

/// What cancel() reaches: an action posted to the strand of the coroutine that registered it.
struct cancel_slot {
  asio::any_io_executor executor;
  std::function<void()> action;
  bool armed = true;  // read and written on `executor` only
};

/// The state of one top-level operation: its client and the cancel() generation it started in.
struct op_context {
  std::shared_ptr<client_state> state;
  std::uint64_t epoch = 0;
  /// True once cancel() was called after the operation started.
  [[nodiscard]] bool aborted() const noexcept;
  [[nodiscard]] const client_config& config() const noexcept;
};

/// Registers `action` with the client while alive: cancel() posts it to `executor`, which must
/// be the strand of the coroutine that owns this scope (so the action never outlives what it
/// touches). Check op_context::aborted() after building one, before the operation it guards.
class cancel_scope {
 public:
  cancel_scope(const op_context& op, const asio::any_io_executor& executor, std::function<void()> action);
  cancel_scope(const cancel_scope&) = delete;
  cancel_scope& operator=(const cancel_scope&) = delete;
  ~cancel_scope();

 private:
  client_state* state_;
  std::uint64_t id_;
  std::shared_ptr<cancel_slot> slot_;
};

/// Whether the peer has not closed an idle socket and sent nothing unexpected (a peek that
/// would block).
bool still_open(tcp::socket& socket) {
  error_code ec;
  socket.non_blocking(true, ec);
  if (ec) return false;
  std::byte probe{};
  const std::size_t n = socket.receive(asio::buffer(&probe, 1), tcp::socket::message_peek, ec);
  const bool open = n == 0 && ec == asio::error::would_block;
  error_code ignored;
  socket.non_blocking(false, ignored);
  return open;
}

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

/// Moves the descriptor of `socket` into a new socket on `executor`; nullptr when it failed or
/// the connection is no longer usable.
std::unique_ptr<beast::tcp_stream> adopt(tcp::socket& socket, const asio::any_io_executor& executor) {
  if (!still_open(socket)) return nullptr;
  error_code ec;
  const auto protocol = socket.local_endpoint(ec).protocol();
  if (ec) return nullptr;
  const auto fd = socket.release(ec);
  if (ec) return nullptr;
  tcp::socket mine(executor);
  mine.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    return nullptr;
  }
  return std::make_unique<beast::tcp_stream>(std::move(mine));
}

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
    for (const auto& [id, slot] : cancel_slots) {
      boost::asio::post(slot->executor, [slot = slot] {
        if (slot->armed) slot->action();
      });
    }
  }
};

namespace client_impl {

bool op_context::aborted() const noexcept { return state->epoch.load() != epoch; }
const client_config& op_context::config() const noexcept { return state->config; }

op_context make_op(const std::shared_ptr<client_state>& state) { return {state, state->epoch.load()}; }

cancel_scope::cancel_scope(const op_context& op, const asio::any_io_executor& executor, std::function<void()> action)
    : state_(op.state.get()), slot_(std::make_shared<cancel_slot>()) {
  slot_->executor = executor;
  slot_->action = std::move(action);
  std::lock_guard lock(state_->cancel_mutex);
  id_ = state_->next_slot++;
  state_->cancel_slots.emplace(id_, slot_);
}

cancel_scope::~cancel_scope() {
  slot_->armed = false;
  std::lock_guard lock(state_->cancel_mutex);
  state_->cancel_slots.erase(id_);
}

void connection_pool::lease::give_back(bool reusable) {
  if (pool_ == nullptr) return;
  connection_pool* pool = std::exchange(pool_, nullptr);
  std::optional<tcp::socket> keep;
  if (reusable && stream_ && stream_->socket().is_open()) {
    error_code ec;
    auto& socket = stream_->socket();
    const auto protocol = socket.local_endpoint(ec).protocol();
    if (!ec) {
      stream_->expires_never();
      const auto fd = socket.release(ec);
      if (!ec) {
        keep.emplace(pool->io_.get_executor());
        keep->assign(protocol, fd, ec);
        if (ec) {
          ::close(fd);
          keep.reset();
        }
      }
    }
  }
  std::unique_ptr<tls_stream> session;
  if (keep && tls_) {
    session = std::move(tls_);
    session->next_layer().reset(nullptr);
  }
  tls_.reset();
  stream_.reset();
  pool->put_back(host_key_, std::move(keep), std::move(session));
}

std::optional<connection_pool::idle_connection> connection_pool::take_idle(host_entry& host) {
  const auto now = steady::now();
  while (!host.idle.empty()) {
    idle_connection candidate = std::move(host.idle.back());
    host.idle.pop_back();
    if (now - candidate.since < idle_timeout_ && still_open(candidate.socket)) return candidate;
    // closed by the peer, or idle for too long: closed as it goes out of scope
  }
  return std::nullopt;
}

void connection_pool::put_back(const std::string& host_key, std::optional<tcp::socket> socket,
                               std::unique_ptr<tls_stream> tls) {
  std::lock_guard lock(mutex_);
  host_entry& host = hosts_[host_key];
  if (!host.waiters.empty()) {
    // The slot passes to the first waiter (busy stays as it is), with the connection if any.
    std::shared_ptr<waiter> next = std::move(host.waiters.front());
    host.waiters.pop_front();
    next->granted = true;
    if (socket) next->handed.emplace(idle_connection{std::move(*socket), std::move(tls), steady::now()});
    asio::post(next->timer.get_executor(), [next] { next->timer.cancel(); });
    return;
  }
  --host.busy;
  if (socket) host.idle.push_back(idle_connection{std::move(*socket), std::move(tls), steady::now()});
}

asio::awaitable<connection_pool::lease> connection_pool::acquire(const op_context& op, const std::string& host_key,
                                                                 steady::time_point deadline, error_code& ec) {
  ec = {};
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  std::optional<idle_connection> found;
  std::shared_ptr<waiter> queued;
  {
    std::lock_guard lock(mutex_);
    host_entry& host = hosts_[host_key];
    found = take_idle(host);
    if (found || host.busy + host.idle.size() < max_per_host_) {
      ++host.busy;
    } else {
      queued = std::make_shared<waiter>(executor);
      queued->timer.expires_at(deadline);
      host.waiters.push_back(queued);
    }
  }
  if (queued) {
    cancel_scope scope(op, executor, [queued] { queued->timer.cancel(); });
    bool granted = false;
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (queued->granted) {
          granted = true;
          found = std::move(queued->handed);
        } else if (op.aborted() || steady::now() >= deadline) {
          auto& waiters = hosts_[host_key].waiters;
          waiters.erase(std::remove(waiters.begin(), waiters.end(), queued), waiters.end());
          ec = op.aborted() ? error_code(asio::error::operation_aborted) : error_code(asio::error::timed_out);
        }
      }
      if (granted || ec) break;
      error_code ignored;
      co_await queued->timer.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    }
    if (ec) co_return lease{};
  }
  std::unique_ptr<beast::tcp_stream> stream;
  std::unique_ptr<tls_stream> tls;
  if (found) stream = adopt(found->socket, executor);
  if (stream && found->tls) {
    tls = std::move(found->tls);  // the session goes on over the adopted stream
    tls->next_layer().reset(stream.get());
  }
  const bool reused = stream != nullptr;
  if (!stream) stream = std::make_unique<beast::tcp_stream>(executor);
  co_return lease(this, host_key, std::move(stream), std::move(tls), reused);
}

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
};

constexpr std::size_t io_slice = 1 * mib;        // bytes per write or read call (progress granularity)
constexpr std::size_t max_text_body = 64 * mib;  // a listing page or an XML answer
constexpr std::size_t max_error_body = 1 * mib;  // an error answer
constexpr std::chrono::seconds max_backoff{20};
constexpr std::chrono::seconds abort_timeout{10};  // the best-effort AbortMultipartUpload

/// The path and query of a request, as sent and signed.
std::string target_for(const client_config& config, const request_spec& spec) {
  std::string target = "/";
  if (config.path_style && !spec.bucket.empty()) {
    target += uri_encode(spec.bucket, true);
    if (!spec.key.empty()) target += '/';
  }
  target += uri_encode(spec.key, false);
  char separator = '?';
  for (const auto& [name, value] : spec.query) {
    target += separator;
    separator = '&';
    target += uri_encode(name, true);
    if (!value.empty()) {
      target += '=';
      target += uri_encode(value, true);
    }
  }
  return target;
}

/// Where a request for `bucket` goes: Host header, name to connect to, pool key.
struct address {
  std::string host_header;
  std::string connect_host;
  std::string pool_key;
};

address address_for(const client_state& state, std::string_view bucket) {
  address a;
  if (state.config.path_style || bucket.empty()) {
    a.host_header = state.where.authority;
    a.connect_host = state.where.host;
  } else {
    a.host_header = std::string(bucket) + "." + state.where.authority;
    a.connect_host = std::string(bucket) + "." + state.where.host;
  }
  // A kept-alive TLS session was verified for this host name: it is reused for this host only.
  a.pool_key = (state.where.tls ? "https " : "http ") + a.connect_host + " " + state.where.port;
  return a;
}

bool is_connection_error(const error_code& ec) {
  return ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::connection_aborted ||
         ec == asio::error::broken_pipe || ec == asio::error::connection_refused || ec == asio::error::not_connected ||
         ec == asio::error::network_reset || ec == asio::error::shut_down || ec == http::error::end_of_stream ||
         ec == http::error::partial_message ||
         ec == asio::ssl::error::stream_truncated;  // TLS: closed without close_notify
}

/// Whether an answer asks to be repeated later.
bool retryable_answer(const response& res) {
  if (res.status >= 500) return true;
  if (res.status == 400 || res.status == 429) {
    error_code ec;
    const auto error = xml::parse_error(res.body, ec);
    return !ec && (error.code == "RequestTimeout" || error.code == "SlowDown");
  }
  return false;
}

/// The error an answer of status 300 or more stands for: its body's <Code>, or its status.
error_code error_of(const response& res, bool bucket_level) {
  if (!res.body.empty()) {
    error_code parse_ec;
    const auto error = xml::parse_error(res.body, parse_ec);
    if (!parse_ec && (error.value() != errc::internal_error || error.code == "InternalError")) return error.value();
  }
  switch (res.status) {
    case 304: return errc::not_modified;
    case 403: return errc::access_denied;
    case 404: return bucket_level ? errc::no_such_bucket : errc::no_such_key;
    case 405: return errc::method_not_allowed;
    case 411: return errc::missing_content_length;
    case 412: return errc::precondition_failed;
    case 416: return errc::invalid_range;
    case 500: return errc::internal_error;
    case 501: return errc::not_implemented;
    case 503: return errc::service_unavailable;
    default: break;
  }
  return res.status >= 500 ? errc::internal_error : errc::invalid_request;
}

/// "bytes a-b/total" or "bytes */total".
struct content_range {
  std::optional<std::uint64_t> first;
  std::optional<std::uint64_t> last;
  std::optional<std::uint64_t> total;
};

std::optional<content_range> parse_content_range(std::string_view text) {
  if (!text.starts_with("bytes ")) return std::nullopt;
  text.remove_prefix(6);
  const auto slash = text.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  auto number = [](std::string_view s, std::optional<std::uint64_t>& out) {
    std::uint64_t v = 0;
    const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || error != std::errc{} || end != s.data() + s.size()) return false;
    out = v;
    return true;
  };
  content_range out;
  const std::string_view span = text.substr(0, slash);
  const std::string_view total = text.substr(slash + 1);
  if (total != "*" && !number(total, out.total)) return std::nullopt;
  if (span != "*") {
    const auto dash = span.find('-');
    if (dash == std::string_view::npos || !number(span.substr(0, dash), out.first) ||
        !number(span.substr(dash + 1), out.last)) {
      return std::nullopt;
    }
  }
  return out;
}

std::string unquote(std::string_view etag) {
  if (etag.starts_with("W/")) etag.remove_prefix(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return std::string(etag);
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// Reads the body into `target` until it is full or the message ends; the bytes read. `Stream`
/// is beast::tcp_stream or tls_stream, here and below.
template <class Stream>
asio::awaitable<std::size_t> read_into(Stream& stream, beast::flat_buffer& buffer,
                                       http::response_parser<http::buffer_body>& parser, std::span<std::byte> target,
                                       transfer_progress* progress, std::uint64_t& progressed, error_code& ec) {
  std::size_t filled = 0;
  while (!parser.is_done() && filled < target.size()) {
    const std::size_t n = std::min(io_slice, target.size() - filled);
    parser.get().body().data = target.data() + filled;
    parser.get().body().size = n;
    co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    const std::size_t got = n - parser.get().body().size;
    filled += got;
    if (progress != nullptr && got > 0) {
      progress->add(got);
      progressed += got;
    }
    if (ec) break;
  }
  co_return filled;
}

/// Reads the rest of a body of known length straight from the socket into `target` (after the
/// bytes the header read left in `buffer`): no copy but the kernel's (over TLS, OpenSSL decrypts
/// into `target`). The bytes read.
template <class Stream>
asio::awaitable<std::size_t> read_direct(Stream& stream, beast::flat_buffer& buffer, std::span<std::byte> target,
                                         transfer_progress* progress, std::uint64_t& progressed, error_code& ec) {
  std::size_t filled = std::min(buffer.size(), target.size());
  asio::buffer_copy(asio::buffer(target.data(), filled), buffer.data());
  buffer.consume(filled);
  if (progress != nullptr && filled > 0) {
    progress->add(filled);
    progressed += filled;
  }
  while (filled < target.size()) {
    const std::size_t n = std::min(io_slice, target.size() - filled);
    std::size_t got = 0;
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      got = co_await stream.async_read_some(asio::buffer(target.data() + filled, n),
                                            asio::redirect_error(asio::use_awaitable, ec));
    } else {
      // A TLS read returns one record (16 KiB at most): the whole slice at once instead, so that
      // progress is still reported per io_slice.
      got = co_await asio::async_read(stream, asio::buffer(target.data() + filled, n),
                                      asio::redirect_error(asio::use_awaitable, ec));
    }
    filled += got;
    if (progress != nullptr && got > 0) {
      progress->add(got);
      progressed += got;
    }
    if (ec) break;
  }
  co_return filled;
}

/// Reads the body as text, up to `limit` bytes (the rest stays unread).
template <class Stream>
asio::awaitable<void> read_text(Stream& stream, beast::flat_buffer& buffer,
                                http::response_parser<http::buffer_body>& parser, std::string& text, std::size_t limit,
                                error_code& ec) {
  std::vector<char> chunk(64 * kib);
  while (!parser.is_done() && text.size() < limit) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    text.append(chunk.data(), chunk.size() - parser.get().body().size);
    if (ec) break;
  }
}

/// The outcome of one attempt.
struct attempt_result {
  error_code ec;          // what failed, if anything; a response was received when empty
  bool fatal = false;     // not to be retried (deadline, a chooser's verdict, a bad answer)
  bool reused = false;    // on a pooled keep-alive connection
  bool answered = false;  // a byte of the answer arrived
  std::uint64_t progressed = 0;
  response res;
};

/// OpenSSL's last error on this thread, in Asio's "asio.ssl" category (invalid_argument if none).
error_code last_ssl_error() {
  const unsigned long code = ::ERR_get_error();
  if (code == 0) return sluice::errc::invalid_argument;
  return {static_cast<int>(code), asio::error::get_ssl_category()};
}

/// RFC 6125 host name verification (asio::ssl::host_name_verification: a DNS name against the
/// certificate's DNS SANs, an IP literal against its IP SANs) that records a mismatch as the
/// verification result, so the error says why (OpenSSL leaves it unspecified otherwise).
struct host_check {
  asio::ssl::host_name_verification check;
  bool ip_literal = false;

  bool operator()(bool preverified, asio::ssl::verify_context& context) const {
    const bool ok = check(preverified, context);
    if (!ok && preverified) {
      X509_STORE_CTX_set_error(context.native_handle(),
                               ip_literal ? X509_V_ERR_IP_ADDRESS_MISMATCH : X509_V_ERR_HOSTNAME_MISMATCH);
    }
    return ok;
  }
};

/// Whether the TLS session holds nothing received and unread. What arrived with the answer (a
/// close_notify sent right after it, as a server that closes after answering does) waits in
/// OpenSSL's buffers, where the socket peek of still_open() cannot see it.
bool nothing_buffered(tls_stream& tls) {
  SSL* ssl = tls.native_handle();
  return SSL_has_pending(ssl) == 0 && BIO_ctrl_pending(SSL_get_rbio(ssl)) == 0;
}

/// Starts TLS on the new connection of `conn` to `host` (SNI unless an IP literal, certificate
/// and host name verified as the configuration says) and runs the handshake. A certificate
/// refused is tls_verify_category() with OpenSSL's verification result.
asio::awaitable<error_code> start_tls(client_state& state, connection_pool::lease& conn, const std::string& host) {
  tls_stream& tls = conn.start_tls(*state.tls_context);
  error_code ec;
  error_code not_an_address;
  (void)asio::ip::make_address(host, not_an_address);
  const bool ip_literal = !not_an_address;
  // SNI names a host, never an address (RFC 6066 §3); OpenSSL sends what it is given. (This is
  // SSL_set_tlsext_host_name, whose macro casts; OpenSSL copies the name.)
  if (!ip_literal && SSL_ctrl(tls.native_handle(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                              const_cast<char*>(host.c_str())) != 1) {
    co_return last_ssl_error();
  }
  if (state.config.verify_peer) {
    tls.set_verify_callback(host_check{asio::ssl::host_name_verification(host), ip_literal}, ec);
    if (ec) co_return ec;
  }
  co_await tls.async_handshake(asio::ssl::stream_base::client, asio::redirect_error(asio::use_awaitable, ec));
  if (ec && state.config.verify_peer) {
    const long result = SSL_get_verify_result(tls.native_handle());
    if (result != X509_V_OK) ec = error_code(static_cast<int>(result), tls_verify_category());
  }
  co_return ec;
}

/// Sends the request once and receives the answer, within request_timeout: over the
/// beast::tcp_stream (Tls false), or over a TLS session on it.
template <bool Tls>
asio::awaitable<attempt_result> attempt(const op_context& op, const request_spec& spec, const std::string& target,
                                        const address& where) {
  attempt_result r;
  client_state& state = *op.state;
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  const auto deadline = steady::now() + spec.timeout.value_or(state.config.request_timeout);

  connection_pool::lease conn = co_await state.pool.acquire(op, where.pool_key, deadline, r.ec);
  if (r.ec) {
    r.fatal = true;
    co_return r;
  }
  r.reused = conn.reused();
  beast::tcp_stream& wire = conn.stream();
  tcp::resolver resolver(executor);
  cancel_scope scope(op, executor, [&wire, &resolver] {
    wire.close();
    resolver.cancel();
  });
  if (op.aborted()) {
    r.ec = asio::error::operation_aborted;
    r.fatal = true;
    co_return r;
  }
  wire.expires_at(deadline);  // the TLS handshake and every TLS read and write included
  if (!r.reused) {
    const auto endpoints = co_await resolver.async_resolve(where.connect_host, state.where.port,
                                                           asio::redirect_error(asio::use_awaitable, r.ec));
    if (r.ec) {
      r.fatal = !is_connection_error(r.ec);
      co_return r;
    }
    co_await wire.async_connect(endpoints, asio::redirect_error(asio::use_awaitable, r.ec));
    if (r.ec) co_return r;
    state.connections_opened.fetch_add(1);
    error_code ignored;
    wire.socket().set_option(tcp::no_delay(true), ignored);
    if constexpr (Tls) {
      r.ec = co_await start_tls(state, conn, where.connect_host);
      if (r.ec) {
        r.fatal = !is_connection_error(r.ec);  // a refused certificate is not retried
        co_return r;
      }
    }
  }
  auto& stream = [&]() -> auto& {
    if constexpr (Tls) {
      return *conn.tls();
    } else {
      return wire;
    }
  }
  ();

  // The request, signed.
  http::request<http::buffer_body> req{spec.method, target, 11};
  std::vector<std::pair<std::string, std::string>> headers;
  headers.emplace_back("host", where.host_header);
  for (const auto& h : spec.headers) headers.push_back(h);
  if (spec.has_body) headers.emplace_back("content-length", std::to_string(spec.body.size()));
  if (!state.config.creds.access_key_id.empty()) {
    std::string payload_hash = spec.payload_hash;
    if (payload_hash.empty()) payload_hash = spec.body.empty() ? empty_payload_sha256 : unsigned_payload;
    const auto method = http::to_string(spec.method);
    sign(std::string_view(method.data(), method.size()), target, headers, payload_hash, state.config.creds,
         state.config.region, std::chrono::system_clock::now());
  }
  for (const auto& [name, value] : headers) req.set(name, value);
  req.set(http::field::user_agent, "sluice");

  state.requests.fetch_add(1);
  http::request_serializer<http::buffer_body> serializer(req);
  const std::size_t total = spec.body.size();
  std::size_t sent = 0;
  error_code write_ec;
  do {
    const std::size_t n = std::min(io_slice, total - sent);
    req.body().data = n > 0 ? const_cast<std::byte*>(spec.body.data() + sent) : nullptr;
    req.body().size = n;
    req.body().more = sent + n < total;
    co_await http::async_write(stream, serializer, asio::redirect_error(asio::use_awaitable, write_ec));
    if (write_ec == http::error::need_buffer) write_ec = {};
    if (write_ec) break;
    sent += n;
    if (spec.progress != nullptr && n > 0) {
      spec.progress->add(n);
      r.progressed += n;
    }
  } while (!serializer.is_done());
  if (write_ec == beast::error::timeout || write_ec == asio::error::operation_aborted) {
    r.ec = write_ec;
    co_return r;
  }

  // The answer; after a failed write too, since a server may answer (a 403, say) and close
  // before reading the whole body.
  beast::flat_buffer buffer;
  buffer.reserve(16 * kib);  // Beast reads at most the free capacity (at least 512 bytes) at a time
  std::optional<http::response_parser<http::buffer_body>> parser;
  for (int interim = 0;; ++interim) {
    parser.emplace();
    parser->body_limit(std::numeric_limits<std::uint64_t>::max());  // not boost::none: Beast 1.74 compares it wrongly
    parser->header_limit(64 * 1024);
    if (spec.method == http::verb::head) parser->skip(true);
    error_code read_ec;
    co_await http::async_read_header(stream, buffer, *parser, asio::redirect_error(asio::use_awaitable, read_ec));
    if (read_ec) {
      r.answered = parser->got_some();
      r.ec = write_ec ? write_ec : read_ec;
      co_return r;
    }
    if (parser->get().result_int() >= 200 || interim >= 8) break;  // skip 100 Continue and friends
  }
  r.answered = true;
  r.res.status = parser->get().result_int();
  r.res.header = parser->get().base();
  bool reusable = !write_ec;
  bool complete = parser->is_done();

  if (r.res.status < 300 && spec.choose && parser->is_done()) {
    // No body (an RDMA answer, or an empty object): the chooser still checks the header.
    std::span<std::byte> into;
    bool longer_ok = false;
    r.ec = spec.choose(r.res, into, longer_ok);
    if (!r.ec && !into.empty()) r.ec = sluice::errc::protocol_violation;  // bytes promised, none sent
    if (r.ec) {
      r.fatal = true;
      co_return r;
    }
  } else if (!parser->is_done()) {
    if (r.res.status >= 300 || !spec.choose) {
      co_await read_text(stream, buffer, *parser, r.res.body, r.res.status >= 300 ? max_error_body : max_text_body,
                         r.ec);
      if (r.ec) co_return r;
      complete = parser->is_done();  // when not, too long: the rest goes with the connection
    } else {
      std::span<std::byte> into;
      bool longer_ok = false;
      const error_code verdict = spec.choose(r.res, into, longer_ok);
      if (verdict) {
        r.ec = verdict;
        r.fatal = true;
        co_return r;
      }
      const auto announced = parser->content_length();
      if (announced && !parser->chunked()) {
        // The common case: a known length, read from the socket straight into the target.
        if (*announced < into.size() || (*announced > into.size() && !longer_ok)) {
          r.ec = sluice::errc::protocol_violation;  // not the length the header promised
          r.fatal = true;
          co_return r;
        }
        r.res.body_bytes = co_await read_direct(stream, buffer, into, spec.progress, r.progressed, r.ec);
        if (r.ec) co_return r;
        complete = *announced == into.size();
        reusable = reusable && complete;
      } else {
        const std::size_t filled = co_await read_into(stream, buffer, *parser, into, spec.progress, r.progressed, r.ec);
        r.res.body_bytes = filled;
        if (r.ec) co_return r;
        if (!parser->is_done()) {
          if (!longer_ok) {
            r.ec = sluice::errc::protocol_violation;  // a body longer than its header announced
            r.fatal = true;
            co_return r;
          }
          reusable = false;
        } else if (filled != into.size()) {
          r.ec = sluice::errc::protocol_violation;  // shorter than announced
          r.fatal = true;
          co_return r;
        }
        complete = parser->is_done();
      }
    }
  }
  bool drained = buffer.size() == 0;
  if constexpr (Tls) drained = drained && nothing_buffered(stream);
  if (reusable && complete && parser->get().keep_alive() && drained) conn.give_back(true);
  co_return r;
}

/// Waits the n-th backoff delay (n from 1), unless cancel() comes first.
asio::awaitable<void> backoff(const op_context& op, std::uint32_t n, error_code& ec) {
  client_state& state = *op.state;
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  using ms = std::chrono::milliseconds;
  const ms cap = std::chrono::duration_cast<ms>(max_backoff);
  ms delay = state.config.retry_base_delay;
  for (std::uint32_t i = 1; i < n && delay < cap; ++i) delay *= 2;
  delay = std::min(delay, cap);
  {
    std::lock_guard lock(state.random_mutex);
    std::uniform_int_distribution<ms::rep> pick(delay.count() / 2, delay.count());
    delay = ms(pick(state.random));
  }
  asio::steady_timer timer(executor, delay);
  cancel_scope scope(op, executor, [&timer] { timer.cancel(); });
  if (op.aborted()) {
    ec = asio::error::operation_aborted;
    co_return;
  }
  error_code ignored;
  co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  if (op.aborted()) ec = asio::error::operation_aborted;
}

/// Sends `spec` with the retry policy. `ec` is set when no answer could be had (or the body
/// plan refused it); an answer of any status is returned otherwise, the last one after retries.
asio::awaitable<response> execute(const op_context& op, const request_spec& spec, error_code& ec) {
  ec = {};
  client_state& state = *op.state;
  const address where = address_for(state, spec.bucket);
  const std::string target = target_for(state.config, spec);
  std::uint32_t retries = 0;
  bool fresh_retry_used = false;
  for (std::uint32_t attempt_number = 1;; ++attempt_number) {
    if (op.aborted()) {
      ec = asio::error::operation_aborted;
      co_return response{};
    }
    attempt_result r;  // (not co_await in a conditional expression: GCC 12 destroys its result twice)
    if (state.where.tls) {
      r = co_await attempt<true>(op, spec, target, where);
    } else {
      r = co_await attempt<false>(op, spec, target, where);
    }
    r.res.attempts = attempt_number;
    if (r.ec && op.aborted()) r.ec = asio::error::operation_aborted;
    if (r.ec == beast::error::timeout) r.ec = asio::error::timed_out;
    bool retry = false;
    bool immediate = false;
    if (!r.ec) {
      if (!retryable_answer(r.res)) co_return std::move(r.res);
      retry = spec.retry != retry_mode::rejected_only || r.res.status == 503;
    } else if (!r.fatal && is_connection_error(r.ec)) {
      if (r.reused && !r.answered && !fresh_retry_used) {
        retry = true;  // a pooled connection the server had closed: once more on a fresh one
        immediate = true;
        fresh_retry_used = true;
      } else {
        retry = spec.retry != retry_mode::rejected_only;
      }
    }
    if (!retry || (!immediate && retries >= state.config.max_retries)) {
      ec = r.ec;
      co_return std::move(r.res);
    }
    if (spec.progress != nullptr) spec.progress->take_back(r.progressed);
    state.retries.fetch_add(1);
    if (!immediate) {
      ++retries;
      co_await backoff(op, retries, ec);
      if (ec) co_return response{};
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Operations

/// What a top-level coroutine hands to its completion: an error, or a value.
template <class T>
struct outcome {
  error_code ec;
  T value{};
};
struct nothing {};

error_code error_from(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const boost::system::system_error& e) {
    return e.code();
  } catch (const std::bad_alloc&) {
    return make_error_code(boost::system::errc::not_enough_memory);
  } catch (const std::invalid_argument&) {
    return sluice::errc::invalid_argument;  // from sign(): a header name that is not a token
  } catch (...) {
    return errc::internal_error;
  }
}

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
asio::awaitable<void> run_workers(std::size_t count, const std::function<asio::awaitable<void>()>& make) {
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  asio::steady_timer signal(executor, asio::steady_timer::time_point::max());
  std::size_t remaining = count;
  std::exception_ptr first_failure;
  for (std::size_t i = 0; i < count; ++i) {
    asio::co_spawn(executor, make(), [&](std::exception_ptr failure) {
      if (failure && !first_failure) first_failure = failure;
      --remaining;
      signal.cancel();
    });
  }
  while (remaining > 0) {
    error_code ignored;
    co_await signal.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }
  if (first_failure) std::rethrow_exception(first_failure);
}

/// The headers that publish `attributes` with an object (PUT, CreateMultipartUpload).
void add_attribute_headers(std::vector<std::pair<std::string, std::string>>& headers,
                           const object_attributes& attributes, error_code& ec) {
  auto add = [&](std::string name, const std::string& value) {
    if (value.find_first_of("\r\n") != std::string::npos) ec = sluice::errc::invalid_argument;
    headers.emplace_back(std::move(name), value);
  };
  if (!attributes.content_type.empty()) add("content-type", attributes.content_type);
  if (!attributes.content_encoding.empty()) add("content-encoding", attributes.content_encoding);
  if (!attributes.content_disposition.empty()) add("content-disposition", attributes.content_disposition);
  if (!attributes.cache_control.empty()) add("cache-control", attributes.cache_control);
  if (!attributes.content_language.empty()) add("content-language", attributes.content_language);
  if (!attributes.expires.empty()) add("expires", attributes.expires);
  for (const auto& [name, value] : attributes.metadata) add("x-amz-meta-" + lower(name), value);
  if (!attributes.tags.empty()) {  // x-amz-tagging: the tags as URL query parameters
    std::string tagging;
    for (const auto& [key, value] : attributes.tags) {
      if (!tagging.empty()) tagging += '&';
      tagging += uri_encode(key, true) + "=" + uri_encode(value, true);
    }
    add("x-amz-tagging", tagging);
  }
}

/// The object_info a HEAD (or GET) answer describes.
object_info info_from(const response& res, const std::string& key) {
  object_info info;
  info.key = key;
  const std::string_view length = res.field("Content-Length");
  (void)std::from_chars(length.data(), length.data() + length.size(), info.size);
  if (auto time = xml::parse_http_date(res.field("Last-Modified"))) info.last_modified = *time;
  info.attributes.etag = unquote(res.field("ETag"));
  info.attributes.content_type = std::string(res.field("Content-Type"));
  info.attributes.content_encoding = std::string(res.field("Content-Encoding"));
  info.attributes.content_disposition = std::string(res.field("Content-Disposition"));
  info.attributes.cache_control = std::string(res.field("Cache-Control"));
  info.attributes.content_language = std::string(res.field("Content-Language"));
  info.attributes.expires = std::string(res.field("Expires"));
  for (const auto& field : res.header) {
    const std::string name = lower(std::string_view(field.name_string().data(), field.name_string().size()));
    const std::string value(field.value().data(), field.value().size());
    if (name.starts_with("x-amz-meta-")) {
      info.attributes.metadata[name.substr(11)] = value;
    } else if (name.starts_with("x-amz-checksum-") && name != "x-amz-checksum-type") {
      info.attributes.checksums[name.substr(15)] = value;
    }
  }
  return info;
}

/// HEAD of one object.
asio::awaitable<object_info> head_request(const op_context& op, const std::string& bucket, const std::string& key,
                                          error_code& ec) {
  request_spec spec;
  spec.method = http::verb::head;
  spec.bucket = bucket;
  spec.key = key;
  const response res = co_await execute(op, spec, ec);
  if (ec) co_return object_info{};
  if (res.status >= 300) {
    ec = error_of(res, false);
    co_return object_info{};
  }
  co_return info_from(res, key);
}

asio::awaitable<outcome<object_info>> head_object_op(op_context op, std::string bucket, std::string key) {
  outcome<object_info> out;
  out.value = co_await head_request(op, bucket, key, out.ec);
  co_return out;
}

// -- GET --------------------------------------------------------------------------------------

/// Shared by the workers of one parallel download (all on the operation's strand).
// -- RDMA (x-amz-rdma-token) -------------------------------------------------------------------

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
bool moved_by_rdma(const response& res) {
  const std::string_view reply = res.field("x-amz-rdma-reply");
  return reply == "200" || reply == "204" || reply == "206";
}

/// A grant for one request's memory, or null when the request goes over HTTP: `via` is http,
/// the client has no plane, or (automatic) the memory cannot be registered. The grant outlives
/// every retry of the request.
std::unique_ptr<rdma_client_plane::grant> grant_for(const client_config& config, transfer_via via, const region& memory,
                                                    rdma_op op, error_code& ec) {
  ec = {};
  if (via == transfer_via::http || memory.size == 0) return nullptr;
  // A token is only used when signed: an anonymous client has no way to sign one.
  if (!config.rdma || config.creds.access_key_id.empty()) {
    if (via == transfer_via::rdma) ec = s3::errc::rdma_not_supported;
    return nullptr;
  }
  const auto expires = std::chrono::system_clock::now() + config.request_timeout * (config.max_retries + 1) +
                       config.retry_base_delay * (1u << std::min(config.max_retries, 8u)) + std::chrono::minutes(1);
  auto grant = config.rdma->grant_access(memory, op, expires, ec);
  if (ec && via == transfer_via::automatic) {
    ec = {};
    return nullptr;
  }
  return grant;
}

/// The bytes an RDMA answer says it moved; nullopt when the header is missing or malformed.
std::optional<std::uint64_t> rdma_bytes_of(const response& res) {
  const std::string_view text = res.field("x-amz-rdma-bytes-transferred");
  std::uint64_t n = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return n;
}

struct download {
  std::string bucket;
  std::string key;
  region destination;
  std::uint64_t offset = 0;  // of destination's first byte in the object
  std::uint64_t total = 0;   // the object's size
  std::string etag;          // of the first answer: every part must come from the same object
  std::uint64_t begin = 0;   // first byte (relative to offset) the parts cover
  std::uint64_t end = 0;     // one past the last
  std::uint64_t part_size = 0;
  std::uint64_t next = 0;  // next part to fetch
  std::uint64_t parts = 0;
  error_code failure;
  transfer_progress* progress = nullptr;
  transfer_via via = transfer_via::automatic;
  path_counter* paths = nullptr;
};

asio::awaitable<void> download_parts(const op_context& op, download& job) {
  while (!job.failure && job.next < job.parts) {
    const std::uint64_t index = job.next++;
    const std::uint64_t first = job.begin + index * job.part_size;
    const std::uint64_t length = std::min(job.part_size, job.end - first);
    request_spec spec;
    spec.bucket = job.bucket;
    spec.key = job.key;
    spec.headers.emplace_back(
        "range", "bytes=" + std::to_string(job.offset + first) + "-" + std::to_string(job.offset + first + length - 1));
    if (!job.etag.empty()) spec.headers.emplace_back("if-match", "\"" + job.etag + "\"");
    spec.progress = job.progress;
    error_code ec;
    const region part{job.destination.bytes() + first, static_cast<std::size_t>(length), job.destination.kind,
                      job.destination.device};
    const auto grant = grant_for(op.config(), job.via, part, rdma_op::write, ec);
    if (ec) {
      if (!job.failure) job.failure = ec;
      co_return;
    }
    if (grant) spec.headers.emplace_back("x-amz-rdma-token", grant->token());
    bool by_rdma = false;
    spec.choose = [&job, &grant, &by_rdma, first, length](const response& res, std::span<std::byte>& target,
                                                          bool&) -> error_code {
      const auto range = parse_content_range(res.field("Content-Range"));
      if (res.status != 206 || !range || range->first != job.offset + first ||
          range->last != job.offset + first + length - 1 || range->total != job.total) {
        return sluice::errc::protocol_violation;
      }
      by_rdma = grant && moved_by_rdma(res);
      if (by_rdma) {
        if (rdma_bytes_of(res) != length) return sluice::errc::protocol_violation;
        target = {};  // the bytes are already in place
        return {};
      }
      if (grant) {
        ++job.paths->declined;
        if (job.via == transfer_via::rdma) return s3::errc::rdma_not_supported;
      }
      target = std::span<std::byte>(job.destination.bytes() + first, static_cast<std::size_t>(length));
      return {};
    };
    const response res = co_await execute(op, spec, ec);
    if (!ec && res.status >= 300) ec = error_of(res, false);
    if (ec) {
      if (!job.failure) job.failure = ec;
      co_return;
    }
    if (by_rdma) {
      job.paths->rdma(*op.state, length);
      job.progress->add(length);
    } else {
      job.paths->http(*op.state, length);
    }
  }
}

/// The size of an object known from a HEAD, for answers that do not say it; then what a read
/// from `offset` (of `want` bytes, if given) gets: 0 bytes, or bad_range.
asio::awaitable<std::uint64_t> empty_or_bad_range(const op_context& op, const std::string& bucket,
                                                  const std::string& key, std::uint64_t offset,
                                                  std::optional<std::uint64_t> known_total,
                                                  std::optional<std::uint64_t> want, error_code& ec) {
  std::uint64_t total = 0;
  if (known_total) {
    total = *known_total;
  } else {
    const object_info info = co_await head_request(op, bucket, key, ec);
    if (ec) co_return 0;
    total = info.size;
  }
  // Only a read of nothing at the very end succeeds here (the caller asked for bytes otherwise).
  if (offset == total && (!want || *want == 0)) co_return 0;
  ec = sluice::errc::bad_range;
  co_return 0;
}

asio::awaitable<outcome<std::uint64_t>> get_object_op(op_context op, std::string bucket, std::string key,
                                                      region destination, get_options options) {
  outcome<std::uint64_t> out;
  const client_config& config = op.config();
  if (!destination.host_accessible()) {
    // Device memory cannot take an HTTP body: every part goes by RDMA (a plane that can
    // register it, FI_HMEM), and a decline is an error. cuda::get_object_to_device stages instead.
    if (options.via == transfer_via::http) {
      out.ec = sluice::errc::unsupported_memory;
      co_return out;
    }
    options.via = transfer_via::rdma;
  }
  if (destination.data == nullptr && destination.size > 0) {
    out.ec = sluice::errc::invalid_argument;
    co_return out;
  }
  const std::uint64_t offset = options.range.offset;
  const std::optional<std::uint64_t> want = options.range.length;
  if (want && *want > destination.size) {
    out.ec = sluice::errc::region_too_small;
    co_return out;
  }
  transfer_progress progress{options.progress, want.value_or(0), 0};
  if (want && *want == 0) {  // nothing to read: only check that the range lies inside the object
    const object_info info = co_await head_request(op, bucket, key, out.ec);
    if (!out.ec && offset > info.size) out.ec = sluice::errc::bad_range;
    co_return out;
  }

  // The first request asks for the whole transfer when it is small (or of unknown size, up to
  // the threshold), else for one part; its answer tells the object's size and ETag.
  std::uint64_t first_length =
      want ? (*want <= config.multipart_threshold ? *want : config.part_size) : config.multipart_threshold;
  std::uint64_t part_size = config.part_size;
  // With RDMA the first request asks for no more than the destination holds: its token grants
  // exactly that much memory. A plane that asks for whole transfers (a same-host device grant)
  // gets the whole destination, or the whole range, in one request.
  path_counter paths;
  std::unique_ptr<rdma_client_plane::grant> grant;
  if (options.via != transfer_via::http && destination.size > 0) {
    if (const std::uint64_t whole = config.rdma ? config.rdma->request_bytes(destination) : 0; whole != 0) {
      first_length = std::min(want.value_or(destination.size), whole);
      part_size = std::max(part_size, whole);
    }
    first_length = std::min<std::uint64_t>(first_length, destination.size);
    const region first{destination.data, static_cast<std::size_t>(first_length), destination.kind, destination.device};
    grant = grant_for(config, options.via, first, rdma_op::write, out.ec);
    if (out.ec) co_return out;
  } else if (options.via == transfer_via::rdma && !config.rdma) {
    out.ec = s3::errc::rdma_not_supported;
    co_return out;
  }
  bool first_by_rdma = false;
  download job;
  job.via = options.via;
  job.paths = &paths;
  job.bucket = bucket;
  job.key = key;
  job.destination = destination;
  job.offset = offset;
  job.part_size = part_size;
  job.progress = &progress;
  std::uint64_t need = 0;
  std::uint64_t first_bytes = 0;
  bool empty_object = false;
  request_spec spec;
  spec.bucket = bucket;
  spec.key = key;
  spec.headers.emplace_back("range",
                            "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + first_length - 1));
  if (!options.if_match.empty()) spec.headers.emplace_back("if-match", "\"" + options.if_match + "\"");
  if (grant) spec.headers.emplace_back("x-amz-rdma-token", grant->token());
  spec.progress = &progress;
  spec.choose = [&](const response& res, std::span<std::byte>& target, bool& longer_ok) -> error_code {
    job.etag = unquote(res.field("ETag"));
    first_by_rdma = grant && moved_by_rdma(res);
    if (grant && !first_by_rdma) {
      ++paths.declined;
      if (options.via == transfer_via::rdma) return s3::errc::rdma_not_supported;
    }
    std::uint64_t length = 0;
    if (res.status == 206) {
      const auto range = parse_content_range(res.field("Content-Range"));
      if (range && range->total == 0) {
        empty_object = true;  // some servers answer a range of an empty object with "0-0/0"
        return sluice::errc::protocol_violation;
      }
      if (!range || !range->first || !range->total || *range->first != offset || *range->last < *range->first ||
          *range->last >= *range->total) {
        return sluice::errc::protocol_violation;
      }
      job.total = *range->total;
      length = *range->last - *range->first + 1;
    } else if (first_by_rdma) {
      // 200 over RDMA: the whole object went into the destination.
      const auto moved = rdma_bytes_of(res);
      if (offset != 0 || !moved) return sluice::errc::protocol_violation;
      job.total = *moved;
      length = job.total;
    } else {
      // 200: the server ignored the Range and sends the whole object.
      const std::string_view text = res.field("Content-Length");
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), job.total);
      if (offset != 0 || text.empty() || error != std::errc{} || end != text.data() + text.size()) {
        return sluice::errc::protocol_violation;
      }
      length = job.total;
      longer_ok = true;
    }
    if (offset > job.total || (want && *want > job.total - offset)) return sluice::errc::bad_range;
    need = want ? *want : job.total - offset;
    if (need > destination.size) return sluice::errc::region_too_small;
    if (first_by_rdma && rdma_bytes_of(res) != length) return sluice::errc::protocol_violation;
    length = std::min(length, need);
    progress.total = need;
    first_bytes = length;
    if (first_by_rdma) {
      target = {};  // the bytes are already in place
    } else {
      target = std::span<std::byte>(destination.bytes(), static_cast<std::size_t>(length));
    }
    return {};
  };
  const response res = co_await execute(op, spec, out.ec);
  if (out.ec == sluice::errc::protocol_violation && empty_object) {
    out.ec = {};
    out.value = co_await empty_or_bad_range(op, bucket, key, offset, std::nullopt, want, out.ec);
    co_return out;
  }
  if (out.ec) co_return out;
  if (res.status == 416) {
    const auto range = parse_content_range(res.field("Content-Range"));
    const auto total = range ? range->total : std::nullopt;
    out.value = co_await empty_or_bad_range(op, bucket, key, offset, total, want, out.ec);
    co_return out;
  }
  if (res.status >= 300) {
    out.ec = error_of(res, false);
    co_return out;
  }
  if (first_by_rdma) {
    paths.rdma(*op.state, first_bytes);
    progress.add(first_bytes);
  } else {
    paths.http(*op.state, first_bytes);
  }
  grant.reset();
  if (first_bytes < need) {
    // The rest as ranged GETs of part_size, parts_in_flight at once.
    job.begin = first_bytes;
    job.end = need;
    const std::uint64_t rest = need - first_bytes;
    job.parts = rest / job.part_size + (rest % job.part_size != 0 ? 1 : 0);  // part_size may be near 2^64
    const std::size_t workers = static_cast<std::size_t>(std::min<std::uint64_t>(config.parts_in_flight, job.parts));
    const std::function<asio::awaitable<void>()> worker = [&] { return download_parts(op, job); };
    co_await run_workers(workers, worker);
    if (job.failure) {
      out.ec = job.failure;
      co_return out;
    }
  }
  paths.report_to(options.report);
  out.value = need;
  co_return out;
}

// -- PUT --------------------------------------------------------------------------------------

using byte_source = upload_source;

class region_source final : public byte_source {
 public:
  explicit region_source(region source) : source_(source) {}
  [[nodiscard]] std::uint64_t size() const noexcept override { return source_.size; }
  std::span<const std::byte> read(std::uint64_t offset, std::size_t length, std::vector<std::byte>&,
                                  error_code& ec) override {
    ec = {};
    return {source_.bytes() + offset, length};
  }

 private:
  region source_;
};

/// A regular file, read with pread() a part at a time. Owns the descriptor.
class file_source final : public byte_source {
 public:
  static std::shared_ptr<file_source> open(const std::filesystem::path& path, error_code& ec) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      ec = error_code(errno, boost::system::system_category());
      return nullptr;
    }
    auto source = std::shared_ptr<file_source>(new file_source(fd));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ec = error_code(errno, boost::system::system_category());
      return nullptr;
    }
    if (!S_ISREG(st.st_mode)) {
      ec = sluice::errc::invalid_argument;
      return nullptr;
    }
    source->size_ = static_cast<std::uint64_t>(st.st_size);
    return source;
  }
  ~file_source() override { ::close(fd_); }
  [[nodiscard]] int native_handle() const noexcept { return fd_; }
  [[nodiscard]] std::uint64_t size() const noexcept override { return size_; }
  std::span<const std::byte> read(std::uint64_t offset, std::size_t length, std::vector<std::byte>& scratch,
                                  error_code& ec) override {
    ec = {};
    scratch.resize(length);
    std::size_t done = 0;
    while (done < length) {
      const ssize_t n = ::pread(fd_, scratch.data() + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        ec = error_code(errno, boost::system::system_category());
        return {};
      }
      if (n == 0) {  // the file shrank under us
        ec = make_error_code(boost::system::errc::io_error);
        return {};
      }
      done += static_cast<std::size_t>(n);
    }
    return {scratch.data(), length};
  }

 private:
  explicit file_source(int fd) : fd_(fd) {}
  int fd_;
  std::uint64_t size_ = 0;
};

std::array<std::byte, 16> md5_of(std::span<const std::byte> data) {
  digest d(digest_kind::md5);
  d.update(data);
  const std::vector<std::byte> bytes = d.finish();
  std::array<std::byte, 16> out{};
  std::copy_n(bytes.begin(), std::min<std::size_t>(bytes.size(), out.size()), out.begin());
  return out;
}

/// Shared by the workers of one multipart upload (all on the operation's strand).
struct upload {
  std::string bucket;
  std::string key;
  std::string upload_id;
  std::shared_ptr<byte_source> source;
  std::uint64_t part_size = 0;
  std::uint64_t parts = 0;
  std::uint64_t next = 0;
  std::vector<xml::completed_part> done;
  std::vector<std::array<std::byte, 16>> md5s;
  error_code failure;
  transfer_progress* progress = nullptr;
  transfer_via via = transfer_via::automatic;
  path_counter* paths = nullptr;
};

/// Sends a PUT (object or part) whose payload is `spec.body`: by RDMA when `via` allows and
/// the client has a plane (no body; token, size and checksums in headers), else, or after the
/// server declined (automatic), with the body. The answer of the request that carried the bytes.
asio::awaitable<response> put_payload(const op_context& op, request_spec spec, transfer_via via, path_counter& paths,
                                      error_code& ec) {
  const std::span<const std::byte> data = spec.body;
  const region memory{const_cast<std::byte*>(data.data()), data.size(), memory_kind::host_pageable, -1};
  const auto grant = grant_for(op.config(), via, memory, rdma_op::read, ec);
  if (ec) co_return response{};
  if (grant) {
    request_spec by_rdma = spec;
    by_rdma.body = {};
    by_rdma.has_body = true;  // Content-Length: 0
    by_rdma.payload_hash = std::string(unsigned_payload);
    by_rdma.progress = nullptr;
    digest crc(digest_kind_of(checksum_algorithm::crc32c));
    crc.update(data);
    by_rdma.headers.emplace_back("x-amz-rdma-token", grant->token());
    by_rdma.headers.emplace_back("x-amz-decoded-content-length", std::to_string(data.size()));
    by_rdma.headers.emplace_back("x-amz-checksum-crc32c", base64_encode(crc.finish()));
    response res = co_await execute(op, by_rdma, ec);
    if (ec) co_return res;
    const std::string_view reply = res.field("x-amz-rdma-reply");
    if (res.status < 300 && moved_by_rdma(res)) {
      paths.rdma(*op.state, data.size());
      if (spec.progress != nullptr) spec.progress->add(data.size());
      co_return res;
    }
    // A decline is x-amz-rdma-reply: 501, or an answer without the header from a server that
    // does not know the protocol: one that rejected the empty body (its checksums fail), or one
    // that checks nothing and stored 0 bytes (a 2xx without x-amz-rdma-reply), which the PUT
    // with a body that follows replaces. A body would not change a refusal of the caller (403)
    // or of the bucket or upload (404).
    const bool declined = reply == "501" || (reply.empty() && res.status != 403 && res.status != 404);
    if (!declined) co_return res;
    ++paths.declined;
    if (via == transfer_via::rdma) {
      if (res.status < 300) {  // it stored 0 bytes: put the real ones back before failing
        error_code repair;
        static_cast<void>(co_await execute(op, spec, repair));
      }
      ec = s3::errc::rdma_not_supported;
      co_return res;
    }
  }
  response res = co_await execute(op, spec, ec);
  if (!ec && res.status < 300) paths.http(*op.state, data.size());
  co_return res;
}

asio::awaitable<void> upload_parts(const op_context& op, upload& job) {
  std::vector<std::byte> scratch;
  while (!job.failure && job.next < job.parts) {
    const std::uint64_t index = job.next++;
    const std::uint64_t offset = index * job.part_size;
    const auto length = static_cast<std::size_t>(std::min(job.part_size, job.source->size() - offset));
    error_code ec;
    const std::span<const std::byte> data = job.source->read(offset, length, scratch, ec);
    if (ec) {
      if (!job.failure) job.failure = ec;
      co_return;
    }
    const auto md5 = md5_of(data);
    request_spec spec;
    spec.method = http::verb::put;
    spec.bucket = job.bucket;
    spec.key = job.key;
    spec.query = {{"partNumber", std::to_string(index + 1)}, {"uploadId", job.upload_id}};
    spec.headers.emplace_back("content-md5", base64_encode(md5));
    spec.body = data;
    spec.has_body = true;
    spec.payload_hash = std::string(unsigned_payload);
    spec.progress = job.progress;
    const response res = co_await put_payload(op, std::move(spec), job.via, *job.paths, ec);
    if (!ec && res.status >= 300) ec = error_of(res, false);
    if (ec) {
      if (!job.failure) job.failure = ec;
      co_return;
    }
    std::string etag = unquote(res.field("ETag"));
    if (etag.empty()) etag = to_hex(md5);
    job.done[index] = xml::completed_part{static_cast<std::uint32_t>(index + 1), std::move(etag), {}};
    job.md5s[index] = md5;
  }
}

/// Best effort: AbortMultipartUpload, so that a failed upload leaves nothing. Runs in a fresh
/// cancel() generation (the failure may be a cancel()), with a short deadline.
asio::awaitable<void> abort_upload(const op_context& op, const upload& job) {
  const op_context fresh = make_op(op.state);
  request_spec spec;
  spec.method = http::verb::delete_;
  spec.bucket = job.bucket;
  spec.key = job.key;
  spec.query = {{"uploadId", job.upload_id}};
  // While the client is being destroyed, its destructor waits for this: keep it short.
  spec.timeout = op.state->closing ? std::chrono::seconds(2) : std::min(op.config().request_timeout, abort_timeout);
  error_code ignored;
  (void)co_await execute(fresh, spec, ignored);
}

/// If-None-Match: * and If-Match of a conditional write (put_options::precondition).
void add_precondition_headers(std::vector<std::pair<std::string, std::string>>& headers,
                              const write_precondition& precondition) {
  if (precondition.if_absent) headers.emplace_back("if-none-match", "*");
  if (precondition.if_etag) headers.emplace_back("if-match", "\"" + *precondition.if_etag + "\"");
}

asio::awaitable<outcome<std::string>> single_put(const op_context& op, const std::string& bucket,
                                                 const std::string& key, byte_source& source,
                                                 const put_options& options, transfer_progress& progress,
                                                 path_counter& paths) {
  outcome<std::string> out;
  std::vector<std::byte> scratch;
  const std::span<const std::byte> data = source.read(0, static_cast<std::size_t>(source.size()), scratch, out.ec);
  if (out.ec) co_return out;
  request_spec spec;
  spec.method = http::verb::put;
  spec.bucket = bucket;
  spec.key = key;
  add_attribute_headers(spec.headers, options.attributes, out.ec);
  if (out.ec) co_return out;
  spec.headers.emplace_back("content-md5", base64_encode(md5_of(data)));
  add_precondition_headers(spec.headers, options.precondition);
  spec.body = data;
  spec.has_body = true;
  spec.payload_hash = std::string(unsigned_payload);
  spec.progress = &progress;
  const response res = co_await put_payload(op, std::move(spec), options.via, paths, out.ec);
  if (out.ec) co_return out;
  if (res.status >= 300) {
    out.ec = error_of(res, false);
    co_return out;
  }
  out.value = unquote(res.field("ETag"));
  co_return out;
}

asio::awaitable<outcome<std::string>> multipart_put(const op_context& op, const std::string& bucket,
                                                    const std::string& key, std::shared_ptr<byte_source> source,
                                                    const put_options& options, transfer_progress& progress,
                                                    path_counter& paths) {
  outcome<std::string> out;
  const client_config& config = op.config();
  constexpr std::uint64_t max_parts = 10000;
  upload job;
  job.bucket = bucket;
  job.key = key;
  job.source = std::move(source);
  job.part_size = std::max(config.part_size, (job.source->size() + max_parts - 1) / max_parts);
  job.parts = (job.source->size() + job.part_size - 1) / job.part_size;
  job.done.resize(static_cast<std::size_t>(job.parts));
  job.md5s.resize(static_cast<std::size_t>(job.parts));
  job.progress = &progress;
  job.via = options.via;
  job.paths = &paths;

  {  // CreateMultipartUpload
    request_spec spec;
    spec.method = http::verb::post;
    spec.bucket = bucket;
    spec.key = key;
    spec.query = {{"uploads", ""}};
    spec.has_body = true;
    spec.retry = retry_mode::rejected_only;
    add_attribute_headers(spec.headers, options.attributes, out.ec);
    if (out.ec) co_return out;
    const response res = co_await execute(op, spec, out.ec);
    if (out.ec) co_return out;
    if (res.status >= 300) {
      out.ec = error_of(res, false);
      co_return out;
    }
    job.upload_id = xml::parse_initiate_multipart_upload(res.body, out.ec).upload_id;
    if (out.ec) co_return out;
  }

  const std::size_t workers = static_cast<std::size_t>(std::min<std::uint64_t>(config.parts_in_flight, job.parts));
  const std::function<asio::awaitable<void>()> worker = [&] { return upload_parts(op, job); };
  co_await run_workers(workers, worker);
  if (job.failure) {
    out.ec = job.failure;
    co_await abort_upload(op, job);
    co_return out;
  }

  // CompleteMultipartUpload, and the ETag it must produce (MD5 of the parts' MD5s, "-N").
  digest etags(digest_kind::md5);
  for (const auto& md5 : job.md5s) etags.update(std::span<const std::byte>(md5));
  const std::string expected = to_hex(etags.finish()) + "-" + std::to_string(job.parts);
  const std::string body = xml::complete_multipart_upload_request(job.done);
  request_spec spec;
  spec.method = http::verb::post;
  spec.bucket = bucket;
  spec.key = key;
  spec.query = {{"uploadId", job.upload_id}};
  spec.headers.emplace_back("content-type", "application/xml");
  add_precondition_headers(spec.headers, options.precondition);
  spec.body = std::as_bytes(std::span(body));
  spec.has_body = true;
  spec.payload_hash = sha256_hex(body);
  spec.retry = retry_mode::complete_upload;
  const response res = co_await execute(op, spec, out.ec);
  if (!out.ec && res.status >= 300) {
    out.ec = error_of(res, false);
    if (out.ec == errc::no_such_upload && res.attempts > 1) {
      // An earlier attempt may have completed it: accept the object if it is ours.
      error_code head_ec;
      const object_info info = co_await head_request(op, bucket, key, head_ec);
      if (!head_ec && info.attributes.etag == expected) {
        out.ec = {};
        out.value = info.attributes.etag;
        co_return out;
      }
    }
  } else if (!out.ec) {
    out.value = xml::parse_complete_multipart_upload_result(res.body, out.ec).etag;
  }
  if (out.ec) co_await abort_upload(op, job);
  co_return out;
}

asio::awaitable<outcome<std::string>> put_op(op_context op, std::string bucket, std::string key,
                                             std::shared_ptr<byte_source> source, put_options options) {
  transfer_progress progress{options.progress, source->size(), 0};
  path_counter paths;
  outcome<std::string> out;
  if (options.via == transfer_via::rdma && !op.config().rdma) {
    out.ec = s3::errc::rdma_not_supported;
    co_return out;
  }
  if (source->size() <= op.config().multipart_threshold) {
    out = co_await single_put(op, bucket, key, *source, options, progress, paths);
  } else {
    out = co_await multipart_put(op, bucket, key, std::move(source), options, progress, paths);
  }
  paths.report_to(options.report);
  co_return out;
}

/// PutObject of device memory: one PUT whose bytes the server takes through the client's plane
/// (a same-host CUDA IPC grant, or a fabric that registers device memory). It carries no
/// Content-MD5 or checksum (the bytes are not on the host to hash); the server keeps a CRC32C
/// and answers an opaque ETag. Its x-amz-content-sha256 is the SHA-256 of its token, which no
/// empty body matches: a server that ignores the token rejects it instead of storing 0 bytes.
asio::awaitable<outcome<std::string>> put_device_op(op_context op, std::string bucket, std::string key, region source,
                                                    put_options options) {
  outcome<std::string> out;
  constexpr std::uint64_t max_single_put = std::uint64_t{5} << 30;  // S3's PutObject limit
  if (options.via == transfer_via::http || source.size > max_single_put) {
    out.ec = sluice::errc::unsupported_memory;  // no body from device memory; no multipart of it yet
    co_return out;
  }
  const auto grant = grant_for(op.config(), transfer_via::rdma, source, rdma_op::read, out.ec);
  if (!out.ec && !grant) out.ec = s3::errc::rdma_not_supported;
  if (out.ec) co_return out;
  request_spec spec;
  spec.method = http::verb::put;
  spec.bucket = std::move(bucket);
  spec.key = std::move(key);
  add_attribute_headers(spec.headers, options.attributes, out.ec);
  if (out.ec) co_return out;
  spec.has_body = true;  // Content-Length: 0
  spec.payload_hash = sha256_hex(grant->token());
  spec.headers.emplace_back("x-amz-rdma-token", grant->token());
  spec.headers.emplace_back("x-amz-decoded-content-length", std::to_string(source.size));
  add_precondition_headers(spec.headers, options.precondition);
  path_counter paths;
  const response res = co_await execute(op, spec, out.ec);
  if (out.ec) co_return out;
  if (res.status < 300 && moved_by_rdma(res)) {
    paths.rdma(*op.state, source.size);
    if (options.progress) options.progress(source.size, source.size);
    out.value = unquote(res.field("ETag"));
  } else if (res.field("x-amz-rdma-reply") == "501" || (res.field("x-amz-rdma-reply").empty() && res.status < 300)) {
    ++paths.declined;
    out.ec = s3::errc::rdma_not_supported;
  } else {
    out.ec = error_of(res, false);
  }
  paths.report_to(options.report);
  co_return out;
}

asio::awaitable<outcome<std::string>> put_region_op(op_context op, std::string bucket, std::string key, region source,
                                                    put_options options) {
  outcome<std::string> out;
  if (!source.host_accessible() && source.size > 0) {
    if (source.data == nullptr) {
      out.ec = sluice::errc::invalid_argument;
      co_return out;
    }
    co_return co_await put_device_op(std::move(op), std::move(bucket), std::move(key), source, std::move(options));
  }
  if (source.data == nullptr && source.size > 0) {
    out.ec = sluice::errc::invalid_argument;
    co_return out;
  }
  if (source.size == 0) source = region{};  // an empty object: no device bytes to read
  std::shared_ptr<byte_source> bytes = std::make_shared<region_source>(source);
  co_return co_await put_op(std::move(op), std::move(bucket), std::move(key), std::move(bytes), std::move(options));
}

asio::awaitable<outcome<std::string>> put_source_op(op_context op, std::string bucket, std::string key,
                                                    std::shared_ptr<byte_source> source, put_options options) {
  if (!source) {
    outcome<std::string> out;
    out.ec = sluice::errc::invalid_argument;
    co_return out;
  }
  co_return co_await put_op(std::move(op), std::move(bucket), std::move(key), std::move(source), std::move(options));
}

asio::awaitable<outcome<std::string>> put_file_op(op_context op, std::string bucket, std::string key,
                                                  std::filesystem::path file, put_options options) {
  outcome<std::string> out;
  std::shared_ptr<byte_source> bytes = file_source::open(file, out.ec);
  if (out.ec) co_return out;
  co_return co_await put_op(std::move(op), std::move(bucket), std::move(key), std::move(bytes), std::move(options));
}

// -- Other operations -------------------------------------------------------------------------

asio::awaitable<outcome<nothing>> delete_object_op(op_context op, std::string bucket, std::string key) {
  outcome<nothing> out;
  request_spec spec;
  spec.method = http::verb::delete_;
  spec.bucket = std::move(bucket);
  spec.key = std::move(key);
  const response res = co_await execute(op, spec, out.ec);
  if (!out.ec && res.status >= 300) {
    out.ec = error_of(res, false);
    if (out.ec == errc::no_such_key) out.ec = {};  // already gone: what a delete wants
  }
  co_return out;
}

asio::awaitable<outcome<nothing>> bucket_op(op_context op, std::string bucket, bool create) {
  outcome<nothing> out;
  const std::string body = create ? xml::create_bucket_configuration(op.config().region) : std::string();
  request_spec spec;
  spec.method = create ? http::verb::put : http::verb::delete_;
  spec.bucket = std::move(bucket);
  if (create) {
    spec.body = std::as_bytes(std::span(body));
    spec.has_body = true;
    spec.payload_hash = sha256_hex(body);
  }
  const response res = co_await execute(op, spec, out.ec);
  if (!out.ec && res.status >= 300) {
    out.ec = error_of(res, true);
    // A repeat after a lost answer finds the first attempt's work done.
    if (res.attempts > 1 &&
        ((create && out.ec == errc::bucket_already_owned_by_you) || (!create && out.ec == errc::no_such_bucket))) {
      out.ec = {};
    }
  }
  co_return out;
}

asio::awaitable<outcome<list_objects_result>> list_objects_op(op_context op, std::string bucket, list_options options,
                                                              bool all) {
  outcome<list_objects_result> out;
  std::string token = options.continuation_token;
  for (bool first = true;; first = false) {
    request_spec spec;
    spec.bucket = bucket;
    spec.query.emplace_back("list-type", "2");
    if (!options.prefix.empty()) spec.query.emplace_back("prefix", options.prefix);
    if (!options.delimiter.empty()) spec.query.emplace_back("delimiter", options.delimiter);
    spec.query.emplace_back("max-keys", std::to_string(options.max_keys));
    if (!token.empty()) spec.query.emplace_back("continuation-token", token);
    if (!options.start_after.empty()) spec.query.emplace_back("start-after", options.start_after);
    spec.query.emplace_back("encoding-type", "url");
    const response res = co_await execute(op, spec, out.ec);
    if (!out.ec && res.status >= 300) out.ec = error_of(res, true);
    if (out.ec) co_return out;
    list_objects_result page = xml::parse_list_objects_v2(res.body, out.ec);
    if (out.ec) co_return out;
    if (!all) {
      out.value = std::move(page);
      co_return out;
    }
    if (first) {
      out.value.bucket = page.bucket;
      out.value.prefix = page.prefix;
      out.value.delimiter = page.delimiter;
      out.value.start_after = page.start_after;
      out.value.continuation_token = page.continuation_token;
      out.value.max_keys = page.max_keys;
    }
    for (auto& object : page.objects) out.value.objects.push_back(std::move(object));
    for (auto& prefix : page.common_prefixes) {
      if (out.value.common_prefixes.empty() || out.value.common_prefixes.back() != prefix) {
        out.value.common_prefixes.push_back(std::move(prefix));
      }
    }
    if (!page.truncated) co_return out;
    if (page.next_continuation_token.empty() || page.next_continuation_token == token) {
      out.ec = sluice::errc::protocol_violation;  // truncated, but no way to go on
      co_return out;
    }
    token = std::move(page.next_continuation_token);
  }
}

asio::awaitable<outcome<std::vector<bucket_info>>> list_buckets_op(op_context op) {
  outcome<std::vector<bucket_info>> out;
  request_spec spec;
  const response res = co_await execute(op, spec, out.ec);
  if (!out.ec && res.status >= 300) out.ec = error_of(res, true);
  if (out.ec) co_return out;
  out.value = xml::parse_list_buckets(res.body, out.ec);
  co_return out;
}

}  // namespace client_impl
}  // namespace sluice::s3::detail

namespace sluice::s3 {

namespace {

template <class Initiate>
void run_blocking_void(Initiate&& initiate, error_code& ec) {
  boost::asio::io_context context;
  std::forward<Initiate>(initiate)(boost::asio::bind_executor(context, [&](error_code e) { ec = e; }));
  context.run();
}

class tls_verify_category_impl final : public boost::system::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "tls-verify"; }
  [[nodiscard]] std::string message(int value) const override {
    return std::string("TLS certificate verification failed: ") + X509_verify_cert_error_string(value);
  }
};

}  // namespace

const boost::system::error_category& tls_verify_category() noexcept {
  static const tls_verify_category_impl category;
  return category;
}

std::optional<config_error> client_config::validate() const {
  const auto where = detail::client_impl::parse_endpoint(endpoint);
  if (!where) {
    const auto separator = endpoint.find("://");
    if (separator != std::string::npos) {
      const std::string scheme = detail::client_impl::lower(std::string_view(endpoint).substr(0, separator));
      if (scheme != "http" && scheme != "https") {
        return config_error{"endpoint", "scheme \"" + scheme + "\" is not supported: use http:// or https://"};
      }
    }
    return config_error{"endpoint", "must be http://host[:port] or https://host[:port]"};
  }
  if (!ca_bundle.empty() && !where->tls) return config_error{"ca_bundle", "is for an https:// endpoint only"};
  if (region.empty()) return config_error{"region", "must not be empty"};
  if (creds.access_key_id.empty() != creds.secret_access_key.empty()) {
    return config_error{"creds", "give both the access key id and the secret, or neither"};
  }
  if (max_connections_per_host == 0) return config_error{"max_connections_per_host", "must be at least 1"};
  if (parts_in_flight == 0) return config_error{"parts_in_flight", "must be at least 1"};
  if (io_threads == 0) return config_error{"io_threads", "must be at least 1"};
  if (part_size < 5 * mib || part_size > 5 * gib) return config_error{"part_size", "must be 5 MiB..5 GiB"};
  if (multipart_threshold < 5 * mib) return config_error{"multipart_threshold", "must be at least 5 MiB"};
  if (retry_base_delay.count() <= 0) return config_error{"retry_base_delay", "must be positive"};
  if (request_timeout.count() <= 0) return config_error{"request_timeout", "must be positive"};
  if (idle_connection_timeout.count() <= 0) return config_error{"idle_connection_timeout", "must be positive"};
  return std::nullopt;
}

client::client(client_config config) {
  if (auto error = config.validate()) throw std::invalid_argument(error->message());
  auto where = *detail::client_impl::parse_endpoint(config.endpoint);
  state_ = std::make_shared<detail::client_state>(std::move(config), std::move(where));
  auto& s = *state_;
  if (s.where.tls) {
    namespace ssl = boost::asio::ssl;
    auto& context = s.tls_context.emplace(ssl::context::tls_client);
    error_code ec;
    context.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                            ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::no_compression,
                        ec);
    if (!ec && SSL_CTX_set_min_proto_version(context.native_handle(), TLS1_2_VERSION) != 1) {
      ec = detail::client_impl::last_ssl_error();
    }
    if (!ec) context.set_verify_mode(s.config.verify_peer ? ssl::verify_peer : ssl::verify_none, ec);
    if (ec) throw sluice::system_error(ec, "TLS context");
    if (!s.config.ca_bundle.empty()) {
      const std::string path = s.config.ca_bundle.string();
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // OpenSSL 3 has no text for system errors
      if (fd < 0) {
        throw std::invalid_argument("ca_bundle: cannot open " + path + ": " + std::generic_category().message(errno));
      }
      ::close(fd);
      context.load_verify_file(path, ec);
      if (ec) throw std::invalid_argument("ca_bundle: no CA certificate loaded from " + path + ": " + ec.message());
    } else if (s.config.verify_peer) {
      context.set_default_verify_paths(ec);
      if (ec) throw sluice::system_error(ec, "TLS context: the system's CA store");
    }
  }
  s.work.emplace(s.io.get_executor());
  for (std::size_t i = 0; i < s.config.io_threads; ++i) s.threads.emplace_back([&s] { s.io.run(); });
}

client::~client() {
  auto& s = *state_;
  s.closing = true;
  s.cancel_all();
  s.work.reset();
  for (auto& t : s.threads) {
    if (t.joinable()) t.join();
  }
}

client::executor_type client::get_executor() const noexcept { return state_->io.get_executor(); }

const client_config& client::config() const noexcept { return state_->config; }

client_statistics client::statistics() const noexcept {
  return {state_->connections_opened.load(), state_->requests.load(), state_->retries.load(), state_->rdma_bytes.load(),
          state_->http_bytes.load()};
}

void client::cancel() { state_->cancel_all(); }

void client::start_head_object(std::string bucket, std::string key, detail::client_handler<object_info> handler) {
  using namespace detail::client_impl;
  spawn(state_, head_object_op(make_op(state_), std::move(bucket), std::move(key)), std::move(handler));
}

void client::start_get_object(std::string bucket, std::string key, region destination, get_options options,
                              detail::client_handler<std::uint64_t> handler) {
  using namespace detail::client_impl;
  spawn(state_, get_object_op(make_op(state_), std::move(bucket), std::move(key), destination, std::move(options)),
        std::move(handler));
}

void client::start_put_object(std::string bucket, std::string key, region source, put_options options,
                              detail::client_handler<std::string> handler) {
  using namespace detail::client_impl;
  spawn(state_, put_region_op(make_op(state_), std::move(bucket), std::move(key), source, std::move(options)),
        std::move(handler));
}

void client::start_put_source(std::string bucket, std::string key, std::shared_ptr<upload_source> source,
                              put_options options, detail::client_handler<std::string> handler) {
  using namespace detail::client_impl;
  spawn(state_,
        put_source_op(make_op(state_), std::move(bucket), std::move(key), std::move(source), std::move(options)),
        std::move(handler));
}

void client::start_put_file(std::string bucket, std::string key, std::filesystem::path file, put_options options,
                            detail::client_handler<std::string> handler) {
  using namespace detail::client_impl;
  spawn(state_, put_file_op(make_op(state_), std::move(bucket), std::move(key), std::move(file), std::move(options)),
        std::move(handler));
}

void client::start_delete_object(std::string bucket, std::string key, detail::client_handler<> handler) {
  using namespace detail::client_impl;
  spawn(state_, delete_object_op(make_op(state_), std::move(bucket), std::move(key)), std::move(handler));
}

void client::start_list_objects(std::string bucket, list_options options, bool all,
                                detail::client_handler<list_objects_result> handler) {
  using namespace detail::client_impl;
  spawn(state_, list_objects_op(make_op(state_), std::move(bucket), std::move(options), all), std::move(handler));
}

void client::start_bucket_request(std::string bucket, bool create, detail::client_handler<> handler) {
  using namespace detail::client_impl;
  spawn(state_, bucket_op(make_op(state_), std::move(bucket), create), std::move(handler));
}

void client::start_list_buckets(detail::client_handler<std::vector<bucket_info>> handler) {
  using namespace detail::client_impl;
  spawn(state_, list_buckets_op(make_op(state_)), std::move(handler));
}

// -- Blocking overloads --------------------------------------------------------------------------

object_info client::head_object(const std::string& bucket, const std::string& key, error_code& ec) {
  return sluice::detail::run_blocking<object_info>(
      [&](auto handler) { async_head_object(bucket, key, std::move(handler)); }, ec);
}

object_info client::head_object(const std::string& bucket, const std::string& key) {
  error_code ec;
  object_info info = head_object(bucket, key, ec);
  sluice::detail::throw_on_error(ec, "sluice s3 head_object");
  return info;
}

std::uint64_t client::get_object(const std::string& bucket, const std::string& key, region destination,
                                 get_options options, error_code& ec) {
  return sluice::detail::run_blocking<std::uint64_t>(
      [&](auto handler) { async_get_object(bucket, key, destination, std::move(options), std::move(handler)); }, ec);
}

std::uint64_t client::get_object(const std::string& bucket, const std::string& key, region destination,
                                 get_options options) {
  error_code ec;
  const std::uint64_t bytes = get_object(bucket, key, destination, std::move(options), ec);
  sluice::detail::throw_on_error(ec, "sluice s3 get_object");
  return bytes;
}

std::string client::put_object(const std::string& bucket, const std::string& key, std::shared_ptr<upload_source> source,
                               put_options options, error_code& ec) {
  return sluice::detail::run_blocking<std::string>(
      [&](auto handler) { async_put_object(bucket, key, std::move(source), std::move(options), std::move(handler)); },
      ec);
}

std::string client::put_object(const std::string& bucket, const std::string& key, region source, put_options options,
                               error_code& ec) {
  return sluice::detail::run_blocking<std::string>(
      [&](auto handler) { async_put_object(bucket, key, source, std::move(options), std::move(handler)); }, ec);
}

std::string client::put_object(const std::string& bucket, const std::string& key, region source, put_options options) {
  error_code ec;
  std::string etag = put_object(bucket, key, source, std::move(options), ec);
  sluice::detail::throw_on_error(ec, "sluice s3 put_object");
  return etag;
}

std::string client::put_object(const std::string& bucket, const std::string& key, const std::filesystem::path& file,
                               put_options options, error_code& ec) {
  return sluice::detail::run_blocking<std::string>(
      [&](auto handler) { async_put_object(bucket, key, file, std::move(options), std::move(handler)); }, ec);
}

std::string client::put_object(const std::string& bucket, const std::string& key, const std::filesystem::path& file,
                               put_options options) {
  error_code ec;
  std::string etag = put_object(bucket, key, file, std::move(options), ec);
  sluice::detail::throw_on_error(ec, "sluice s3 put_object");
  return etag;
}

void client::delete_object(const std::string& bucket, const std::string& key, error_code& ec) {
  run_blocking_void([&](auto handler) { async_delete_object(bucket, key, std::move(handler)); }, ec);
}

void client::delete_object(const std::string& bucket, const std::string& key) {
  error_code ec;
  delete_object(bucket, key, ec);
  sluice::detail::throw_on_error(ec, "sluice s3 delete_object");
}

list_objects_result client::list_objects(const std::string& bucket, const list_options& options, error_code& ec) {
  return sluice::detail::run_blocking<list_objects_result>(
      [&](auto handler) { async_list_objects(bucket, options, std::move(handler)); }, ec);
}

list_objects_result client::list_objects(const std::string& bucket, const list_options& options) {
  error_code ec;
  list_objects_result page = list_objects(bucket, options, ec);
  sluice::detail::throw_on_error(ec, "sluice s3 list_objects");
  return page;
}

list_objects_result client::list_all_objects(const std::string& bucket, const list_options& options, error_code& ec) {
  return sluice::detail::run_blocking<list_objects_result>(
      [&](auto handler) { async_list_all_objects(bucket, options, std::move(handler)); }, ec);
}

list_objects_result client::list_all_objects(const std::string& bucket, const list_options& options) {
  error_code ec;
  list_objects_result all = list_all_objects(bucket, options, ec);
  sluice::detail::throw_on_error(ec, "sluice s3 list_all_objects");
  return all;
}

void client::create_bucket(const std::string& bucket, error_code& ec) {
  run_blocking_void([&](auto handler) { async_create_bucket(bucket, std::move(handler)); }, ec);
}

void client::create_bucket(const std::string& bucket) {
  error_code ec;
  create_bucket(bucket, ec);
  sluice::detail::throw_on_error(ec, "sluice s3 create_bucket");
}

void client::delete_bucket(const std::string& bucket, error_code& ec) {
  run_blocking_void([&](auto handler) { async_delete_bucket(bucket, std::move(handler)); }, ec);
}

void client::delete_bucket(const std::string& bucket) {
  error_code ec;
  delete_bucket(bucket, ec);
  sluice::detail::throw_on_error(ec, "sluice s3 delete_bucket");
}

std::vector<bucket_info> client::list_buckets(error_code& ec) {
  return sluice::detail::run_blocking<std::vector<bucket_info>>(
      [&](auto handler) { async_list_buckets(std::move(handler)); }, ec);
}

std::vector<bucket_info> client::list_buckets() {
  error_code ec;
  std::vector<bucket_info> buckets = list_buckets(ec);
  sluice::detail::throw_on_error(ec, "sluice s3 list_buckets");
  return buckets;
}

}  // namespace sluice::s3
