// SPDX-License-Identifier: Apache-2.0
// A connection's request loop: reading a request, authenticating, routing it to its operation,
// logging it, and the answers (headers, XML, errors).
// Part of the S3 server (src/s3/server/; docs/architecture.md lists the files).
#include "connection.hpp"

namespace sluice::s3::detail {

template <class Stream>
asio::awaitable<void> connection<Stream>::read_header(header_parser& parser, error_code& ec) {
  // What http::async_read_header does (its read_some_op, Beast 1.74), less its trip through the
  // loop when the header is already in buffer_: errors, limits and end of stream alike.
  ec = {};
  for (;;) {
    if (buffer_.size() > 0) {
      const std::size_t used = parser.put(buffer_.data(), ec);
      buffer_.consume(used);
      if (!ec && parser.is_header_done()) co_return;
      if (ec && ec != http::error::need_more) co_return;
      ec = {};
    }
    const std::size_t room = beast::read_size(buffer_, 65536);
    if (room == 0) {
      ec = http::error::buffer_overflow;
      co_return;
    }
    const std::size_t n =
        co_await stream_.async_read_some(buffer_.prepare(room), asio::redirect_error(asio::use_awaitable, ec));
    buffer_.commit(n);
    if (ec == asio::error::eof) {
      if (!parser.got_some()) {
        ec = http::error::end_of_stream;
        co_return;
      }
      ec = {};
      parser.put_eof(ec);  // a header cut short: partial_message
      co_return;
    }
    if (ec) co_return;
  }
}

template <class Stream>
asio::awaitable<void> connection<Stream>::run() {
  {
    std::lock_guard lock(state_->mutex);
    state_->closers[this] = [weak = this->weak_from_this()](close_reason how) {
      if (auto self = weak.lock()) {
        asio::post(self->stream_.get_executor(), [self, how] {
          error_code ignored;
          if (how == close_reason::cut) {
            self->cut_ = true;  // what is in flight is logged as cut (record())
            self->lowest().socket().close(ignored);
          } else if (self->idle_) {
            self->lowest().socket().cancel(ignored);  // ends the wait for a request: a clean close
          }
        });
      }
    };
  }
  // A connection accepted as the server stops (or begins its shutdown) may register after the
  // others were closed: it ends at once rather than keep its loop waiting for its idle timeout.
  bool open = !state_->stopping && !state_->draining;
  if constexpr (tls) {
    if (open) {
      error_code ec;
      lowest().expires_after(state_->config.read_timeout);
      idle_ = true;  // no request yet: a shutdown closes it now
      co_await stream_.async_handshake(asio::ssl::stream_base::server, asio::redirect_error(asio::use_awaitable, ec));
      idle_ = false;
      open = !ec && !state_->draining;  // not TLS, an old protocol, a stall: dropped without an answer
    }
  }
  while (open) {     // NOLINT(bugprone-infinite-loop): every way out of the loop is a break
    arena_.reset();  // the last request's fields are gone with its parser
    header_parser parser(std::piecewise_construct, std::make_tuple(), std::make_tuple(fields_allocator(&arena_)));
    parser.header_limit(static_cast<std::uint32_t>(state_->config.max_header_bytes));
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    error_code ec;
    if (buffer_.size() == 0) {
      // Between requests the connection may idle for idle_timeout; from the request's first byte
      // its header section has read_timeout to arrive.
      lowest().expires_after(state_->config.idle_timeout);
      // Until a request's header section is in, the connection counts as idle: a shutdown closes
      // it now (closers) rather than wait for a request that may come slowly or never.
      idle_ = true;
      const std::size_t n =
          co_await stream_.async_read_some(buffer_.prepare(4096), asio::redirect_error(asio::use_awaitable, ec));
      buffer_.commit(n);
      if (ec) break;  // closed, reset, idle, or the server shuts down: nothing to answer
    }
    idle_ = true;
    lowest().expires_after(state_->config.read_timeout);
    co_await read_header(parser, ec);
    idle_ = false;
    if (ec) {
      if (ec == http::error::header_limit) {
        request req{&parser};
        req.id = state_->next_request_id();
        req.keep_alive = false;
        req.error = "RequestHeaderSectionTooLarge";
        string_response res{http::status::bad_request, 11};
        res.set(http::field::content_type, "application/xml");
        res.body() =
            xml::error_body("RequestHeaderSectionTooLarge", "Your request header section is too large.", "", req.id);
        co_await send(req, std::move(res));
      } else if (ec != http::error::end_of_stream && ec != beast::error::timeout && ec != asio::error::eof &&
                 ec != asio::error::operation_aborted && ec != asio::error::connection_reset) {
        request req{&parser};
        req.id = state_->next_request_id();
        req.keep_alive = false;
        co_await send_error(req, s3::errc::invalid_request, "malformed HTTP request");
      }
      break;
    }
    lowest().expires_after(state_->config.read_timeout);
    const bool keep = co_await handle(parser);
    if (!keep || state_->stopping || state_->draining) break;
  }
  error_code ignored;
  if constexpr (tls) {  // close_notify, best effort: a peer that is gone or stalls does not hold us
    if (open) lowest().expires_after(std::chrono::seconds(2));
    if (open) co_await stream_.async_shutdown(asio::redirect_error(asio::use_awaitable, ignored));
  }
  lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
  lowest().close();
  {
    std::lock_guard lock(state_->mutex);
    state_->closers.erase(this);
  }
  {
    std::lock_guard lock(state_->address_mutex);
    if (auto it = state_->per_address.find(peer_); it != state_->per_address.end() && --it->second == 0) {
      state_->per_address.erase(it);
    }
  }
  state_->connections.fetch_sub(1);
  state_->connection_ended();
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::handle(header_parser& parser) {
  request req{&parser};
  // The route's storage is the connection's, lent to each request and taken back after it is
  // recorded: its strings keep their capacity from one request to the next.
  req.where = std::move(spare_route_);
  const lend_route lent{this, &req};
  const record_on_exit recorded{this, &req};
  req.id = state_->next_request_id();
  const auto& msg = req.msg();
  req.head = msg.method() == http::verb::head;
  req.keep_alive = parser.get().keep_alive();
  req.body_pending = !parser.is_done();
  const std::string_view method(msg.method_string().data(), msg.method_string().size());
  const std::string_view target(msg.target().data(), msg.target().size());
  error_code ec;
  if (const auto problem = transfer_encoding_problem(msg)) {
    req.keep_alive = false;  // the body's end is unknown: nothing after this header is a request
    if (*problem != s3::errc::not_implemented) {
      co_return co_await send_error(req, *problem,
                                    "Transfer-Encoding must end in chunked, once, without Content-Length.");
    }
    // Routed only to name the operation in the message.
    parse_route(req.where, method, target, req.header("Host"), state_->config.virtual_host_suffixes,
                msg.find("x-amz-copy-source") != msg.end(), ec);
    const std::string name = req.where.op == operation::not_implemented
                                 ? unimplemented_operation_name(method, req.where)
                                 : std::string(operation_name(req.where.op));
    req.where.op = operation::not_implemented;  // what the metrics and the access log count
    co_return co_await send_error(req, *problem,
                                  name + " is not implemented with a Transfer-Encoding other than chunked.");
  }

  parse_route(req.where, method, target, req.header("Host"), state_->config.virtual_host_suffixes,
              msg.find("x-amz-copy-source") != msg.end(), ec);
  if (ec) co_return co_await send_error(req, to_s3(ec));

  // Authentication: a SigV4 header or presigned query, SigV2 (header or query) unless switched
  // off, or anonymous when configured.
  request_view view{method, target, std::move(spare_views_)};  // the connection's vector, reused
  view.headers.clear();
  for (const auto& field : msg) {
    view.headers.emplace_back(std::string_view(field.name_string().data(), field.name_string().size()),
                              std::string_view(field.value().data(), field.value().size()));
  }
  const bool signed_v2 = sigv2::claims(view);
  const bool signed_request = signed_v2 || msg.find(http::field::authorization) != msg.end() ||
                              req.where.param("X-Amz-Signature") || req.where.param("X-Amz-Credential");
  if (!signed_request) {
    if (!state_->config.allow_anonymous) co_return co_await send_error(req, s3::errc::access_denied, "Access Denied");
    req.user = state_->config.users.empty() ? std::string("anonymous") : state_->config.users.front().access_key_id;
  } else if (signed_v2) {
    if (!state_->config.sigv2) {
      co_return co_await send_error(req, s3::errc::access_denied,
                                    "AWS Signature Version 2 is disabled on this server; sign with AWS4-HMAC-SHA256.");
    }
    const auto secret_for = [this](std::string_view key) { return state_->secret_for(key); };
    // The bucket is in the canonical resource even when only the Host header names it.
    const std::string_view host_bucket = req.where.virtual_host ? std::string_view(req.where.bucket) : "";
    std::string why;
    verified v = sigv2::verify(view, host_bucket, secret_for, std::chrono::system_clock::now(), ec, &why);
    if (ec) co_return co_await send_error(req, to_s3(ec), why);
    req.user = v.access_key_id;
    req.auth = std::move(v);
  } else {
    const auto secret_for = [this](std::string_view key) { return state_->secret_for(key); };
    std::optional<std::string_view> region;
    if (state_->config.region) region = *state_->config.region;
    std::string why;
    req.auth = std::move(spare_auth_);  // the connection's, lent like the route: no allocation
    if (!req.auth) req.auth.emplace();
    verify(view, secret_for, std::chrono::system_clock::now(), region, *req.auth, ec, &why);
    if (ec) {
      spare_auth_ = std::move(req.auth);
      req.auth.reset();
      co_return co_await send_error(req, to_s3(ec), why);
    }
    req.user = req.auth->access_key_id;
  }
  keep_spare(std::move(view.headers));

  // Ownership: every bucket-level operation but CreateBucket needs the caller to own the bucket.
  if (!req.where.bucket.empty() && req.where.op != operation::create_bucket &&
      req.where.op != operation::not_implemented && !owns(req, req.where.bucket)) {
    co_return co_await send_error(req, s3::errc::access_denied, "Access Denied");
  }
  // A new object's key must be text a plain (XML) listing can carry.
  if ((req.where.op == operation::put_object || req.where.op == operation::copy_object ||
       req.where.op == operation::create_multipart_upload) &&
      !is_xml_safe_utf8(req.where.key)) {
    co_return co_await send_error(req, s3::errc::invalid_argument,
                                  "Object keys must be UTF-8 without control characters other than tab, newline "
                                  "and carriage return (XML 1.0 cannot carry them).");
  }
  co_return co_await dispatch(req);
}

template <class Stream>
void connection<Stream>::record(request& req, unsigned status, std::uint64_t bytes_sent) {
  if (req.recorded) return;
  req.recorded = true;
  const auto duration =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - req.start);
  // The server cut the connection (the shutdown's grace ended, or stop()) before the answer
  // left whole: the line keeps the status the head said and the bytes that went, and says so.
  if (cut_ && (status == 0 || req.short_answer)) req.error = cut_error;
  server_metrics& metrics = state_->metrics;
  metrics.record(req.where.op, status, req.error, duration);
  metrics.add_bytes(byte_direction::out, byte_path::http, bytes_sent);
  metrics.add_bytes(byte_direction::in, byte_path::http, req.bytes_received);
  if (req.bytes_direct > 0) {
    metrics.add_bytes(req.where.op == operation::get_object ? byte_direction::out : byte_direction::in,
                      req.direct_path.starts_with("grant:") ? byte_path::grant : byte_path::rdma, req.bytes_direct);
  }
  if (req.decline && req.rdma_reply == "501") metrics.rdma_declined(*req.decline);
  access_log* log = state_->log.get();
  if (log == nullptr) return;
  error_code ignored;
  const std::string remote = peer_.to_string(ignored);
  const std::string_view method(req.msg().method_string().data(), req.msg().method_string().size());
  const std::string_view path = !req.direct_path.empty()                   ? std::string_view(req.direct_path)
                                : bytes_sent > 0 || req.bytes_received > 0 ? std::string_view("http")
                                                                           : std::string_view("none");
  // Empty before authentication succeeded: the line says "-".
  const std::string_view user = req.auth           ? std::string_view(req.user)
                                : req.user.empty() ? std::string_view()
                                                   : std::string_view("anonymous");
  access_record line;
  line.time = req.time;
  line.remote = remote;
  line.user = user;
  line.method = method;
  line.bucket = req.where.bucket;
  line.key = req.where.key;
  line.operation = operation_name(req.where.op);
  line.status = status;
  line.error = req.error;
  line.bytes_sent = bytes_sent;
  line.bytes_received = req.bytes_received;
  line.bytes_direct = req.bytes_direct;
  line.path = path;
  line.duration_us = static_cast<std::uint64_t>(duration.count());
  line.request_id = req.id;
  log->write(format_access_line(line, log->format()));
}

template <class Stream>
bool connection<Stream>::owns(const request& req, std::string_view bucket) const {
  const auto& owners = state_->owners.read();
  auto it = owners.find(bucket);
  return it == owners.end() || it->second == req.user;  // unknown bucket: the store answers NoSuchBucket
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::dispatch(request& req) {
  // Not a coroutine: it hands over the operation's own (one coroutine frame less per request).
  switch (req.where.op) {
    case operation::list_buckets: return list_buckets(req);
    case operation::create_bucket: return create_bucket(req);
    case operation::head_bucket:
    case operation::delete_bucket:
    case operation::get_bucket_location:
    case operation::get_bucket_versioning: return bucket_only(req);
    case operation::list_objects_v1:
    case operation::list_objects_v2:
    case operation::list_object_versions: return list_objects(req);
    case operation::delete_objects: return delete_objects(req);
    case operation::put_object: return put_object(req);
    case operation::copy_object: return copy_object(req);
    case operation::get_object:
    case operation::head_object: return get_object(req);
    case operation::delete_object: return delete_object(req);
    case operation::list_multipart_uploads:
    case operation::create_multipart_upload:
    case operation::upload_part:
    case operation::complete_multipart_upload:
    case operation::abort_multipart_upload:
    case operation::list_parts: return multipart(req);
    case operation::upload_part_copy: return upload_part_copy(req);
    case operation::get_object_tagging:
    case operation::put_object_tagging:
    case operation::delete_object_tagging: return object_tagging(req);
    case operation::get_bucket_tagging:
    case operation::put_bucket_tagging:
    case operation::delete_bucket_tagging: return bucket_tagging(req);
    case operation::get_object_acl:
    case operation::put_object_acl:
    case operation::get_bucket_acl:
    case operation::put_bucket_acl: return acl(req);
    case operation::get_object_attributes: return object_attributes_of(req);
    case operation::not_implemented: break;
  }
  const std::string_view method(req.msg().method_string().data(), req.msg().method_string().size());
  return send_error(req, s3::errc::not_implemented,
                    unimplemented_operation_name(method, req.where) + " is not implemented.");
}

// ---------------------------------------------------------------------------------------------
// Responses

template <class Stream>
void connection<Stream>::common_headers(request& req, http::fields& fields) {
  fields_head head(fields);
  common_fields(head, req.id, req.rdma_reply);
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::send(request& req, string_response res) {
  common_headers(req, res.base());
  // A request whose body was not read leaves bytes on the wire: close after answering.
  const bool keep = req.keep_alive && !req.body_pending && !state_->stopping && !state_->draining;
  res.keep_alive(keep);
  if (req.head) {
    const auto length = res.body().size();
    res.body().clear();
    res.content_length(length);
    http::response_serializer<http::string_body> sr(res);
    sr.split(true);
    error_code ec;
    co_await http::async_write_header(stream_, sr, asio::redirect_error(asio::use_awaitable, ec));
    req.short_answer = static_cast<bool>(ec);
    record(req, res.result_int(), 0);
    co_return !ec && keep;
  }
  res.prepare_payload();
  error_code ec;
  co_await http::async_write(stream_, res, asio::redirect_error(asio::use_awaitable, ec));
  req.short_answer = static_cast<bool>(ec);
  record(req, res.result_int(), ec ? 0 : res.body().size());
  co_return !ec && keep;
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::send_xml(request& req, std::string body, http::status status) {
  string_response res{status, 11};
  res.set(http::field::content_type, "application/xml");
  res.body() = std::move(body);
  co_return co_await send(req, std::move(res));
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::send_empty(request& req, http::status status) {
  string_response res{status, 11};
  co_return co_await send(req, std::move(res));
}

template <class Stream>
asio::awaitable<bool> connection<Stream>::send_error(request& req, s3::errc code, std::string message) {
  const unsigned status = http_status(code);
  req.error = status == 304 ? std::string_view() : code_string(code);
  string_response res{static_cast<http::status>(status), 11};
  if (status == 304) co_return co_await send(req, std::move(res));  // 304 carries no body
  res.set(http::field::content_type, "application/xml");
  // Say what is wrong: S3's general message when the caller has nothing more specific (an
  // error_code's message() is only its code).
  if (message.empty() || message == code_string(code)) message = std::string(default_message(code));
  res.body() = xml::error_body(code_string(code), message, req.resource(), req.id);
  co_return co_await send(req, std::move(res));
}

#define SLUICE_CONNECTION_MEMBERS(S)                                                                           \
  template asio::awaitable<void> connection<S>::run();                                                         \
  template asio::awaitable<bool> connection<S>::handle(connection<S>::header_parser&);                         \
  template void connection<S>::record(connection<S>::request&, unsigned, std::uint64_t);                       \
  template bool connection<S>::owns(const connection<S>::request&, std::string_view) const;                    \
  template asio::awaitable<bool> connection<S>::dispatch(connection<S>::request&);                             \
  template void connection<S>::common_headers(connection<S>::request&, http::fields&);                         \
  template asio::awaitable<bool> connection<S>::send(connection<S>::request&, connection<S>::string_response); \
  template asio::awaitable<bool> connection<S>::send_xml(connection<S>::request&, std::string, http::status);  \
  template asio::awaitable<bool> connection<S>::send_empty(connection<S>::request&, http::status);             \
  template asio::awaitable<bool> connection<S>::send_error(connection<S>::request&, s3::errc, std::string);
SLUICE_CONNECTION_MEMBERS(plain_stream)
SLUICE_CONNECTION_MEMBERS(tls_stream)
#undef SLUICE_CONNECTION_MEMBERS

}  // namespace sluice::s3::detail
