// SPDX-License-Identifier: Apache-2.0
// Accepting connections (HTTP and HTTPS) and writing the access log out.
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#pragma once

#include "connection.hpp"

namespace sluice::s3::detail {

/// Writes the access log out every second until the server stops (stop() flushes the rest).
inline asio::awaitable<void> flush_access_log(std::shared_ptr<server_state> state) {
  while (!state->stopping) {
    state->log_flush_timer.expires_after(std::chrono::seconds(1));
    error_code ec;
    co_await state->log_flush_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    state->log->flush();
  }
}

/// Every upload_expiry / 2 (1 s to 1 h) until the server stops: aborts the multipart uploads
/// idle longer than upload_expiry (server_state::expire_uploads, on the blocking pool).
inline asio::awaitable<void> expire_uploads(std::shared_ptr<server_state> state) {
  using std::chrono::seconds;
  const seconds every = std::clamp<seconds>(state->config.upload_expiry / 2, seconds(1), seconds(3600));
  while (!state->stopping) {
    state->expiry_timer.expires_after(every);
    error_code ec;
    co_await state->expiry_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (state->stopping) co_return;
    // This coroutine holds the state until the sweep is done: the sweep borrows it.
    server_state* borrowed = state.get();
    co_await asio::co_spawn(
        state->blocking.get_executor(),
        [borrowed]() -> asio::awaitable<void> {
          try {
            borrowed->expire_uploads(std::chrono::system_clock::now());
          } catch (const std::exception&) {
            // a store that throws (bad_alloc) loses this round; the next one tries again
          }
          co_return;
        },
        asio::use_awaitable);
  }
}

/// Accepts on `acceptor` until the server stops: HTTPS connections with `with_tls`.
template <bool with_tls>
asio::awaitable<void> accept_loop(std::shared_ptr<server_state> state, tcp::acceptor& acceptor) {
  for (;;) {
    error_code accept_error;
    tcp::socket socket =
        co_await acceptor.async_accept(asio::any_io_executor(state->next_connection_loop().get_executor()),
                                       asio::redirect_error(asio::use_awaitable, accept_error));
    if (accept_error) {
      if (state->stopping || accept_error == asio::error::operation_aborted) co_return;
      continue;  // EMFILE and friends: keep serving the connections we have
    }
    if (state->connections.fetch_add(1) >= state->config.max_connections) {
      state->connections.fetch_sub(1);
      error_code ignored;
      socket.close(ignored);  // over the limit: refuse rather than queue without bound
      continue;
    }
    error_code peer_error;
    auto peer = socket.remote_endpoint(peer_error).address();
    if (peer.is_v6() && peer.to_v6().is_v4_mapped()) {
      peer = asio::ip::make_address_v4(asio::ip::v4_mapped, peer.to_v6());
    }
    bool over = false;
    {
      std::lock_guard lock(state->address_mutex);
      auto& count = state->per_address[peer];
      over = count >= state->config.max_connections_per_address;
      if (!over) ++count;
    }
    if (over) {  // one client address holds its share already
      state->connections.fetch_sub(1);
      error_code ignored;
      socket.close(ignored);
      continue;
    }
    // Answers are written header then body: without TCP_NODELAY a small body waits for the
    // client's delayed ACK of the header (40 ms on Linux) on a kept-alive connection.
    error_code ignored_option;
    socket.set_option(tcp::no_delay(true), ignored_option);
    auto executor = socket.get_executor();
    if constexpr (with_tls) {
      auto conn = std::make_shared<detail::connection<tls_stream>>(
          state, tls_stream(beast::tcp_stream(std::move(socket)), *state->tls_context), peer);
      asio::co_spawn(
          executor, [conn]() { return conn->run(); }, asio::detached);
    } else {
      auto conn = std::make_shared<detail::connection<plain_stream>>(state, beast::tcp_stream(std::move(socket)), peer);
      asio::co_spawn(
          executor, [conn]() { return conn->run(); }, asio::detached);
    }
  }
}

}  // namespace sluice::s3::detail
