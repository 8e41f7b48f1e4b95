// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/client.hpp: the public class. The requests are in the
// client's other translation units (client_connection, client_exchange, client_get, client_put,
// client_copy, client_ops .cpp), which share the declarations of client_internal.hpp.
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
#include "client_internal.hpp"

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

class client_category_impl final : public boost::system::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "s3-client"; }
  [[nodiscard]] std::string message(int value) const override {
    switch (static_cast<client_errc>(value)) {
      case client_errc::connect_timeout: return "timed out connecting";
      case client_errc::handshake_timeout: return "timed out in the TLS handshake";
      case client_errc::send_timeout: return "timed out sending the request (no progress)";
      case client_errc::answer_timeout: return "timed out waiting for the answer";
      case client_errc::body_timeout: return "timed out reading the answer's body (no progress)";
      case client_errc::not_s3_answer: return "the endpoint answered 404 without an S3 error: is it an S3 server?";
    }
    return "unknown s3-client error";
  }
  [[nodiscard]] boost::system::error_condition default_error_condition(int value) const noexcept override {
    if (static_cast<client_errc>(value) == client_errc::not_s3_answer) return {value, *this};
    return make_error_condition(boost::system::errc::timed_out);
  }
};

}  // namespace

const boost::system::error_category& tls_verify_category() noexcept {
  static const tls_verify_category_impl category;
  return category;
}

const boost::system::error_category& client_category() noexcept {
  static const client_category_impl category;
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
  if (connect_timeout.count() <= 0) return config_error{"connect_timeout", "must be positive"};
  if (idle_timeout.count() <= 0) return config_error{"idle_timeout", "must be positive"};
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

// Each operation's op_context is made before spawn() takes the handler (the order in which a
// call's arguments are evaluated is unspecified): it carries the handler's cancellation group.
void client::start_head_object(std::string bucket, std::string key, detail::client_handler<object_info> handler) {
  using namespace detail::client_impl;
  op_context op = make_op(state_, handler.cancellation());
  spawn(state_, head_object_op(std::move(op), std::move(bucket), std::move(key)), std::move(handler));
}

// GET and PUT from memory: one path each, negotiate → register → move → complete, over the parts
// of include/sluice/s3/path.hpp; the transport moves the bytes with start_read_object and
// start_write_object (the request machinery of client_get.cpp and client_put.cpp).
namespace {

/// The path of one call: built per call (its transport carries the call's options) and kept
/// alive by its completion.
template <transfer_via Via>
using object_path = sluice::path<negotiator, token_registrar, object_transport<Via>>;

template <transfer_via Via>
void get_by_path(client& c, std::string bucket, std::string key, region destination, get_options options,
                 detail::client_handler<std::uint64_t> handler) {
  negotiator_options agreed;
  agreed.never_head = true;  // the first GET answers what a HEAD would: a small object is one request
  agreed.up_to = destination.size;
  agreed.if_match = options.if_match;
  const byte_range range = options.range;
  auto p = std::make_shared<object_path<Via>>(
      c.get_executor(), negotiator(c, std::move(agreed)), token_registrar(Via),
      object_transport<Via>(c, std::move(options), put_options{}, handler.cancellation()));
  object_path<Via>& running = *p;
  running.async_get(object_ref{std::move(bucket), std::move(key)}, destination, range,
                    [keep = std::move(p), h = std::move(handler)](error_code ec, const transfer_result& r) mutable {
                      keep.reset();
                      h(ec, ec ? 0 : r.bytes);
                    });
}

template <transfer_via Via>
void put_by_path(client& c, std::string bucket, std::string key, const_region source, put_options options,
                 detail::client_handler<std::string> handler) {
  auto p = std::make_shared<object_path<Via>>(
      c.get_executor(), negotiator(c), token_registrar(Via),
      object_transport<Via>(c, get_options{}, std::move(options), handler.cancellation()));
  object_path<Via>& running = *p;
  running.async_put(object_ref{std::move(bucket), std::move(key)}, source,
                    [keep = std::move(p), h = std::move(handler)](error_code ec, transfer_result r) mutable {
                      keep.reset();
                      h(ec, ec ? std::string{} : std::move(r.version));
                    });
}

/// Calls `f` with transfer_via `via` as a compile-time constant (the transports are templates on it).
template <class F>
void with_via(transfer_via via, F&& f) {
  switch (via) {
    case transfer_via::http: return f(std::integral_constant<transfer_via, transfer_via::http>{});
    case transfer_via::rdma: return f(std::integral_constant<transfer_via, transfer_via::rdma>{});
    case transfer_via::automatic: break;
  }
  f(std::integral_constant<transfer_via, transfer_via::automatic>{});
}

}  // namespace

void client::start_get_object(std::string bucket, std::string key, region destination, get_options options,
                              detail::client_handler<std::uint64_t> handler) {
  with_via(options.via, [&](auto via) {
    get_by_path<decltype(via)::value>(*this, std::move(bucket), std::move(key), destination, std::move(options),
                                      std::move(handler));
  });
}

void client::start_put_object(std::string bucket, std::string key, const_region source, put_options options,
                              detail::client_handler<std::string> handler) {
  with_via(options.via, [&](auto via) {
    put_by_path<decltype(via)::value>(*this, std::move(bucket), std::move(key), source, std::move(options),
                                      std::move(handler));
  });
}

void client::start_read_object(std::string bucket, std::string key, region destination, get_options options,
                               detail::client_handler<std::uint64_t> handler) {
  using namespace detail::client_impl;
  op_context op = make_op(state_, handler.cancellation());
  spawn(state_, get_object_op(std::move(op), std::move(bucket), std::move(key), destination, std::move(options)),
        std::move(handler));
}

void client::start_write_object(std::string bucket, std::string key, const_region source, put_options options,
                                detail::client_handler<std::string> handler) {
  using namespace detail::client_impl;
  op_context op = make_op(state_, handler.cancellation());
  spawn(state_, put_region_op(std::move(op), std::move(bucket), std::move(key), source, std::move(options)),
        std::move(handler));
}

void client::start_put_source(std::string bucket, std::string key, std::shared_ptr<upload_source> source,
                              put_options options, detail::client_handler<std::string> handler) {
  using namespace detail::client_impl;
  op_context op = make_op(state_, handler.cancellation());
  spawn(state_, put_source_op(std::move(op), std::move(bucket), std::move(key), std::move(source), std::move(options)),
        std::move(handler));
}

void client::start_put_file(std::string bucket, std::string key, std::filesystem::path file, put_options options,
                            detail::client_handler<std::string> handler) {
  using namespace detail::client_impl;
  op_context op = make_op(state_, handler.cancellation());
  spawn(state_, put_file_op(std::move(op), std::move(bucket), std::move(key), std::move(file), std::move(options)),
        std::move(handler));
}

void client::start_put_stream(std::string bucket, std::string key, int fd, put_options options,
                              detail::client_handler<std::string> handler) {
  using namespace detail::client_impl;
  op_context op = make_op(state_, handler.cancellation());
  spawn(state_, put_stream_op(std::move(op), std::move(bucket), std::move(key), fd, std::move(options)),
        std::move(handler));
}

void client::start_copy_object(object_ref from, object_ref to, copy_options options,
                               detail::client_handler<std::string> handler) {
  using namespace detail::client_impl;
  op_context op = make_op(state_, handler.cancellation());
  spawn(state_, copy_object_op(std::move(op), std::move(from), std::move(to), std::move(options)), std::move(handler));
}

void client::start_delete_object(std::string bucket, std::string key, detail::client_handler<> handler) {
  using namespace detail::client_impl;
  op_context op = make_op(state_, handler.cancellation());
  spawn(state_, delete_object_op(std::move(op), std::move(bucket), std::move(key)), std::move(handler));
}

void client::start_list_objects(std::string bucket, list_options options, bool all,
                                detail::client_handler<list_objects_result> handler) {
  using namespace detail::client_impl;
  op_context op = make_op(state_, handler.cancellation());
  spawn(state_, list_objects_op(std::move(op), std::move(bucket), std::move(options), all), std::move(handler));
}

void client::start_bucket_request(std::string bucket, bool create, detail::client_handler<> handler) {
  using namespace detail::client_impl;
  op_context op = make_op(state_, handler.cancellation());
  spawn(state_, bucket_op(std::move(op), std::move(bucket), create), std::move(handler));
}

void client::start_list_buckets(detail::client_handler<std::vector<bucket_info>> handler) {
  using namespace detail::client_impl;
  op_context op = make_op(state_, handler.cancellation());
  spawn(state_, list_buckets_op(std::move(op)), std::move(handler));
}

void client::start_list_uploads(std::string bucket, std::string prefix,
                                detail::client_handler<std::vector<upload_info>> handler) {
  using namespace detail::client_impl;
  op_context op = make_op(state_, handler.cancellation());
  spawn(state_, list_uploads_op(std::move(op), std::move(bucket), std::move(prefix)), std::move(handler));
}

void client::start_abort_upload(std::string bucket, std::string key, std::string upload_id,
                                detail::client_handler<> handler) {
  using namespace detail::client_impl;
  op_context op = make_op(state_, handler.cancellation());
  spawn(state_, abort_upload_op(std::move(op), std::move(bucket), std::move(key), std::move(upload_id)),
        std::move(handler));
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

std::string client::put_object(const std::string& bucket, const std::string& key, const_region source,
                               put_options options, error_code& ec) {
  return sluice::detail::run_blocking<std::string>(
      [&](auto handler) { async_put_object(bucket, key, source, std::move(options), std::move(handler)); }, ec);
}

std::string client::put_object(const std::string& bucket, const std::string& key, const_region source,
                               put_options options) {
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

std::string client::put_stream(const std::string& bucket, const std::string& key, int fd, put_options options,
                               error_code& ec) {
  return sluice::detail::run_blocking<std::string>(
      [&](auto handler) { async_put_stream(bucket, key, fd, std::move(options), std::move(handler)); }, ec);
}

std::string client::copy_object(const std::string& src_bucket, const std::string& src_key,
                                const std::string& dst_bucket, const std::string& dst_key, copy_options options,
                                error_code& ec) {
  return sluice::detail::run_blocking<std::string>(
      [&](auto handler) {
        async_copy_object(src_bucket, src_key, dst_bucket, dst_key, std::move(options), std::move(handler));
      },
      ec);
}

std::string client::copy_object(const std::string& src_bucket, const std::string& src_key,
                                const std::string& dst_bucket, const std::string& dst_key, copy_options options) {
  error_code ec;
  std::string etag = copy_object(src_bucket, src_key, dst_bucket, dst_key, std::move(options), ec);
  sluice::detail::throw_on_error(ec, "sluice s3 copy_object");
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

std::vector<upload_info> client::list_multipart_uploads(const std::string& bucket, const std::string& prefix,
                                                        error_code& ec) {
  return sluice::detail::run_blocking<std::vector<upload_info>>(
      [&](auto handler) { async_list_multipart_uploads(bucket, prefix, std::move(handler)); }, ec);
}

std::vector<upload_info> client::list_multipart_uploads(const std::string& bucket, const std::string& prefix) {
  error_code ec;
  std::vector<upload_info> uploads = list_multipart_uploads(bucket, prefix, ec);
  sluice::detail::throw_on_error(ec, "sluice s3 list_multipart_uploads");
  return uploads;
}

void client::abort_multipart_upload(const std::string& bucket, const std::string& key, const std::string& upload_id,
                                    error_code& ec) {
  run_blocking_void([&](auto handler) { async_abort_multipart_upload(bucket, key, upload_id, std::move(handler)); },
                    ec);
}

void client::abort_multipart_upload(const std::string& bucket, const std::string& key, const std::string& upload_id) {
  error_code ec;
  abort_multipart_upload(bucket, key, upload_id, ec);
  sluice::detail::throw_on_error(ec, "sluice s3 abort_multipart_upload");
}

}  // namespace sluice::s3
