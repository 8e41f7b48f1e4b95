// SPDX-License-Identifier: Apache-2.0
// Connections: the endpoint URL, cancellation scopes, the TCP layer under TLS, the connection
// pool, and the state a client and its operations share.
// Part of the client's implementation (include/sluice/s3/client.hpp); the declarations its
// translation units share are in client_internal.hpp.
#include "client_internal.hpp"

namespace sluice::s3::detail::client_impl {

namespace {

/// Whether `url` starts with `scheme` ("http://"), in any case.
bool has_scheme(std::string_view url, std::string_view scheme) {
  return url.size() >= scheme.size() && ::sluice::detail::iequals(url.substr(0, scheme.size()), scheme);
}

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

}  // namespace

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

bool op_context::aborted() const noexcept {
  return state->epoch.load() != epoch || (cancellation && cancellation->cancelled.load());
}
const client_config& op_context::config() const noexcept { return state->config; }

op_context make_op(const std::shared_ptr<client_state>& state, op_cancellation_ptr cancellation) {
  return {state, state->epoch.load(), std::move(cancellation)};
}

cancel_scope::cancel_scope(const op_context& op, const asio::any_io_executor& executor, std::function<void()> action)
    : state_(op.state.get()), group_(op.cancellation.get()), slot_(std::make_shared<cancel_slot>()) {
  slot_->executor = executor;
  slot_->action = std::move(action);
  {
    std::lock_guard lock(state_->cancel_mutex);
    id_ = state_->next_slot++;
    state_->cancel_slots.emplace(id_, slot_);
  }
  if (group_ != nullptr) {
    // Registered before the caller checks aborted(): a signal either finds it or is seen then.
    std::lock_guard lock(group_->mutex);
    group_->slots.emplace(id_, slot_);
  }
}

cancel_scope::~cancel_scope() {
  slot_->armed = false;
  if (group_ != nullptr) {
    std::lock_guard lock(group_->mutex);
    group_->slots.erase(id_);
  }
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

}  // namespace sluice::s3::detail::client_impl

namespace sluice::s3::detail {

op_cancellation_ptr make_op_cancellation() { return std::make_shared<client_impl::op_cancellation>(); }

void op_cancel_handler::operator()(boost::asio::cancellation_type type) const {
  using boost::asio::cancellation_type;
  // Aborting the whole operation satisfies every type.
  if ((type & (cancellation_type::terminal | cancellation_type::partial | cancellation_type::total)) ==
      cancellation_type::none) {
    return;
  }
  if (const op_cancellation_ptr group = group_.lock()) group->cancel();
}

}  // namespace sluice::s3::detail
