// SPDX-License-Identifier: Apache-2.0
// One HTTP exchange with retries: the request, its target and signature, reading the answer
// (into the caller's memory for a body), TLS, backoff.
// Part of the client's implementation (include/sluice/s3/client.hpp); the declarations its
// translation units share are in client_internal.hpp.
#include "client_internal.hpp"

#include <algorithm>

namespace sluice::s3::detail::client_impl {

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
    // A 404 with a body that is no S3 error (a web server's page): not an S3 endpoint.
    if (res.status == 404 && parse_ec) return client_errc::not_s3_answer;
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

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// Reports `bytes` moved to the transfer's `progress` (if any) and counts them in the attempt's
/// `progressed` (what a retry takes back).
void count_progress(transfer_progress* progress, std::uint64_t& progressed, std::uint64_t bytes) {
  if (progress != nullptr && bytes > 0) {
    progress->add(bytes);
    progressed += bytes;
  }
}

/// The idle timeout of one attempt: every read or write is given until `idle` after it starts
/// (never past the attempt's deadline), and `phase` says what a timeout then interrupted.
struct io_clock {
  beast::tcp_stream* wire = nullptr;
  steady::time_point deadline;
  std::chrono::milliseconds idle{0};
  client_errc phase = client_errc::connect_timeout;
  steady::time_point expiry;

  /// Sets the expiry for `span` from now, as `what`.
  void arm(client_errc what, std::chrono::milliseconds span) {
    phase = what;
    expiry = std::min(deadline, steady::now() + span);
    if (wire != nullptr) wire->expires_at(expiry);
  }
  /// Progress: the next read or write has `idle` again.
  void touch() { arm(phase, idle); }
  /// The error a Beast timeout stands for: the phase, unless the attempt's deadline came first.
  [[nodiscard]] error_code timeout_error() const {
    return expiry < deadline ? error_code(phase) : error_code(beast::error::timeout);
  }
};

/// Reads the body into `target` until it is full or the message ends; the bytes read. `Stream`
/// is beast::tcp_stream or tls_stream, here and below.
template <class Stream>
asio::awaitable<std::size_t> read_into(Stream& stream, beast::flat_buffer& buffer,
                                       http::response_parser<http::buffer_body>& parser, std::span<std::byte> target,
                                       transfer_progress* progress, std::uint64_t& progressed, io_clock& clock,
                                       error_code& ec) {
  std::size_t filled = 0;
  while (!parser.is_done() && filled < target.size()) {
    clock.touch();
    const std::size_t n = std::min(io_slice, target.size() - filled);
    parser.get().body().data = target.data() + filled;
    parser.get().body().size = n;
    co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    const std::size_t got = n - parser.get().body().size;
    filled += got;
    count_progress(progress, progressed, got);
    if (ec) break;
  }
  co_return filled;
}

/// Reads the rest of a body of known length straight from the socket into `target` (after the
/// bytes the header read left in `buffer`): no copy but the kernel's (over TLS, OpenSSL decrypts
/// into `target`). The bytes read.
template <class Stream>
asio::awaitable<std::size_t> read_direct(Stream& stream, beast::flat_buffer& buffer, std::span<std::byte> target,
                                         transfer_progress* progress, std::uint64_t& progressed, io_clock& clock,
                                         error_code& ec) {
  std::size_t filled = std::min(buffer.size(), target.size());
  asio::buffer_copy(asio::buffer(target.data(), filled), buffer.data());
  buffer.consume(filled);
  count_progress(progress, progressed, filled);
  while (filled < target.size()) {
    clock.touch();
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
    count_progress(progress, progressed, got);
    if (ec) break;
  }
  co_return filled;
}

/// As read_direct, but hands the bytes to `sink` (offsets from the target's start) through a
/// buffer of sink_slice bytes, small enough to stay in the core's cache between the socket's copy
/// and the sink's, instead of writing them into the target. A sink's error fails the read (`fatal`).
constexpr std::size_t sink_slice = 256 * kib;

template <class Stream>
asio::awaitable<std::size_t> read_to_sink(
    Stream& stream, beast::flat_buffer& buffer, std::size_t size,
    const std::function<error_code(std::uint64_t, std::span<const std::byte>)>& sink, transfer_progress* progress,
    std::uint64_t& progressed, io_clock& clock, error_code& ec, bool& fatal) {
  std::size_t filled = std::min(buffer.size(), size);
  if (filled > 0) {
    const auto held = buffer.data();
    std::vector<std::byte> first(filled);
    asio::buffer_copy(asio::buffer(first.data(), filled), held);
    buffer.consume(filled);
    ec = sink(0, first);
    if (ec) {
      fatal = true;
      co_return 0;
    }
    count_progress(progress, progressed, filled);
  }
  const auto slice = std::make_unique_for_overwrite<std::byte[]>(sink_slice);
  while (filled < size) {
    clock.touch();
    const std::size_t n = std::min(sink_slice, size - filled);
    // Whole slices: the sink writes whole pages (a page that a write fills in part is zeroed first).
    const std::size_t got =
        co_await asio::async_read(stream, asio::buffer(slice.get(), n), asio::redirect_error(asio::use_awaitable, ec));
    if (got > 0) {
      if (const error_code refused = sink(filled, std::span<const std::byte>(slice.get(), got))) {
        ec = refused;
        fatal = true;
        co_return filled;
      }
    }
    filled += got;
    count_progress(progress, progressed, got);
    if (ec) break;
  }
  co_return filled;
}

/// Reads the body as text, up to `limit` bytes (the rest stays unread).
template <class Stream>
asio::awaitable<void> read_text(Stream& stream, beast::flat_buffer& buffer,
                                http::response_parser<http::buffer_body>& parser, std::string& text, std::size_t limit,
                                io_clock& clock, error_code& ec) {
  std::vector<char> chunk(64 * kib);
  while (!parser.is_done() && text.size() < limit) {
    clock.touch();
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
  io_clock clock;
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

/// Opens the new connection of `conn` to `where`: resolves, connects, and for Tls starts TLS.
/// Sets r.ec (and r.fatal when a retry cannot help) on failure.
template <bool Tls>
asio::awaitable<void> open_connection(client_state& state, connection_pool::lease& conn, tcp::resolver& resolver,
                                      const address& where, attempt_result& r) {
  beast::tcp_stream& wire = conn.stream();
  const auto endpoints = co_await resolver.async_resolve(where.connect_host, state.where.port,
                                                         asio::redirect_error(asio::use_awaitable, r.ec));
  if (r.ec) {
    r.fatal = !is_connection_error(r.ec);
    co_return;
  }
  co_await wire.async_connect(endpoints, asio::redirect_error(asio::use_awaitable, r.ec));
  if (r.ec) co_return;
  state.connections_opened.fetch_add(1);
  error_code ignored;
  wire.socket().set_option(tcp::no_delay(true), ignored);
  if constexpr (Tls) {
    r.clock.phase = client_errc::handshake_timeout;  // what is left of connect_timeout
    r.ec = co_await start_tls(state, conn, where.connect_host);
    if (r.ec) r.fatal = !is_connection_error(r.ec);  // a refused certificate is not retried
  }
}

/// The request of `spec` to `target`, with its headers, signed when the client has credentials.
/// Its body is set as it is sent (send_request).
http::request<http::buffer_body> make_request(const client_state& state, const request_spec& spec,
                                              const std::string& target, const address& where) {
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
  return req;
}

/// Writes `req` with the body of `spec`, io_slice at a time (each slice counted as progress in
/// r.progressed); the write's error.
template <class Stream>
asio::awaitable<error_code> send_request(Stream& stream, http::request<http::buffer_body>& req,
                                         const request_spec& spec, attempt_result& r) {
  http::request_serializer<http::buffer_body> serializer(req);
  const std::size_t total = spec.body.size();
  std::size_t sent = 0;
  error_code write_ec;
  do {
    r.clock.touch();
    const std::size_t n = std::min(io_slice, total - sent);
    req.body().data = n > 0 ? const_cast<std::byte*>(spec.body.data() + sent) : nullptr;
    req.body().size = n;
    req.body().more = sent + n < total;
    co_await http::async_write(stream, serializer, asio::redirect_error(asio::use_awaitable, write_ec));
    if (write_ec == http::error::need_buffer) write_ec = {};
    if (write_ec) break;
    sent += n;
    count_progress(spec.progress, r.progressed, n);
  } while (!serializer.is_done());
  co_return write_ec;
}

/// Reads the answer's header into `parser` (made anew for each interim 1xx answer, up to 8 of
/// them skipped). On failure sets r.ec (the write's error, if the write failed) and r.answered.
template <class Stream>
asio::awaitable<void> read_answer_header(Stream& stream, beast::flat_buffer& buffer,
                                         std::optional<http::response_parser<http::buffer_body>>& parser,
                                         const request_spec& spec, const error_code& write_ec, attempt_result& r) {
  for (int interim = 0;; ++interim) {
    parser.emplace();
    parser->body_limit(std::numeric_limits<std::uint64_t>::max());  // not boost::none: Beast 1.74 compares it wrongly
    parser->header_limit(64 * 1024);
    if (spec.method == http::verb::head) parser->skip(true);
    error_code read_ec;
    // A request with a token is answered once the server has moved its bytes by RDMA or grant
    // (a cold object of many GiB, read at the disk's rate, takes minutes): its answer may take
    // the attempt's whole request_timeout, not idle_timeout.
    const bool by_token = std::any_of(spec.headers.begin(), spec.headers.end(),
                                      [](const auto& h) { return h.first == "x-amz-rdma-token"; });
    r.clock.arm(client_errc::answer_timeout,
                by_token ? std::chrono::duration_cast<std::chrono::milliseconds>(r.clock.deadline - steady::now())
                         : r.clock.idle);
    co_await http::async_read_header(stream, buffer, *parser, asio::redirect_error(asio::use_awaitable, read_ec));
    if (read_ec) {
      r.answered = parser->got_some();
      r.ec = write_ec ? write_ec : read_ec;
      co_return;
    }
    if (parser->get().result_int() >= 200 || interim >= 8) break;  // skip 100 Continue and friends
  }
}

/// Reads a successful answer's body into the memory `spec.choose` gives (which has seen the
/// header). Sets r.ec (and r.fatal) on failure; clears `reusable` when the connection cannot
/// serve another request and sets `complete` as the message was read to its end.
template <class Stream>
asio::awaitable<void> read_chosen_body(Stream& stream, beast::flat_buffer& buffer,
                                       http::response_parser<http::buffer_body>& parser, const request_spec& spec,
                                       attempt_result& r, bool& reusable, bool& complete) {
  std::span<std::byte> into;
  bool longer_ok = false;
  const error_code verdict = spec.choose(r.res, into, longer_ok);
  if (verdict) {
    r.ec = verdict;
    r.fatal = true;
    co_return;
  }
  const auto announced = parser.content_length();
  if (announced && !parser.chunked()) {
    // The common case: a known length, read from the socket straight into the target.
    if (*announced < into.size() || (*announced > into.size() && !longer_ok)) {
      r.ec = sluice::errc::protocol_violation;  // not the length the header promised
      r.fatal = true;
      co_return;
    }
    if (spec.sink != nullptr && !into.empty()) {
      r.res.body_bytes = co_await read_to_sink(stream, buffer, into.size(), *spec.sink, spec.progress, r.progressed,
                                               r.clock, r.ec, r.fatal);
    } else {
      r.res.body_bytes = co_await read_direct(stream, buffer, into, spec.progress, r.progressed, r.clock, r.ec);
    }
    if (r.ec) co_return;
    complete = *announced == into.size();
    reusable = reusable && complete;
    co_return;
  }
  // A body of unknown length (chunked) for a sink: read whole into memory of its own first (rare:
  // an S3 GET says its length).
  std::vector<std::byte> held(spec.sink != nullptr ? into.size() : 0);
  if (spec.sink != nullptr) into = held;
  const std::size_t filled =
      co_await read_into(stream, buffer, parser, into, spec.progress, r.progressed, r.clock, r.ec);
  r.res.body_bytes = filled;
  if (r.ec) co_return;
  if (spec.sink != nullptr && filled > 0) {
    if (const error_code refused = (*spec.sink)(0, std::span<const std::byte>(held.data(), filled))) {
      r.ec = refused;
      r.fatal = true;
      co_return;
    }
  }
  if (!parser.is_done()) {
    if (!longer_ok) {
      r.ec = sluice::errc::protocol_violation;  // a body longer than its header announced
      r.fatal = true;
      co_return;
    }
    reusable = false;
  } else if (filled != into.size()) {
    r.ec = sluice::errc::protocol_violation;  // shorter than announced
    r.fatal = true;
    co_return;
  }
  complete = parser.is_done();
}

/// Reads the answer's body, whose header is in r.res: as text (an error's, or when the request
/// has no chooser), or where `spec.choose` says. Sets r.ec (and r.fatal) on failure; `reusable`
/// and `complete` as read_chosen_body.
template <class Stream>
asio::awaitable<void> read_answer_body(Stream& stream, beast::flat_buffer& buffer,
                                       http::response_parser<http::buffer_body>& parser, const request_spec& spec,
                                       attempt_result& r, bool& reusable, bool& complete) {
  if (r.res.status < 300 && spec.choose && parser.is_done()) {
    // No body (an RDMA answer, or an empty object): the chooser still checks the header.
    std::span<std::byte> into;
    bool longer_ok = false;
    r.ec = spec.choose(r.res, into, longer_ok);
    if (!r.ec && !into.empty()) r.ec = sluice::errc::protocol_violation;  // bytes promised, none sent
    if (r.ec) r.fatal = true;
  } else if (!parser.is_done()) {
    if (r.res.status >= 300 || !spec.choose) {
      co_await read_text(stream, buffer, parser, r.res.body, r.res.status >= 300 ? max_error_body : max_text_body,
                         r.clock, r.ec);
      if (r.ec) co_return;
      complete = parser.is_done();  // when not, too long: the rest goes with the connection
    } else {
      co_await read_chosen_body(stream, buffer, parser, spec, r, reusable, complete);
    }
  }
}

/// Sends the request once and receives the answer, within request_timeout: over the
/// beast::tcp_stream (Tls false), or over a TLS session on it.
template <bool Tls>
asio::awaitable<void> attempt_once(const op_context& op, const request_spec& spec, const std::string& target,
                                   const address& where, attempt_result& r) {
  client_state& state = *op.state;
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  const auto deadline = steady::now() + spec.timeout.value_or(state.config.request_timeout);
  r.clock.deadline = deadline;
  r.clock.idle = state.config.idle_timeout;

  connection_pool::lease conn = co_await state.pool.acquire(op, where.pool_key, deadline, r.ec);
  if (r.ec) {
    r.fatal = true;
    co_return;
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
    co_return;
  }
  wire.expires_at(deadline);  // the TLS handshake and every TLS read and write included
  r.clock.wire = &wire;
  if (!r.reused) {
    r.clock.arm(client_errc::connect_timeout, state.config.connect_timeout);
    co_await open_connection<Tls>(state, conn, resolver, where, r);
    if (r.ec) co_return;
  }
  auto& stream = [&]() -> auto& {
    if constexpr (Tls) {
      return *conn.tls();
    } else {
      return wire;
    }
  }
  ();

  r.clock.arm(client_errc::send_timeout, r.clock.idle);
  http::request<http::buffer_body> req = make_request(state, spec, target, where);
  state.requests.fetch_add(1);
  const error_code write_ec = co_await send_request(stream, req, spec, r);
  if (write_ec == beast::error::timeout || write_ec == asio::error::operation_aborted) {
    r.ec = write_ec;
    co_return;
  }

  // The answer; after a failed write too, since a server may answer (a 403, say) and close
  // before reading the whole body.
  beast::flat_buffer buffer;
  buffer.reserve(16 * kib);  // Beast reads at most the free capacity (at least 512 bytes) at a time
  std::optional<http::response_parser<http::buffer_body>> parser;
  co_await read_answer_header(stream, buffer, parser, spec, write_ec, r);
  if (r.ec) co_return;
  r.answered = true;
  r.res.status = parser->get().result_int();
  r.res.header = parser->get().base();
  bool reusable = !write_ec;
  bool complete = parser->is_done();
  r.clock.arm(client_errc::body_timeout, r.clock.idle);
  co_await read_answer_body(stream, buffer, *parser, spec, r, reusable, complete);
  if (r.ec) co_return;
  bool drained = buffer.size() == 0;
  if constexpr (Tls) drained = drained && nothing_buffered(stream);
  if (reusable && complete && parser->get().keep_alive() && drained) conn.give_back(true);
}

/// One attempt (attempt_once), with a Beast timeout told apart: the phase whose connect or idle
/// timeout ran out (client_errc), or the attempt's deadline.
template <bool Tls>
asio::awaitable<attempt_result> attempt(const op_context& op, const request_spec& spec, const std::string& target,
                                        const address& where) {
  attempt_result r;
  co_await attempt_once<Tls>(op, spec, target, where, r);
  if (r.ec == beast::error::timeout) r.ec = r.clock.timeout_error();
  r.clock.wire = nullptr;  // the lease and its stream are gone
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

}  // namespace sluice::s3::detail::client_impl
