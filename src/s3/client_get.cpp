// SPDX-License-Identifier: Apache-2.0
// The operations' shared parts (outcomes, workers), HeadObject, and GetObject: parallel ranged
// GETs straight into the caller's memory, by HTTP body or by x-amz-rdma-token.
// Part of the client's implementation (include/sluice/s3/client.hpp); the declarations its
// translation units share are in client_internal.hpp.
#include "client_internal.hpp"

namespace sluice::s3::detail::client_impl {

error_code error_from(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const boost::system::system_error& e) {
    return e.code();
  } catch (const std::bad_alloc&) {
    return make_error_code(boost::system::errc::not_enough_memory);
  } catch (const std::invalid_argument&) {
    return sluice::errc::invalid_argument;  // from sign(): a header name that is not a token
  } catch (...) {
    return errc::internal_error;
  }
}

/// Runs `count` workers made by `make` at once on this strand and returns when all ended.
asio::awaitable<void> run_workers(std::size_t count, const std::function<asio::awaitable<void>()>& make) {
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  asio::steady_timer signal(executor, asio::steady_timer::time_point::max());
  std::size_t remaining = count;
  std::exception_ptr first_failure;
  for (std::size_t i = 0; i < count; ++i) {
    asio::co_spawn(executor, make(), [&](const std::exception_ptr& failure) {
      if (failure && !first_failure) first_failure = failure;
      --remaining;
      signal.cancel();
    });
  }
  while (remaining > 0) {
    error_code ignored;
    co_await signal.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }
  if (first_failure) std::rethrow_exception(first_failure);
}

/// The headers that publish `attributes` with an object (PUT, CreateMultipartUpload).
void add_attribute_headers(std::vector<std::pair<std::string, std::string>>& headers,
                           const object_attributes& attributes, error_code& ec) {
  auto add = [&](std::string name, const std::string& value) {
    if (value.find_first_of("\r\n") != std::string::npos) ec = sluice::errc::invalid_argument;
    headers.emplace_back(std::move(name), value);
  };
  if (!attributes.content_type.empty()) add("content-type", attributes.content_type);
  if (!attributes.content_encoding.empty()) add("content-encoding", attributes.content_encoding);
  if (!attributes.content_disposition.empty()) add("content-disposition", attributes.content_disposition);
  if (!attributes.cache_control.empty()) add("cache-control", attributes.cache_control);
  if (!attributes.content_language.empty()) add("content-language", attributes.content_language);
  if (!attributes.expires.empty()) add("expires", attributes.expires);
  for (const auto& [name, value] : attributes.metadata) add("x-amz-meta-" + lower(name), value);
  if (!attributes.tags.empty()) {  // x-amz-tagging: the tags as URL query parameters
    std::string tagging;
    for (const auto& [key, value] : attributes.tags) {
      if (!tagging.empty()) tagging += '&';
      tagging += uri_encode(key, true) + "=" + uri_encode(value, true);
    }
    add("x-amz-tagging", tagging);
  }
}

/// The object_info a HEAD (or GET) answer describes.
object_info info_from(const response& res, const std::string& key) {
  object_info info;
  info.key = key;
  const std::string_view length = res.field("Content-Length");
  (void)std::from_chars(length.data(), length.data() + length.size(), info.size);
  if (auto time = xml::parse_http_date(res.field("Last-Modified"))) info.last_modified = *time;
  info.attributes.etag = unquote_etag(res.field("ETag"));
  info.attributes.content_type = std::string(res.field("Content-Type"));
  info.attributes.content_encoding = std::string(res.field("Content-Encoding"));
  info.attributes.content_disposition = std::string(res.field("Content-Disposition"));
  info.attributes.cache_control = std::string(res.field("Cache-Control"));
  info.attributes.content_language = std::string(res.field("Content-Language"));
  info.attributes.expires = std::string(res.field("Expires"));
  for (const auto& field : res.header) {
    const std::string name = lower(std::string_view(field.name_string().data(), field.name_string().size()));
    const std::string value(field.value().data(), field.value().size());
    if (name.starts_with("x-amz-meta-")) {
      info.attributes.metadata[name.substr(11)] = value;
    } else if (name.starts_with("x-amz-checksum-") && name != "x-amz-checksum-type") {
      info.attributes.checksums[name.substr(15)] = value;
    }
  }
  return info;
}

/// HEAD of one object.
asio::awaitable<object_info> head_request(const op_context& op, const std::string& bucket, const std::string& key,
                                          error_code& ec) {
  request_spec spec;
  spec.method = http::verb::head;
  spec.bucket = bucket;
  spec.key = key;
  const response res = co_await execute(op, spec, ec);
  if (ec) co_return object_info{};
  if (res.status >= 300) {
    ec = error_of(res, false);
    co_return object_info{};
  }
  // A HEAD says the object's size in Content-Length: without one that parses, the answer
  // describes nothing (info_from would read it as 0 bytes).
  const std::string_view length = res.field("Content-Length");
  std::uint64_t size = 0;
  const auto [end, error] = std::from_chars(length.data(), length.data() + length.size(), size);
  if (length.empty() || error != std::errc{} || end != length.data() + length.size()) {
    ec = sluice::errc::protocol_violation;
    co_return object_info{};
  }
  co_return info_from(res, key);
}

asio::awaitable<outcome<object_info>> head_object_op(op_context op, std::string bucket, std::string key) {
  outcome<object_info> out;
  out.value = co_await head_request(op, bucket, key, out.ec);
  co_return out;
}

// -- GET --------------------------------------------------------------------------------------

/// Shared by the workers of one parallel download (all on the operation's strand).
// -- RDMA (x-amz-rdma-token) -------------------------------------------------------------------

/// Whether the server moved an answer's bytes by RDMA (x-amz-rdma-reply: 200, 204 or 206).
bool moved_by_rdma(const response& res) {
  const std::string_view reply = res.field("x-amz-rdma-reply");
  return reply == "200" || reply == "204" || reply == "206";
}

/// A grant for one request's memory, or null when the request goes over HTTP: `via` is http,
/// the client has no plane, or (automatic) the memory cannot be registered. The grant outlives
/// every retry of the request.
std::unique_ptr<rdma_client_plane::grant> grant_for(const client_config& config, transfer_via via, const region& memory,
                                                    rdma_op op, error_code& ec) {
  ec = {};
  if (via == transfer_via::http || memory.size == 0) return nullptr;
  // A token is only used when signed: an anonymous client has no way to sign one.
  if (!config.rdma || config.creds.access_key_id.empty()) {
    if (via == transfer_via::rdma) ec = s3::errc::rdma_not_supported;
    return nullptr;
  }
  const auto expires = std::chrono::system_clock::now() + config.request_timeout * (config.max_retries + 1) +
                       config.retry_base_delay * (1u << std::min(config.max_retries, 8u)) + std::chrono::minutes(1);
  auto grant = config.rdma->grant_access(memory, op, expires, ec);
  if (ec && via == transfer_via::automatic) {
    ec = {};
    return nullptr;
  }
  return grant;
}

/// The bytes an RDMA answer says it moved; nullopt when the header is missing or malformed.
std::optional<std::uint64_t> rdma_bytes_of(const response& res) {
  const std::string_view text = res.field("x-amz-rdma-bytes-transferred");
  std::uint64_t n = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return n;
}

struct download {
  std::string bucket;
  std::string key;
  region destination;
  std::uint64_t offset = 0;  // of destination's first byte in the object
  std::uint64_t total = 0;   // the object's size
  std::string etag;          // of the first answer: every part must come from the same object
  std::uint64_t begin = 0;   // first byte (relative to offset) the parts cover
  std::uint64_t end = 0;     // one past the last
  std::uint64_t part_size = 0;
  std::uint64_t next = 0;  // next part to fetch
  std::uint64_t parts = 0;
  error_code failure;
  transfer_progress* progress = nullptr;
  transfer_via via = transfer_via::automatic;
  path_counter* paths = nullptr;
  const get_options* options = nullptr;  // its check sees every part's answer
};

/// The caller's verdict on a success answer (get_options::check), before its body is read.
error_code caller_check(const get_options& options, const response& res) {
  if (!options.check) return {};
  return options.check(res.status, [&res](std::string_view name) { return res.field(name); });
}

asio::awaitable<void> download_parts(const op_context& op, download& job) {
  while (!job.failure && job.next < job.parts) {
    const std::uint64_t index = job.next++;
    const std::uint64_t first = job.begin + index * job.part_size;
    const std::uint64_t length = std::min(job.part_size, job.end - first);
    request_spec spec;
    spec.bucket = job.bucket;
    spec.key = job.key;
    spec.headers.emplace_back(
        "range", "bytes=" + std::to_string(job.offset + first) + "-" + std::to_string(job.offset + first + length - 1));
    if (!job.etag.empty()) spec.headers.emplace_back("if-match", "\"" + job.etag + "\"");
    spec.progress = job.progress;
    // The caller's sink takes offsets in the destination; the request's are in its part.
    const std::function<error_code(std::uint64_t, std::span<const std::byte>)> part_sink =
        [&job, first](std::uint64_t at, std::span<const std::byte> bytes) {
          return job.options->sink(first + at, bytes);
        };
    if (job.options->sink) spec.sink = &part_sink;
    error_code ec;
    const region part{job.destination.bytes() + first, static_cast<std::size_t>(length), job.destination.kind,
                      job.destination.device};
    const auto grant = grant_for(op.config(), job.via, part, rdma_op::write, ec);
    if (ec) {
      if (!job.failure) job.failure = ec;
      co_return;
    }
    if (grant) spec.headers.emplace_back("x-amz-rdma-token", grant->token());
    bool by_rdma = false;
    spec.choose = [&job, &grant, &by_rdma, first, length](const response& res, std::span<std::byte>& target,
                                                          bool&) -> error_code {
      if (const error_code verdict = caller_check(*job.options, res)) return verdict;
      const auto range = parse_content_range(res.field("Content-Range"));
      if (res.status != 206 || !range || range->first != job.offset + first ||
          range->last != job.offset + first + length - 1 || range->total != job.total) {
        return sluice::errc::protocol_violation;
      }
      by_rdma = grant && moved_by_rdma(res);
      if (by_rdma) {
        if (rdma_bytes_of(res) != length) return sluice::errc::protocol_violation;
        target = {};  // the bytes are already in place
        return {};
      }
      if (grant) {
        ++job.paths->declined;
        if (job.via == transfer_via::rdma) return s3::errc::rdma_not_supported;
      }
      target = std::span<std::byte>(job.destination.bytes() + first, static_cast<std::size_t>(length));
      return {};
    };
    const response res = co_await execute(op, spec, ec);
    if (!ec && res.status >= 300) ec = error_of(res, false);
    if (ec) {
      if (!job.failure) job.failure = ec;
      co_return;
    }
    if (by_rdma) {
      job.paths->rdma(*op.state, length);
      job.progress->add(length);
    } else {
      job.paths->http(*op.state, length);
    }
  }
}

/// The size of an object known from a HEAD, for answers that do not say it; then what a read
/// from `offset` (of `want` bytes, if given) gets: 0 bytes, or bad_range.
asio::awaitable<std::uint64_t> empty_or_bad_range(const op_context& op, const std::string& bucket,
                                                  const std::string& key, std::uint64_t offset,
                                                  std::optional<std::uint64_t> known_total,
                                                  std::optional<std::uint64_t> want, error_code& ec) {
  std::uint64_t total = 0;
  if (known_total) {
    total = *known_total;
  } else {
    const object_info info = co_await head_request(op, bucket, key, ec);
    if (ec) co_return 0;
    total = info.size;
  }
  // Only a read of nothing at the very end succeeds here (the caller asked for bytes otherwise).
  if (offset == total && (!want || *want == 0)) co_return 0;
  ec = sluice::errc::bad_range;
  co_return 0;
}

/// What the first answer's header says it holds: `length` bytes from `offset` and the object's
/// size (`total`). A 206's Content-Range must start at `offset`; a 200 holds the whole object (by
/// RDMA, or as a body of Content-Length when the server ignored the Range: that body may be
/// longer than the destination takes, `longer_ok`). A range of an empty object ("0-0/0") sets
/// `empty_object`, and is a protocol violation here like any other bad header.
error_code first_answer_length(const response& res, std::uint64_t offset, bool by_rdma, std::uint64_t& total,
                               std::uint64_t& length, bool& longer_ok, bool& empty_object) {
  if (res.status == 206) {
    const auto range = parse_content_range(res.field("Content-Range"));
    if (range && range->total == 0) {
      empty_object = true;  // some servers answer a range of an empty object with "0-0/0"
      return sluice::errc::protocol_violation;
    }
    if (!range || !range->first || !range->total || *range->first != offset || *range->last < *range->first ||
        *range->last >= *range->total) {
      return sluice::errc::protocol_violation;
    }
    total = *range->total;
    length = *range->last - *range->first + 1;
  } else if (by_rdma) {
    // 200 over RDMA: the whole object went into the destination.
    const auto moved = rdma_bytes_of(res);
    if (offset != 0 || !moved) return sluice::errc::protocol_violation;
    total = *moved;
    length = total;
  } else {
    // 200: the server ignored the Range and sends the whole object.
    const std::string_view text = res.field("Content-Length");
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), total);
    if (offset != 0 || text.empty() || error != std::errc{} || end != text.data() + text.size()) {
      return sluice::errc::protocol_violation;
    }
    length = total;
    longer_ok = true;
  }
  return {};
}

/// The rest of a GET after its first answer, bytes [first_bytes, need) of `job`: ranged GETs of
/// part_size, parts_in_flight at once. The first failure, if any.
asio::awaitable<error_code> download_rest(const op_context& op, const client_config& config, download& job,
                                          std::uint64_t first_bytes, std::uint64_t need) {
  job.begin = first_bytes;
  job.end = need;
  const std::uint64_t rest = need - first_bytes;
  job.parts = rest / job.part_size + (rest % job.part_size != 0 ? 1 : 0);  // part_size may be near 2^64
  const std::size_t workers = static_cast<std::size_t>(std::min<std::uint64_t>(config.parts_in_flight, job.parts));
  const std::function<asio::awaitable<void>()> worker = [&] { return download_parts(op, job); };
  co_await run_workers(workers, worker);
  co_return job.failure;
}

asio::awaitable<outcome<std::uint64_t>> get_object_op(op_context op, std::string bucket, std::string key,
                                                      region destination, get_options options) {
  outcome<std::uint64_t> out;
  const client_config& config = op.config();
  if (!destination.host_accessible()) {
    // Device memory cannot take an HTTP body: every part goes by RDMA (a plane that can
    // register it, FI_HMEM), and a decline is an error. cuda::get_object_to_device stages instead.
    if (options.via == transfer_via::http) {
      out.ec = sluice::errc::unsupported_memory;
      co_return out;
    }
    options.via = transfer_via::rdma;
  }
  if (destination.data == nullptr && destination.size > 0) {
    out.ec = sluice::errc::invalid_argument;
    co_return out;
  }
  if (options.sink) {
    if (options.via == transfer_via::rdma) {
      out.ec = sluice::errc::invalid_argument;  // a token would write the destination, not the sink
      co_return out;
    }
    options.via = transfer_via::http;
  }
  const std::uint64_t offset = options.range.offset;
  const std::optional<std::uint64_t> want = options.range.length;
  if (want && *want > destination.size) {
    out.ec = sluice::errc::region_too_small;
    co_return out;
  }
  transfer_progress progress{options.progress, want.value_or(0), 0};
  if (want && *want == 0) {  // nothing to read: only check that the range lies inside the object
    const object_info info = co_await head_request(op, bucket, key, out.ec);
    if (!out.ec && offset > info.size) out.ec = sluice::errc::bad_range;
    co_return out;
  }

  // The first request asks for the whole transfer when it is small (or of unknown size, up to
  // the threshold), else for one part; its answer tells the object's size and ETag.
  std::uint64_t first_length =
      want ? (*want <= config.multipart_threshold ? *want : config.part_size) : config.multipart_threshold;
  std::uint64_t part_size = config.part_size;
  // With RDMA the first request asks for no more than the destination holds: its token grants
  // exactly that much memory. A plane that asks for whole transfers (a same-host device grant)
  // gets the whole destination, or the whole range, in one request.
  path_counter paths;
  std::unique_ptr<rdma_client_plane::grant> grant;
  if (options.via != transfer_via::http && destination.size > 0) {
    if (const std::uint64_t whole = config.rdma ? config.rdma->request_bytes(destination) : 0; whole != 0) {
      first_length = std::min(want.value_or(destination.size), whole);
      part_size = std::max(part_size, whole);
    }
    first_length = std::min<std::uint64_t>(first_length, destination.size);
    const region first{destination.data, static_cast<std::size_t>(first_length), destination.kind, destination.device};
    grant = grant_for(config, options.via, first, rdma_op::write, out.ec);
    if (out.ec) co_return out;
  } else if (options.via == transfer_via::rdma && !config.rdma) {
    out.ec = s3::errc::rdma_not_supported;
    co_return out;
  }
  bool first_by_rdma = false;
  download job;
  job.via = options.via;
  job.paths = &paths;
  job.bucket = bucket;
  job.key = key;
  job.destination = destination;
  job.offset = offset;
  job.part_size = part_size;
  job.progress = &progress;
  std::uint64_t need = 0;
  std::uint64_t first_bytes = 0;
  bool empty_object = false;
  request_spec spec;
  spec.bucket = bucket;
  spec.key = key;
  spec.headers.emplace_back("range",
                            "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + first_length - 1));
  if (!options.if_match.empty()) spec.headers.emplace_back("if-match", "\"" + options.if_match + "\"");
  if (grant) spec.headers.emplace_back("x-amz-rdma-token", grant->token());
  spec.progress = &progress;
  if (options.sink) spec.sink = &options.sink;
  job.options = &options;
  spec.choose = [&](const response& res, std::span<std::byte>& target, bool& longer_ok) -> error_code {
    if (const error_code verdict = caller_check(options, res)) return verdict;
    job.etag = unquote_etag(res.field("ETag"));
    first_by_rdma = grant && moved_by_rdma(res);
    if (grant && !first_by_rdma) {
      ++paths.declined;
      if (options.via == transfer_via::rdma) return s3::errc::rdma_not_supported;
    }
    std::uint64_t length = 0;
    if (const error_code e =
            first_answer_length(res, offset, first_by_rdma, job.total, length, longer_ok, empty_object)) {
      return e;
    }
    if (offset > job.total || (want && *want > job.total - offset)) return sluice::errc::bad_range;
    need = want ? *want : job.total - offset;
    if (need > destination.size) return sluice::errc::region_too_small;
    if (first_by_rdma && rdma_bytes_of(res) != length) return sluice::errc::protocol_violation;
    length = std::min(length, need);
    progress.total = need;
    first_bytes = length;
    if (first_by_rdma) {
      target = {};  // the bytes are already in place
    } else {
      target = std::span<std::byte>(destination.bytes(), static_cast<std::size_t>(length));
    }
    return {};
  };
  const response res = co_await execute(op, spec, out.ec);
  if (out.ec == sluice::errc::protocol_violation && empty_object) {
    out.ec = {};
    out.value = co_await empty_or_bad_range(op, bucket, key, offset, std::nullopt, want, out.ec);
    co_return out;
  }
  if (out.ec) co_return out;
  if (res.status == 416) {
    const auto range = parse_content_range(res.field("Content-Range"));
    const auto total = range ? range->total : std::nullopt;
    out.value = co_await empty_or_bad_range(op, bucket, key, offset, total, want, out.ec);
    co_return out;
  }
  if (res.status >= 300) {
    out.ec = error_of(res, false);
    co_return out;
  }
  if (first_by_rdma) {
    paths.rdma(*op.state, first_bytes);
    progress.add(first_bytes);
  } else {
    paths.http(*op.state, first_bytes);
  }
  grant.reset();
  if (first_bytes < need) {
    out.ec = co_await download_rest(op, config, job, first_bytes, need);
    if (out.ec) co_return out;
  }
  paths.report_to(options.report);
  out.value = need;
  co_return out;
}

}  // namespace sluice::s3::detail::client_impl
