// SPDX-License-Identifier: Apache-2.0
// sluice::s3::server: its life (construct, listen, stop) over the state its connections share.
// The parts of the server, each in src/s3/server/: state.hpp (what connections share; published.hpp
// the snapshots every request reads),
// support.hpp (request helpers), connection.hpp (one connection), listen.hpp (accepting);
// the connection's members in dispatch.cpp, bodies.cpp, receive.hpp, bucket_ops.cpp,
// object_ops.cpp and multipart.cpp; the configuration in config.cpp.
#include "listen.hpp"

namespace sluice::s3 {

server::server(std::shared_ptr<any_store> store, server_config config)
    : state_(std::make_shared<detail::server_state>(std::move(store), std::move(config))) {
  if (auto error = state_->config.validate()) throw std::invalid_argument(error->message());
  // Buckets that exist before the server starts belong to the owner the store kept for them
  // (a store with the bucket_owner capability), else to the first user.
  error_code ec;
  std::map<std::string, std::string, std::less<>> owners;
  for (const auto& b : state_->store->list_buckets(ec)) {
    std::optional<std::string> owner = state_->store->bucket_owner(b.name);
    if (!owner && !state_->config.users.empty()) owner = state_->config.users.front().access_key_id;
    if (owner) owners[b.name] = std::move(*owner);
  }
  state_->owners.publish(std::move(owners));
  if (state_->config.access_log.target != access_log_target::off) {
    error_code log_error;
    state_->log = std::make_unique<access_log>(state_->config.access_log, log_error);
    if (log_error) {
      throw std::invalid_argument("access log " + state_->config.access_log.path.string() + ": " + log_error.message());
    }
  }
}

server::~server() { stop(); }

void server::listen(error_code& ec) {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  auto& s = *state_;
  const auto open = [&](tcp::acceptor& acceptor, const std::string& host, std::uint16_t port) {
    const auto address = asio::ip::make_address(host, ec);
    if (ec) return;
    const tcp::endpoint endpoint(address, port);
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  };
  if (s.config.plain_http) open(s.acceptor, s.config.listen_address, s.config.port);
  if (ec) return;
  if (s.config.admin_listen) {
    open(s.admin_acceptor, s.config.admin_listen->listen_address, s.config.admin_listen->port);
    if (ec) {
      error_code ignored;
      s.acceptor.close(ignored);
      return;
    }
  }
  if (s.config.tls) {
    // TLS 1.2 and 1.3 only; the certificate chain and key as PEM files.
    auto& context = s.tls_context.emplace(asio::ssl::context::tls_server);
    context.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                            asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                            asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use,
                        ec);
    if (!ec) context.use_certificate_chain_file(s.config.tls->certificate_chain.string(), ec);
    if (!ec) context.use_private_key_file(s.config.tls->private_key.string(), asio::ssl::context::pem, ec);
    if (!ec) open(s.tls_acceptor, s.config.tls->listen_address, s.config.tls->port);
    if (ec) {
      error_code ignored;
      s.acceptor.close(ignored);
      s.admin_acceptor.close(ignored);
      return;
    }
  }
  if (s.config.plain_http) {
    asio::co_spawn(s.io, detail::accept_loop<false>(state_, s.acceptor), asio::detached);
  }
  if (s.config.tls) {
    asio::co_spawn(s.io, detail::accept_loop<true>(state_, s.tls_acceptor), asio::detached);
  }
  if (s.config.admin_listen) {
    // The route reads the state through a weak pointer: admin connections never keep it alive.
    std::weak_ptr<detail::server_state> weak = state_;
    asio::co_spawn(s.io,
                   detail::admin_accept_loop(
                       s.admin_acceptor,
                       [weak](std::string_view method, std::string_view target) {
                         auto st = weak.lock();
                         if (!st) return detail::admin_answer{503, "stopping\n"};
                         return detail::admin_route(
                             method, target,
                             [&st] { return st->metrics.render(st->connections.load(), st->config.metrics_sources); },
                             st->ready.load() && !st->stopping.load());
                       }),
                   asio::detached);
  }
  if (s.log) asio::co_spawn(s.io, detail::flush_access_log(state_), asio::detached);
  if (s.config.upload_expiry.count() > 0) asio::co_spawn(s.io, detail::expire_uploads(state_), asio::detached);
  s.ready = true;
  for (auto& loop : s.loops) {
    s.keep_looping.push_back(boost::asio::make_work_guard(*loop));
    s.threads.emplace_back([st = state_, &loop = *loop] { loop.run(); });
  }
}

void server::listen() {
  error_code ec;
  listen(ec);
  sluice::detail::throw_on_error(ec, "sluice s3 server listen");
}

boost::asio::ip::tcp::endpoint server::local_endpoint() const {
  error_code ec;
  return state_->acceptor.local_endpoint(ec);
}

boost::asio::ip::tcp::endpoint server::tls_endpoint() const {
  error_code ec;
  return state_->tls_acceptor.local_endpoint(ec);
}

boost::asio::ip::tcp::endpoint server::admin_endpoint() const {
  error_code ec;
  return state_->admin_acceptor.local_endpoint(ec);
}

void server::set_users(std::vector<user> users) {
  for (const auto& u : users) {
    if (u.access_key_id.empty() || u.secret_access_key.empty()) {
      throw std::invalid_argument("every user needs an access key id and a secret");
    }
  }
  state_->users.publish(std::move(users));
}

void server::reopen_access_log(error_code& ec) {
  ec = {};
  if (state_->log) state_->log->reopen(ec);
}

boost::asio::any_io_executor server::executor() const { return state_->io.get_executor(); }

void server::start_shutdown(std::function<void()> drained) {
  auto& s = *state_;
  if (s.threads.empty() || s.stopping) {  // not serving: nothing to wait for, no loop to run on
    drained();
    return;
  }
  {
    std::lock_guard lock(s.mutex);
    if (s.drained) {  // a second caller: both complete
      s.drained = [first = std::move(s.drained), second = std::move(drained)] {
        first();
        second();
      };
    } else {
      s.drained = std::move(drained);
    }
  }
  boost::asio::post(s.io, [state = state_] {
    auto& st = *state;
    if (st.draining.exchange(true)) {
      st.connection_ended();  // under way already: completes now if nothing is left
      return;
    }
    st.ready = false;
    error_code ignored;
    st.acceptor.close(ignored);  // new connections are refused from here on
    st.tls_acceptor.close(ignored);
    st.close_connections(detail::close_reason::idle);
    st.grace_timer.expires_after(st.config.shutdown_grace);
    st.grace_timer.async_wait([state](error_code ec) {
      if (!ec) state->cut_in_flight();
    });
    st.connection_ended();  // none open: done now
  });
}

void server::cut_now() {
  if (state_->threads.empty()) return;  // not serving: nothing to cut, and no loop to run on
  boost::asio::post(state_->io, [state = state_] {
    if (!state->draining) return;
    state->grace_timer.cancel();
    state->cut_in_flight();
  });
}

void server::stop() {
  auto& s = *state_;
  if (s.stopping.exchange(true)) return;
  s.ready = false;
  // Transfers to peers that vanished would otherwise hold their threads for operation_timeout.
  if (s.config.rdma) s.config.rdma->close();
  const auto close_all = [](detail::server_state& state) {
    error_code ignored;
    state.acceptor.close(ignored);
    state.tls_acceptor.close(ignored);
    state.admin_acceptor.close(ignored);
    state.log_flush_timer.cancel();
    state.grace_timer.cancel();
    state.expiry_timer.cancel();
    state.close_connections(detail::close_reason::cut);
  };
  if (s.threads.empty()) {
    // Never listening (or listen failed): no thread would run a posted handler, and one holding
    // the state in the state's own io_context would keep it alive for ever.
    close_all(s);
  } else {
    boost::asio::post(s.io, [state = state_, close_all] { close_all(*state); });
  }
  // Each loop ends once its connections have (the first one's also once its acceptors closed).
  for (auto& guard : s.keep_looping) guard.reset();
  // Give connections a moment to finish their last write, then stop the loop.
  for (auto& t : s.threads) {
    if (t.joinable()) t.join();
  }
  s.threads.clear();
  s.blocking.join();
  s.rdma.join();
  if (s.log) s.log->flush();
}

}  // namespace sluice::s3
