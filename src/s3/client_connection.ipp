// Connections: the endpoint URL, cancellation scopes, the TCP layer under TLS, the connection
// pool, and the state a client and its operations share.
// Part of the client's implementation (include/sluice/s3/client.hpp), included by src/s3/client.cpp
// in the order written there.

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
  return url.size() >= scheme.size() && ::sluice::detail::iequals(url.substr(0, scheme.size()), scheme);
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

}  // namespace client_impl
}  // namespace sluice::s3::detail
