// SPDX-License-Identifier: Apache-2.0
// The admin listener of sluice::s3::server (server_config::admin_listen): plain HTTP/1.1 that
// answers GET (or HEAD) /metrics, /health and /ready and 404 to everything else. No
// authentication and no objects: it only reads the server's counters. Included by
// server_impl.hpp.
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace sluice::s3::detail {

/// What the admin listener answers: status and body (text/plain).
struct admin_answer {
  unsigned status = 404;
  std::string body = "not found\n";
  std::string_view content_type = "text/plain; charset=utf-8";
};

/// The answer to `method` `target` (a pure function of the request and the server's state):
/// `metrics` renders /metrics, `ready` says whether /ready is 200.
inline admin_answer admin_route(std::string_view method, std::string_view target,
                                const std::function<std::string()>& metrics, bool ready) {
  if (method != "GET" && method != "HEAD") return {};
  const std::string_view path = target.substr(0, target.find('?'));
  if (path == "/metrics") return {200, metrics(), "text/plain; version=0.0.4; charset=utf-8"};
  if (path == "/health") return {200, "ok\n"};
  if (path == "/ready") return ready ? admin_answer{200, "ready\n"} : admin_answer{503, "not ready\n"};
  return {};
}

/// Serves one admin connection: requests one after another, small headers, short timeouts.
inline boost::asio::awaitable<void> admin_session(
    boost::beast::tcp_stream& stream, const std::function<admin_answer(std::string_view, std::string_view)>& route) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::empty_body> parser;
    parser.header_limit(8 * 1024);
    parser.body_limit(0);  // the admin listener takes no bodies
    beast::error_code ec;
    stream.expires_after(std::chrono::seconds(10));
    co_await http::async_read(stream, buffer, parser, boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    if (ec) break;
    const auto& req = parser.get();
    const admin_answer answer = route(std::string_view(req.method_string().data(), req.method_string().size()),
                                      std::string_view(req.target().data(), req.target().size()));
    http::response<http::string_body> res{static_cast<http::status>(answer.status), 11};
    res.set(http::field::server, "sluice");
    res.set(http::field::content_type, std::string(answer.content_type));
    res.keep_alive(req.keep_alive());
    if (req.method() == http::verb::head) {
      res.content_length(answer.body.size());
    } else {
      res.body() = answer.body;
      res.prepare_payload();
    }
    http::response_serializer<http::string_body> sr(res);
    if (req.method() == http::verb::head) {
      co_await http::async_write_header(stream, sr, boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    } else {
      co_await http::async_write(stream, sr, boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    }
    if (ec || !req.keep_alive()) break;
  }
  beast::error_code ignored;
  stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_send, ignored);
  stream.close();
}

/// The admin connections open now, each with what closes it (on its strand) when the listener
/// stops: a scraper's kept-alive connection must not hold the server's threads.
struct admin_sessions {
  std::mutex mutex;
  std::map<std::uint64_t, std::function<void()>> closers;
  std::uint64_t next = 0;
};

// One admin connection, in `sessions` as `id` while it lives.
inline boost::asio::awaitable<void> admin_connection(
    std::shared_ptr<boost::beast::tcp_stream> stream,
    std::function<admin_answer(std::string_view, std::string_view)> route, std::shared_ptr<admin_sessions> sessions,
    std::uint64_t id) {
  co_await admin_session(*stream, route);
  std::lock_guard lock(sessions->mutex);
  sessions->closers.erase(id);
}

/// Accepts admin connections on `acceptor` until it closes, then closes those still open; at
/// most 64 at once (more are closed unanswered: a scraper needs one).
inline boost::asio::awaitable<void> admin_accept_loop(
    boost::asio::ip::tcp::acceptor& acceptor, std::function<admin_answer(std::string_view, std::string_view)> route) {
  auto sessions = std::make_shared<admin_sessions>();
  for (;;) {
    boost::system::error_code ec;
    auto socket = co_await acceptor.async_accept(boost::asio::make_strand(acceptor.get_executor()),
                                                 boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    if (ec == boost::asio::error::operation_aborted || !acceptor.is_open()) break;
    if (ec) continue;
    auto stream = std::make_shared<boost::beast::tcp_stream>(std::move(socket));
    std::uint64_t id = 0;
    {
      std::lock_guard lock(sessions->mutex);
      if (sessions->closers.size() >= 64) continue;  // the socket closes with `stream`
      id = sessions->next++;
      sessions->closers[id] = [weak = std::weak_ptr(stream)] {
        if (auto open = weak.lock()) {
          boost::asio::post(open->get_executor(), [open] {
            boost::system::error_code ignored;
            open->socket().close(ignored);
          });
        }
      };
    }
    auto executor = stream->get_executor();
    boost::asio::co_spawn(executor, admin_connection(stream, route, sessions, id), boost::asio::detached);
  }
  std::lock_guard lock(sessions->mutex);
  for (auto& [id, close] : sessions->closers) close();
}

}  // namespace sluice::s3::detail
