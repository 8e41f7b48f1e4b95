// SPDX-License-Identifier: Apache-2.0
// sluice::s3::server: an embeddable S3 server (Boost.Beast, HTTP/1.1 keep-alive) over any
// servable_store. The S3 request is the control plane of every sluice path that ends here.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/config.hpp>
#include <sluice/error.hpp>
#include <sluice/s3/access_log.hpp>
#include <sluice/s3/any_store.hpp>
#include <sluice/s3/metrics.hpp>
#include <sluice/s3/rdma.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace sluice::s3 {

/// One S3 user: an access key pair. A user sees and touches only the buckets it created.
struct user {
  std::string access_key_id;
  std::string secret_access_key;
};

/// The HTTPS listener of a server (Boost.Beast over OpenSSL; TLS 1.2 and 1.3).
struct tls_listener {
  std::string listen_address = "127.0.0.1";
  std::uint16_t port = 9443;                ///< 0: an ephemeral port (see server::tls_endpoint())
  std::filesystem::path certificate_chain;  ///< PEM: the server's certificate, then its intermediates
  std::filesystem::path private_key;        ///< PEM, unencrypted
};

/// The admin listener of a server: plain HTTP, no authentication, only GET /metrics (Prometheus
/// text format), /health and /ready; every other request is 404. Never serves objects.
struct admin_listener {
  std::string listen_address = "127.0.0.1";
  std::uint16_t port = 9100;  ///< 0: an ephemeral port (see server::admin_endpoint())
};

/// Which peers a plain-HTTP GET's body reaches by sendfile(2) (server_config::sendfile).
enum class http_sendfile : std::uint8_t { remote, always, never };

/// Everything the server can be told; validated at construction.
struct server_config {
  std::string listen_address = "127.0.0.1";
  std::uint16_t port = 9000;                       ///< 0: an ephemeral port (see local_endpoint())
  bool plain_http = true;                          ///< listen on listen_address:port (false: HTTPS only)
  std::optional<tls_listener> tls;                 ///< also (or only) serve HTTPS
  std::vector<user> users;                         ///< at least one unless allow_anonymous
  bool allow_anonymous = false;                    ///< unsigned requests act as the first user
  std::optional<std::string> region;               ///< when set, requests signed for another region fail
  std::vector<std::string> virtual_host_suffixes;  ///< "bucket.<suffix>" hosts name buckets
  /// Accept AWS Signature Version 2 (`Authorization: AWS AK:sig`, and the AWSAccessKeyId/Expires/
  /// Signature URLs the AWS CLI v1 presigns): HMAC-SHA1, payload unsigned (Content-MD5 still
  /// checked). false: every SigV2 request is 403 AccessDenied.
  bool sigv2 = true;
  std::size_t max_header_bytes = 16 * kib;
  std::size_t max_connections = 512;
  /// Connections from one client address at once (IPv4-mapped IPv6 counts as its IPv4 address);
  /// one more is closed at accept, unanswered, like one over max_connections. Bounds what one
  /// host, authenticated or not, can hold of max_connections.
  std::size_t max_connections_per_address = 128;
  std::uint64_t max_object_bytes = 5 * gib;  ///< one PUT or one part (S3's limit)
  std::uint64_t min_part_bytes = 5 * mib;    ///< every multipart part but the last (S3's limit)
  /// A request's header section, from its first byte, and each wait for its body: no longer.
  std::chrono::seconds read_timeout{30};
  std::chrono::seconds idle_timeout{60};  ///< a connection waits no longer for a request's first byte
  std::chrono::minutes clock_skew{15};
  /// How long server::async_shutdown lets requests in flight finish before it cuts them.
  std::chrono::seconds shutdown_grace{30};
  /// Multipart uploads that nothing was written to for this long are aborted, their parts
  /// removed (checked every upload_expiry / 2, at most hourly, at least every second).
  /// 0: uploads are kept until completed or aborted.
  std::chrono::seconds upload_expiry{std::chrono::hours(24 * 7)};
  /// Threads of the server's own io_context: one per core by default (at least 2).
  std::size_t io_threads = std::max<std::size_t>(2, std::thread::hardware_concurrency());
  /// The data plane behind x-amz-rdma-token (sluice::fabric::server_plane). Null: every token
  /// is declined (x-amz-rdma-reply: 501; GET answers over HTTP, PUT with RDMANotSupported).
  std::shared_ptr<rdma_server_plane> rdma;
  std::size_t rdma_threads = 8;  ///< post RDMA operations and run PUTs' writes to the store (no transfer waits on one)
  /// Refuse a token whose endpoint is not on the host the request came from (an IP address that
  /// differs from the HTTP peer's; shm from a peer that is not on loopback). Turn off when
  /// clients send HTTP and RDMA over different networks.
  bool rdma_same_host_only = true;
  /// When a plain-HTTP GET's body goes by sendfile(2) from the store's file (a store whose mapping
  /// has one, fs_store), instead of being written from its mapping: for peers on other hosts and
  /// readers of a gateway's copy being fetched (remote, the default), every peer (always), or none
  /// (never). sendfile saves the server its
  /// copy into the socket (0.15 against 0.35 s of server CPU per GiB), but a reader on the same
  /// host measured 0.75× as fast (docs/history/performance-2026-11.md; likely because its copy then reads the
  /// file's pages from memory, not socket buffers still in the cache). HTTPS always writes.
  http_sendfile sendfile = http_sendfile::remote;
  /// One line per request (see docs/s3.md, "Operating sluice serve"); off by default.
  access_log_config access_log;
  /// Metrics, health and readiness on a separate port; off by default.
  std::optional<admin_listener> admin_listen;
  /// The host's own families, appended to /metrics at every scrape (the registration caches
  /// of planes the S3 tier does not link, say); see metrics_source.
  std::vector<metrics_source> metrics_sources;

  /// The first problem, or nullopt.
  [[nodiscard]] std::optional<config_error> validate() const;
};

/// Reads a server configuration from JSON (a sluice config file's "server" object or the
/// whole document): {"listen": "127.0.0.1:9000", "region": "us-east-1", "anonymous": false,
/// "users": [{"access_key_id": "...", "secret_access_key": "..."}], "virtual_host_suffixes": [...],
/// "max_connections": 512, "max_connections_per_address": 128, "max_object_bytes": "5 GiB",
/// "read_timeout_s": 30, "idle_timeout_s": 60, "shutdown_grace_s": 30,
/// "upload_expiry_s": 604800, "io_threads": 16, "access_log": "off"|"stderr"|"PATH",
/// "access_log_format": "text"|"json", "admin_listen": "127.0.0.1:9100"|"off",
/// "sendfile": "remote"|"always"|"never"}. Fields left out keep their defaults;
/// unknown fields and wrong types set errc::invalid_config in `ec` and name the field in `error`. Rules over the whole
/// configuration (server_config::validate) are checked when the server is constructed.
[[nodiscard]] server_config parse_server_config(std::string_view json, error_code& ec, config_error& error);

namespace detail {
struct server_state;
}

/// Serves one store over S3. Start with listen(); stop() closes the listener and every
/// connection (async_shutdown first lets requests in flight finish). Runs its own io_context on `config.io_threads`
/// threads, so it can be embedded in any program; the store must outlive the server. The server is compiled once, in
/// the library: it reaches the store through any_store (any_store::wrap, done by the constructor for any
/// servable_store).
class server {
 public:
  /// Throws std::invalid_argument when `config` is invalid.
  template <servable_store Store>
  server(Store& store, server_config config) : server(any_store::wrap(store), std::move(config)) {}
  server(std::shared_ptr<any_store> store, server_config config);
  server(const server&) = delete;
  server& operator=(const server&) = delete;
  ~server();

  /// Binds, listens and starts serving; errors from bind/listen (address in use, ...).
  void listen(error_code& ec);
  /// Throwing overload.
  void listen();
  /// Where the server listens (the actual port when config.port was 0).
  [[nodiscard]] boost::asio::ip::tcp::endpoint local_endpoint() const;
  /// Where the HTTPS listener listens (config.tls; default-constructed without it).
  [[nodiscard]] boost::asio::ip::tcp::endpoint tls_endpoint() const;
  /// Where the admin listener listens (config.admin_listen; default-constructed without it).
  [[nodiscard]] boost::asio::ip::tcp::endpoint admin_endpoint() const;
  /// Replaces the users (a configuration reload). Thread-safe: requests already authenticated
  /// go on; a removed user's next request is 403 InvalidAccessKeyId. Throws std::invalid_argument
  /// when a user lacks a key or a secret (the users in place stay).
  void set_users(std::vector<user> users);
  /// Writes out the access log's buffer and reopens its file (after logrotate moved it).
  void reopen_access_log(error_code& ec);
  /// Begins a graceful stop: closes the listeners (new connections are refused; the admin
  /// listener stays, its /ready answering 503), closes every connection that waits for a request
  /// (or is still reading its header section), and lets the requests in flight finish, each connection closing after
  /// its answer. Those still in flight after config.shutdown_grace are cut (cut_now() cuts them at once): their
  /// connections close and config.rdma is closed (its transfers abort, as at stop()); the access
  /// log gives each its status, the bytes that went, and the error "CutAtShutdown". Completion: `void()` once no
  /// connection is left, on the handler's associated executor (default: one of the server's threads); stop() then joins
  /// the threads. Thread-safe; a server that is not listening completes at once. Not cancellable: cut_now() is how to
  /// hurry it.
  template <class CompletionToken>
  auto async_shutdown(CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void()>(
        [this](auto handler) {
          auto home = boost::asio::prefer(boost::asio::get_associated_executor(handler, executor()),
                                          boost::asio::execution::outstanding_work.tracked);
          auto waiting = std::make_shared<decltype(handler)>(std::move(handler));
          start_shutdown([home, waiting] { boost::asio::post(home, [waiting] { std::move (*waiting)(); }); });
        },
        token);
  }
  /// Cuts the connections of a shutdown under way now instead of at the grace's end (a second
  /// SIGTERM). Thread-safe; does nothing before async_shutdown.
  void cut_now();
  /// Stops accepting, closes all connections and joins the threads. Idempotent.
  void stop();

 private:
  [[nodiscard]] boost::asio::any_io_executor executor() const;
  void start_shutdown(std::function<void()> drained);

  std::shared_ptr<detail::server_state> state_;
};

}  // namespace sluice::s3
