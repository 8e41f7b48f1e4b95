// SPDX-License-Identifier: Apache-2.0
// One client connection of the server: the connection class and its members' declarations.
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#pragma once

#include "../tls_seal.hpp"
#include "answer_head.hpp"
#include "get_plan.hpp"
#include "request_arena.hpp"

namespace sluice::s3::detail {

/// One connection: reads requests, routes, authenticates, runs the operation, answers.
/// One client connection. `Stream` is beast::tcp_stream (HTTP) or an ssl::stream over one
/// (HTTPS: the TLS handshake runs first, under read_timeout).
template <class Stream>
class connection : public std::enable_shared_from_this<connection<Stream>> {
 public:
  static constexpr bool tls = !std::is_same_v<Stream, beast::tcp_stream>;
  connection(std::shared_ptr<server_state> state, Stream stream, asio::ip::address peer)
      : state_(std::move(state)), stream_(std::move(stream)), peer_(std::move(peer)) {}

  asio::awaitable<void> run();

 private:
  // A request's header fields live in the connection's request_arena (reset per request).
  using fields_allocator = arena_allocator<char>;
  using request_fields = http::basic_fields<fields_allocator>;
  using header_parser = http::request_parser<http::empty_body, fields_allocator>;
  template <class Body>
  using request_body_parser = http::request_parser<Body, fields_allocator>;
  using string_response = http::response<http::string_body>;

  // Per-request facts every operation needs.
  struct request {
    header_parser* parser = nullptr;
    route where;
    std::string id;
    std::string user;  // access key id of the caller
    std::optional<verified> auth;
    bool head = false;
    bool keep_alive = true;
    bool body_pending = false;  // a body was announced and not (fully) read
    std::string rdma_reply;     // x-amz-rdma-reply of the answer: "200", "206", "501" or none
    // For the access log and the metrics (record()).
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    std::chrono::system_clock::time_point time = std::chrono::system_clock::now();
    std::string_view error;            // S3 error code answered (static text); empty on success
    std::uint64_t bytes_received = 0;  // payload bytes read over HTTP
    std::uint64_t bytes_direct = 0;    // payload bytes moved by RDMA or a grant
    std::string direct_path;           // "rdma:<provider>" or "grant:<kind>" when bytes_direct moved
    std::optional<rdma_decline_reason> decline;
    bool short_answer = false;  // the answer's write failed: it did not leave whole
    bool recorded = false;
    // The header is the parser's until a body is read: reading one moves the parser (and the
    // header it holds) away, so keep_header() copies it first. A GET copies nothing.
    std::optional<http::request_header<request_fields>> kept;
    [[nodiscard]] const http::request_header<request_fields>& msg() const {
      return kept ? *kept : parser->get().base();
    }
    void keep_header() {
      if (!kept) kept.emplace(parser->get().base());
    }
    [[nodiscard]] std::string_view header(std::string_view name) const {
      auto it = msg().find(beast::string_view(name.data(), name.size()));
      if (it == msg().end()) return {};
      return {it->value().data(), it->value().size()};
    }
    [[nodiscard]] std::string resource() const {
      return "/" + where.bucket + (where.key.empty() ? "" : "/" + where.key);
    }
  };
  static rdma_requester requester(const request& req) { return {req.user}; }
  // Counts the answer to `req` in the metrics and writes its access log line, once: at every
  // place an answer leaves (send(), the streamed GET body) and, for a request that got none (the
  // client went away), when handle() ends (status 0).
  void record(request& req, unsigned status, std::uint64_t bytes_sent);
  struct record_on_exit {
    connection* self;
    request* req;
    record_on_exit(connection* s, request* r) : self(s), req(r) {}
    record_on_exit(const record_on_exit&) = delete;
    record_on_exit& operator=(const record_on_exit&) = delete;
    ~record_on_exit() { self->record(*req, 0, 0); }
  };

  struct lend_route {  // gives the request's route back to the connection when the request ends
    connection* self;
    request* req;
    lend_route(connection* s, request* r) : self(s), req(r) {}
    lend_route(const lend_route&) = delete;
    lend_route& operator=(const lend_route&) = delete;
    ~lend_route() {
      self->keep_spare(std::move(req->where));
      if (req->auth) self->keep_spare(std::move(*req->auth));
    }
  };
  // Keeps what a request borrowed for the next one when it is of an ordinary size: a connection
  // that once sent a header section full of parameters or fields does not hold that memory while
  // it idles (max_connections of them could).
  void keep_spare(route used) {
    std::size_t bytes = used.bucket.capacity() + used.key.capacity() + used.query.capacity() * sizeof(used.query[0]);
    for (const auto& [name, value] : used.query) bytes += name.capacity() + value.capacity();
    spare_route_ = bytes <= spare_limit_bytes ? std::move(used) : route{};
  }
  void keep_spare(verified used) {
    std::size_t bytes = used.access_key_id.capacity() + used.scope.capacity() + used.amz_date.capacity() +
                        used.payload_hash.capacity() + used.seed_signature.capacity() +
                        used.signed_headers.capacity() * sizeof(used.signed_headers[0]);
    for (const auto& name : used.signed_headers) bytes += name.capacity();
    if (bytes <= spare_limit_bytes)
      spare_auth_ = std::move(used);
    else
      spare_auth_.reset();
  }
  void keep_spare(std::vector<std::pair<std::string_view, std::string_view>> used) {
    used.clear();
    spare_views_ = used.capacity() * sizeof(used[0]) <= spare_limit_bytes ? std::move(used) : decltype(used){};
  }
  static constexpr std::size_t spare_limit_bytes = 4096;

  // Reads a request's header section into `parser` (errors as http::async_read_header's).
  asio::awaitable<void> read_header(header_parser& parser, error_code& ec);
  asio::awaitable<bool> handle(header_parser& parser);
  asio::awaitable<bool> dispatch(request& req);

  // Responses.
  void common_headers(request& req, http::fields& fields);
  asio::awaitable<bool> send(request& req, string_response res);
  asio::awaitable<bool> send_xml(request& req, std::string body, http::status status = http::status::ok);
  asio::awaitable<bool> send_empty(request& req, http::status status);
  asio::awaitable<bool> send_error(request& req, s3::errc code, std::string message = {});

  // Bodies.
  asio::awaitable<bool> continue_if_expected(request& req);
  asio::awaitable<std::optional<std::string>> read_small_body(request& req, std::size_t limit);
  template <class Writer>
  asio::awaitable<std::optional<object_attributes>> receive_object(request& req, Writer& writer, std::uint64_t limit);
  // PutObject / UploadPart with x-amz-rdma-token: the payload is RMA-read from the client.
  template <class Writer>
  asio::awaitable<std::optional<object_attributes>> receive_via_rdma(request& req, Writer& writer, std::uint64_t limit);
  // Either, as the request says.
  template <class Writer>
  asio::awaitable<std::optional<object_attributes>> receive_payload(request& req, Writer& writer, std::uint64_t limit) {
    if (req.header("x-amz-rdma-token").empty()) co_return co_await receive_object(req, writer, limit);
    co_return co_await receive_via_rdma(req, writer, limit);
  }
  // What to do with a request's token: use it (`token` filled in), decline it, or reject it.
  enum class token_verdict { accept, decline, reject };
  token_verdict check_token(request& req, rdma_op op, std::uint64_t length, rdma_token& token, std::string& why);

  // Operations.
  asio::awaitable<bool> list_buckets(request& req);
  asio::awaitable<bool> create_bucket(request& req);
  asio::awaitable<bool> bucket_only(request& req);
  asio::awaitable<bool> list_objects(request& req);
  asio::awaitable<bool> delete_objects(request& req);
  asio::awaitable<bool> put_object(request& req);
  // A new version of `object` (`size` bytes) is published: the RDMA planes that keep registrations
  // of store mappings hear of it (register on write), when one wants a version that large.
  asio::awaitable<void> announce(const object_ref& object, std::uint64_t size);
  asio::awaitable<bool> copy_object(request& req);
  // `speculate`: a gateway's cached copy may be sent into a token's memory while its upstream is
  // asked whether it is current (false: the retry after it was not).
  asio::awaitable<bool> get_object(request& req, bool speculate = true);
  asio::awaitable<bool> delete_object(request& req);
  asio::awaitable<bool> multipart(request& req);
  asio::awaitable<bool> create_multipart_upload(request& req);
  asio::awaitable<bool> upload_part_copy(request& req);
  asio::awaitable<bool> object_tagging(request& req);
  asio::awaitable<bool> bucket_tagging(request& req);
  // Get/PutObjectAcl and Get/PutBucketAcl: the owner's FULL_CONTROL is the only ACL there is.
  asio::awaitable<bool> acl(request& req);
  asio::awaitable<bool> object_attributes_of(request& req);
  // The tag set of a PutObjectTagging or PutBucketTagging body (read here), checked against S3's
  // limits; nullopt with the error to answer in `failure`.
  asio::awaitable<std::optional<std::map<std::string, std::string>>> read_tag_set(request& req, answer_error& failure);

  // Runs `work` (a store call that may wait for the disk) on the blocking pool, then resumes
  // on this connection's loop: network threads never wait for fsync.
  template <class Work>
  asio::awaitable<std::invoke_result_t<Work>> offload(Work work) {
    co_return co_await offload_to(state_->blocking, std::move(work));
  }
  // A store call that answers from memory or the page cache runs in place; a remote store's call
  // may wait for its upstream, so it is offloaded.
  template <class Work>
  asio::awaitable<std::invoke_result_t<Work>> store_call(Work work) {
    if (state_->store->remote()) co_return co_await offload(std::move(work));
    co_return work();
  }
  // Awaits bytes [0, end) of a mapping still being filled (a gateway's miss): no thread waits,
  // the fill's answer resumes this coroutine on its own executor; `ec` as the fill's.
  template <class Mapping>
  asio::awaitable<void> await_bytes(Mapping& mapping, std::uint64_t end, error_code& ec) {
    ec = {};
    if (mapping.ready(end)) co_return;
    ec = co_await await_done(
        [&](std::function<void(error_code)> done) { mapping.async_wait_until(end, std::move(done)); });
  }
  // The store's map_streaming (a GET) or describe (`head`: a HEAD) by its asynchronous form
  // (async_mapping_store): its blocking calls run as jobs on the blocking pool, no thread waits
  // while it waits for another request's fetch of the object, and this coroutine resumes on its
  // own executor; `ec` as the call's.
  asio::awaitable<any_mapping> await_mapping(const object_ref& object, bool head, error_code& ec) {
    const auto kind = head ? any_store::async_map_kind::describe : any_store::async_map_kind::streaming;
    // The jobs hold no server state (one could become its last owner on a pool thread).
    const blocking_runner run = [weak = std::weak_ptr<server_state>(state_)](std::function<void()> job) {
      if (const auto state = weak.lock()) asio::post(state->blocking, std::move(job));
    };
    auto into_ec = asio::redirect_error(asio::use_awaitable, ec);
    co_return co_await asio::async_initiate<decltype(into_ec), void(error_code, any_mapping)>(
        [&](auto handler) {
          auto waiting = std::make_shared<decltype(handler)>(std::move(handler));
          state_->store->async_map(object, kind, run, [waiting](error_code e, any_mapping mapped) {
            const auto home = asio::get_associated_executor(*waiting);
            asio::dispatch(home, [waiting, e, held = std::make_shared<any_mapping>(std::move(mapped))] {
              std::move (*waiting)(e, std::move(*held));
            });
          });
        },
        into_ec);
  }
  // As offload, on `pool`. A coroutine spawned on the pool runs `work` there, and awaiting it
  // resumes this one on its own executor. (`co_await asio::post(pool, use_awaitable)` would not
  // move it: the completion is dispatched back to the coroutine's executor, so `work` would run
  // on a network thread.)
  template <class Work>
  asio::awaitable<std::invoke_result_t<Work>> offload_to(asio::thread_pool& pool, Work work) {
    using result_type = std::invoke_result_t<Work>;
    co_return co_await asio::co_spawn(
        pool.get_executor(), [&work]() -> asio::awaitable<result_type> { co_return work(); }, asio::use_awaitable);
  }

  // The plane writes `source` into the token's memory (a GET) or reads `length` bytes of it into
  // `sink` (a PUT), by its asynchronous form: what may block (posts that wait for a full transmit
  // queue, the sink) runs on the RDMA pool, and no thread waits for the bytes (a plane without an
  // asynchronous form takes a pool thread). This coroutine resumes on its own executor.
  asio::awaitable<error_code> rdma_write(const rdma_requester& who, const rdma_token& token,
                                         const rdma_source& source) {
    co_return co_await await_done([&](std::function<void(error_code)> done) {
      state_->config.rdma->async_write_from(who, token, source, state_->rdma.get_executor(), std::move(done));
    });
  }
  asio::awaitable<error_code> rdma_read(const rdma_requester& who, const rdma_token& token, std::uint64_t length,
                                        const rdma_sink& sink) {
    co_return co_await await_done([&](std::function<void(error_code)> done) {
      state_->config.rdma->async_read(who, token, length, sink, state_->rdma.get_executor(), std::move(done));
    });
  }
  // Runs `start(done)`, an operation that calls `done` once, on any thread, and resumes this
  // coroutine on its own executor with the error it was called with.
  template <class Start>
  asio::awaitable<error_code> await_done(Start start) {
    error_code moved;
    auto into_moved = asio::redirect_error(asio::use_awaitable, moved);
    co_await asio::async_initiate<decltype(into_moved), void(error_code)>(
        [&](auto handler) {
          auto waiting = std::make_shared<decltype(handler)>(std::move(handler));
          start([waiting](error_code ec) {
            const auto home = asio::get_associated_executor(*waiting);
            asio::dispatch(home, [waiting, ec] { std::move (*waiting)(ec); });
          });
        },
        into_moved);
    co_return moved;
  }

  // The upstream's answer to whether a speculatively mapped copy (map_unconfirmed) is current,
  // asked on the blocking pool while the answer's bytes move. The job owns what it reads (the
  // mapping, the object's name), so a request that ends first does not wait for it.
  struct confirmation {
    explicit confirmation(const asio::any_io_executor& here) : wake(here) {}
    asio::steady_timer wake;  // cancelled on this connection's loop when the answer is in
    bool done = false;
    bool current = false;
  };
  template <class Mapping>
  asio::awaitable<std::shared_ptr<confirmation>> start_confirmation(object_ref object,
                                                                    std::shared_ptr<const Mapping> mapping) {
    const asio::any_io_executor here = co_await asio::this_coro::executor;
    auto asked = std::make_shared<confirmation>(here);
    // The store outlives the blocking pool (server::stop joins it), and holding the server's state
    // here could make this job its last owner.
    asio::post(state_->blocking,
               [store = state_->store, object = std::move(object), mapping = std::move(mapping), asked, here] {
                 bool current = false;
                 try {
                   current = store->confirm(object, *mapping);
                 } catch (...) {
                   // not confirmed: the request is answered from a confirmed version, or not at all
                 }
                 asio::post(here, [asked, current] {
                   asked->done = true;
                   asked->current = current;
                   asked->wake.cancel();
                 });
               });
    co_return asked;
  }
  static asio::awaitable<bool> confirmed(confirmation& asked) {
    while (!asked.done) {
      asked.wake.expires_at(asio::steady_timer::time_point::max());
      error_code cancelled;
      co_await asked.wake.async_wait(asio::redirect_error(asio::use_awaitable, cancelled));
    }
    co_return asked.current;
  }

  // GetObject's parts (get_object.cpp): the request's text for plan_get; the answer again from a
  // confirmed version (a copy the upstream did not confirm); an answer without the object's
  // bytes (an error, 304, 416); the bytes into a token's memory (nullopt: the plane declined,
  // the body goes over HTTP); the body over HTTP when it does not go with its head.
  static get_request get_request_of(const request& req);
  asio::awaitable<bool> retry_get(request& req);
  asio::awaitable<bool> send_refusal(request& req, const get_plan& plan, const object_info& info);
  asio::awaitable<std::optional<bool>> send_by_token(request& req, const get_answer& answer, const rdma_token& token,
                                                     const std::shared_ptr<const any_mapping>& mapping,
                                                     std::shared_ptr<confirmation>& asked);
  asio::awaitable<bool> send_body(request& req, const get_answer& answer, const any_mapping& mapping, body_route route,
                                  std::string_view head, std::shared_ptr<confirmation>& asked, bool keep);

  bool owns(const request& req, std::string_view bucket) const;
  object_attributes attributes_from(const request& req) const;
  // The tags of x-amz-tagging (none when absent), or nullopt with S3's message in `why`.
  static std::optional<std::map<std::string, std::string>> header_tags(const request& req, std::string& why);
  // Whether CopyObject's and UploadPartCopy's x-amz-copy-source-if-* conditions hold for `source`.
  static bool copy_source_allows(const request& req, const object_info& source);
  // Refuses a conditional write early, before its payload moves, when the object already fails
  // `precondition` (the store checks again as it publishes): the error to answer, if any.
  asio::awaitable<std::optional<s3::errc>> early_precondition_failure(const request& req,
                                                                      const write_precondition& precondition);

  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }
  // Whether the peer runs on this host: a loopback address, or the address it reached us at
  // (peer_ has IPv4-mapped IPv6 as IPv4 already). Asked once per connection.
  bool peer_on_this_host() {
    if (!peer_on_this_host_) {
      error_code ignored;
      auto local = lowest().socket().local_endpoint(ignored).address();
      if (local.is_v6() && local.to_v6().is_v4_mapped())
        local = asio::ip::make_address_v4(asio::ip::v4_mapped, local.to_v6());
      peer_on_this_host_ = peer_.is_loopback() || peer_ == local;
    }
    return *peer_on_this_host_;
  }
  // Sends `length` bytes from `position` of the file `fd` to the peer with sendfile(2), which
  // hands the file's pages to TCP instead of copying them into the socket's buffer: the plain-HTTP
  // body of an object the store keeps in a file. A peer that takes nothing for read_timeout ends it.
  asio::awaitable<error_code> send_file(int fd, std::uint64_t position, std::uint64_t length);
  // HTTPS: sends `prefix` (the answer's head, or nothing) and `length` bytes from `body` as
  // full TLS records sealed in batches of up to 256 KiB, one write each (tls_sealer). A peer that
  // takes nothing for read_timeout ends it.
  asio::awaitable<error_code> send_sealed(std::string_view prefix, const std::byte* body, std::uint64_t length);

  std::shared_ptr<server_state> state_;
  Stream stream_;
  // On the connection's loop: whether it has no request yet (it waits for one, or for the rest of
  // its header section: a shutdown closes it then), and whether the server cut it (its request in
  // flight is logged with cut_error).
  bool idle_ = false;
  bool cut_ = false;
  beast::flat_buffer buffer_;
  // Request bodies are received into this, allocated at the connection's first body and reused
  // by every later one (fresh memory costs a page fault per 4 KiB on first touch).
  static constexpr std::size_t body_buffer_bytes = 256 * kib;
  std::unique_ptr<std::byte[]> body_buffer_;
  asio::ip::address peer_;  // counted in state_->per_address while the connection lives
  std::optional<bool> peer_on_this_host_;
  // Storage each request borrows and gives back, so that a steady stream of requests allocates
  // neither: the route (its strings) and the header list verify() reads.
  route spare_route_;
  std::optional<verified> spare_auth_;  // what a SigV4 request's verify() fills
  std::vector<std::pair<std::string_view, std::string_view>> spare_views_;
  // The head of a GET's or HEAD's answer, written into the same buffer each time.
  answer_head head_;
  // Each request's header fields (header_parser), reset before the next request's first byte.
  request_arena arena_;
  // HTTPS: the records of a large body, sealed in batches (send_sealed).
  tls_sealer sealer_;
};

/// RFC 9112 §6.1 on a request's Transfer-Encoding (every field of that name, in order): null
/// when the request may go on (no such field, or exactly "chunked"); otherwise the error to
/// answer before any byte of the body is read, after which the connection closes (the body's
/// end cannot be known, so whatever follows must not be read as the next request):
/// Content-Length as well → 400; a final coding other than chunked, chunked twice, or an empty
/// list → 400; a coding this server does not decode before the final chunked → 501.
template <class Fields>
std::optional<s3::errc> transfer_encoding_problem(const http::request_header<Fields>& msg) {
  auto [first, last] = msg.equal_range(http::field::transfer_encoding);
  if (first == last) return std::nullopt;
  if (msg.find(http::field::content_length) != msg.end()) return s3::errc::invalid_request;
  std::vector<std::string> codings;
  for (auto it = first; it != last; ++it) {
    std::string_view value(it->value().data(), it->value().size());
    while (!value.empty()) {
      const auto comma = value.find(',');
      std::string_view item = value.substr(0, comma);
      while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
      while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
      std::string lower(item);
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (!lower.empty()) codings.push_back(std::move(lower));
      if (comma == std::string_view::npos) break;
      value.remove_prefix(comma + 1);
    }
  }
  if (codings.empty() || codings.back() != "chunked") return s3::errc::invalid_request;
  for (std::size_t i = 0; i + 1 < codings.size(); ++i) {
    if (codings[i] == "chunked") return s3::errc::invalid_request;  // chunked applied twice
  }
  if (codings.size() > 1) return s3::errc::not_implemented;  // gzip, deflate, ... are not decoded here
  return std::nullopt;
}

/// The access log's and the metrics' error of a request whose answer the server cut (the
/// shutdown's grace ended, or server::stop()) before it left whole.
inline constexpr std::string_view cut_error = "CutAtShutdown";

/// What a conditional write that S3 does not do is told (after the operation's name).
inline constexpr std::string_view unsupported_condition =
    " is not implemented with this condition: conditional writes take If-None-Match: * or If-Match with one ETag.";

/// A Content-MD5 header that is there with an empty value (req.header() cannot tell it from none).
inline bool has_empty_content_md5(const auto& req) {
  const auto it = req.msg().find("Content-MD5");
  return it != req.msg().end() && it->value().empty();
}

/// The two kinds of connection: plain HTTP and HTTPS.
using plain_stream = beast::tcp_stream;
using tls_stream = asio::ssl::stream<beast::tcp_stream>;

// Each member of connection defined outside the class is compiled once, for both streams, in
// the file that defines it: dispatch.cpp, bodies.cpp, bucket_ops.cpp, object_ops.cpp,
// multipart.cpp (each ends with its explicit instantiations); the others see its declaration only.

}  // namespace sluice::s3::detail
