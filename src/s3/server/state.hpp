// SPDX-License-Identifier: Apache-2.0
// What a server and its connections share (server_state), and what a failed request answers.
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#pragma once

#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/sendfile.h>
#include <sys/stat.h>

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include <sluice/names.hpp>
#include <sluice/s3/access_log.hpp>
#include <sluice/s3/admin_impl.hpp>
#include <sluice/s3/any_store.hpp>
#include <sluice/s3/checksum.hpp>
#include <sluice/s3/chunked.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/metrics.hpp>
#include <sluice/s3/router.hpp>
#include <sluice/s3/server.hpp>
#include <sluice/s3/sigv2.hpp>
#include <sluice/s3/sigv4.hpp>
#include <sluice/s3/xml.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "published.hpp"

namespace sluice::s3::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

/// What a failed request answers: the S3 error, an optional message, and whether the
/// connection must close (the request body was not consumed).
struct s3_failure {
  s3::errc code = s3::errc::internal_error;
  std::string message;
};

/// Maps a store's sluice::errc to the S3 error a client expects.
inline s3::errc to_s3(const error_code& ec, bool bucket_level = false) {
  if (ec.category() == s3_category()) return static_cast<s3::errc>(ec.value());
  if (ec.category() == sluice_category()) {
    switch (static_cast<sluice::errc>(ec.value())) {
      case sluice::errc::no_such_bucket: return s3::errc::no_such_bucket;
      case sluice::errc::no_such_object: return s3::errc::no_such_key;
      case sluice::errc::bucket_exists: return s3::errc::bucket_already_owned_by_you;
      case sluice::errc::bucket_not_empty: return s3::errc::bucket_not_empty;
      case sluice::errc::invalid_name: return bucket_level ? s3::errc::invalid_bucket_name : s3::errc::key_too_long;
      case sluice::errc::capacity_exceeded: return s3::errc::entity_too_large;
      case sluice::errc::no_such_upload: return s3::errc::no_such_upload;
      case sluice::errc::invalid_part: return s3::errc::invalid_part;
      case sluice::errc::invalid_part_order: return s3::errc::invalid_part_order;
      case sluice::errc::bad_range: return s3::errc::invalid_range;
      case sluice::errc::precondition_failed: return s3::errc::precondition_failed;
      default: break;
    }
  }
  if (ec == std::errc::no_space_on_device || ec.value() == EDQUOT) {
    if (ec.category() == boost::system::generic_category() || ec.category() == boost::system::system_category()) {
      return s3::errc::insufficient_storage;
    }
  }
  return s3::errc::internal_error;
}

/// The access log's path of a token's transfer: "grant:memfd" for a same-host grant
/// ("local:memfd"), "rdma:<provider>" otherwise.
inline std::string direct_path_of(std::string_view provider) {
  if (provider.starts_with("local:")) return "grant:" + std::string(provider.substr(6));
  return "rdma:" + std::string(provider);
}

/// How server_state::closers close a connection.
enum class close_reason : std::uint8_t {
  idle,  ///< only if it waits for its next request; one in a request ends after its answer
  cut,   ///< now, whatever it is doing: its request in flight is logged as cut
};

/// Shared by the acceptor and every connection.
struct server_state : std::enable_shared_from_this<server_state> {
  server_state(std::shared_ptr<any_store> s, server_config c)
      : store(std::move(s)),
        config(std::move(c)),
        loops(make_loops(config.io_threads)),
        io(*loops.front()),
        acceptor(io),
        tls_acceptor(io),
        admin_acceptor(io),
        log_flush_timer(io),
        grace_timer(io),
        expiry_timer(io),
        users(config.users) {}

  std::shared_ptr<any_store> store;
  server_config config;
  // One event loop per io thread (shared nothing): a connection lives on one loop for its life,
  // so its handlers need no strand and the threads share no scheduler. Work that leaves the loop
  // (the pools below, RDMA completions) comes back to the connection's own loop.
  std::vector<std::unique_ptr<asio::io_context>> loops;
  asio::io_context& io;                   // the first loop: the acceptors, the admin listener, the access log's flush
  std::atomic<std::size_t> next_loop{0};  // connections are dealt to the loops in turn
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> keep_looping;  // until stop()
  // Store calls that wait for the disk (fsync, concatenation), and every call of a remote store
  // (one thread per upstream request in flight).
  asio::thread_pool blocking{store->remote() ? 16u : 2u};
  asio::thread_pool rdma{config.rdma_threads};  // RDMA transfers (each waits for its completions)
  tcp::acceptor acceptor;
  tcp::acceptor tls_acceptor;                     // config.tls: the HTTPS listener
  std::optional<asio::ssl::context> tls_context;  // its certificate and key, loaded by listen()
  std::vector<std::thread> threads;
  std::atomic<std::size_t> connections{0};
  std::mutex address_mutex;                              // guards per_address
  std::map<asio::ip::address, std::size_t> per_address;  // open connections per client address
  std::atomic<bool> stopping{false};
  // server::async_shutdown began: no new connection, no new request on a kept-alive one; the
  // requests in flight have config.shutdown_grace (grace_timer, on `io`) before they are cut.
  std::atomic<bool> draining{false};
  std::atomic<bool> ready{false};  // GET /ready: listening, and not stopping or draining
  tcp::acceptor admin_acceptor;    // config.admin_listen
  server_metrics metrics;
  std::unique_ptr<access_log> log;     // null: the access log is off
  asio::steady_timer log_flush_timer;  // writes the access log out every second
  asio::steady_timer grace_timer;      // the end of shutdown_grace: what is still in flight is cut
  asio::steady_timer expiry_timer;     // the next look for multipart uploads idle past upload_expiry
  std::mutex parts_mutex;              // guards parts_in_flight
  std::map<std::string, std::size_t, std::less<>> parts_in_flight;  // upload id → UploadParts receiving now
  // Read by every request, without a lock: set_users replaces the users, bucket creation and
  // deletion the owners.
  published<std::vector<user>> users;
  published<std::map<std::string, std::string, std::less<>>> owners{{}};  // bucket → access key id

  std::mutex mutex;  // guards closers and drained
  // Live connection → closes it on its loop: at once (stop, or the grace's end: `cut`), or only
  // when it idles between requests (`idle`, as a shutdown begins).
  std::map<const void*, std::function<void(close_reason)>> closers;
  std::function<void()> drained;  // async_shutdown's completion: called once no connection is left

  /// Closes every connection (`how`) on its own loop.
  void close_connections(close_reason how) {
    std::lock_guard lock(mutex);
    for (auto& [connection, close] : closers) close(how);
  }

  /// Cuts what is in flight (the shutdown's grace ended, a second signal): the RDMA and grant
  /// transfers abort (a transfer to a peer that vanished, or that stopped taking bytes, would
  /// otherwise hold its request for operation_timeout), then every connection closes now. Any
  /// thread; no request arrives after it (the server is draining or stopping).
  void cut_in_flight() {
    if (config.rdma) config.rdma->close();
    close_connections(close_reason::cut);
  }

  /// A connection ended (or none was left as a shutdown began): completes async_shutdown when it
  /// was the last one. Any thread.
  void connection_ended() {
    if (!draining || connections.load() != 0) return;
    std::function<void()> done;
    {
      std::lock_guard lock(mutex);
      done = std::move(drained);
      drained = nullptr;
    }
    if (!done) return;
    asio::post(io, [self = shared_from_this()] { self->grace_timer.cancel(); });
    done();
  }

  std::optional<std::string> secret_for(std::string_view access_key) const {
    for (const auto& u : users.read()) {
      if (u.access_key_id == access_key) return u.secret_access_key;
    }
    return std::nullopt;
  }

  /// Aborts every multipart upload that nothing was written to for config.upload_expiry: none
  /// of its parts was committed since then (nor the upload created) and no UploadPart is
  /// receiving one now. Store calls: run on the blocking pool. The number aborted.
  std::size_t expire_uploads(std::chrono::system_clock::time_point now) {
    std::size_t aborted = 0;
    error_code ec;
    for (const auto& bucket : store->list_buckets(ec)) {
      error_code list_error;
      for (const auto& upload : store->list_uploads(bucket.name, {}, list_error)) {
        const object_ref object{bucket.name, upload.key};
        auto last = upload.initiated;
        error_code parts_error;
        for (const auto& part : store->list_parts(object, upload.upload_id, parts_error))
          last = std::max(last, part.last_modified);
        if (parts_error || now - last < config.upload_expiry) continue;
        {
          std::lock_guard lock(parts_mutex);
          if (parts_in_flight.contains(upload.upload_id)) continue;
        }
        error_code abort_error;
        store->abort_upload(object, upload.upload_id, abort_error);
        if (!abort_error) ++aborted;
      }
    }
    return aborted;
  }

  /// The loop of the next connection.
  asio::io_context& next_connection_loop() { return *loops[next_loop.fetch_add(1) % loops.size()]; }

  static std::vector<std::unique_ptr<asio::io_context>> make_loops(std::size_t count) {
    std::vector<std::unique_ptr<asio::io_context>> made;
    for (std::size_t i = 0; i < std::max<std::size_t>(count, 1); ++i) {
      made.push_back(std::make_unique<asio::io_context>(1));  // one thread runs it
    }
    return made;
  }

  // Unique per server process: a thread's own range (its slot in the high bits), counted without
  // a shared atomic per request.
  static std::string next_request_id() {
    static std::atomic<std::uint64_t> threads{0};
    thread_local std::uint64_t next = threads.fetch_add(1, std::memory_order_relaxed) << 40;
    char buf[17];
    auto [end, e] = std::to_chars(buf, buf + sizeof buf, next++ + 0x51C3000000ull, 16);
    (void)e;
    return std::string(buf, end);
  }
};

/// An UploadPart receiving its part: upload expiry leaves its upload alone meanwhile.
class part_in_flight {
 public:
  part_in_flight(server_state& state, std::string_view upload_id) : state_(state), id_(upload_id) {
    std::lock_guard lock(state_.parts_mutex);
    ++state_.parts_in_flight[id_];
  }
  part_in_flight(const part_in_flight&) = delete;
  part_in_flight& operator=(const part_in_flight&) = delete;
  ~part_in_flight() {
    std::lock_guard lock(state_.parts_mutex);
    if (auto it = state_.parts_in_flight.find(id_); it != state_.parts_in_flight.end() && --it->second == 0)
      state_.parts_in_flight.erase(it);
  }

 private:
  server_state& state_;
  std::string id_;
};

}  // namespace sluice::s3::detail
