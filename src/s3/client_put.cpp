// SPDX-License-Identifier: Apache-2.0
// PutObject: sources (memory, file, upload_source, a stream of unknown length, device memory),
// single PUT and multipart upload, by HTTP body or by x-amz-rdma-token.
// Part of the client's implementation (include/sluice/s3/client.hpp); the declarations its
// translation units share are in client_internal.hpp.
#include "client_internal.hpp"

#include <boost/asio/posix/stream_descriptor.hpp>

namespace sluice::s3::detail::client_impl {

// -- PUT --------------------------------------------------------------------------------------

class region_source final : public byte_source {
 public:
  explicit region_source(const_region source) : source_(source) {}
  [[nodiscard]] std::uint64_t size() const noexcept override { return source_.size; }
  std::span<const std::byte> read(std::uint64_t offset, std::size_t length, std::vector<std::byte>&,
                                  error_code& ec) override {
    ec = {};
    return {source_.bytes() + offset, length};
  }

 private:
  const_region source_;
};

/// A regular file, read with pread() a part at a time. Owns the descriptor.
class file_source final : public byte_source {
 public:
  static std::shared_ptr<file_source> open(const std::filesystem::path& path, error_code& ec) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      ec = error_code(errno, boost::system::system_category());
      return nullptr;
    }
    auto source = std::shared_ptr<file_source>(new file_source(fd));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ec = error_code(errno, boost::system::system_category());
      return nullptr;
    }
    if (!S_ISREG(st.st_mode)) {
      ec = sluice::errc::invalid_argument;
      return nullptr;
    }
    source->size_ = static_cast<std::uint64_t>(st.st_size);
    return source;
  }
  ~file_source() override { ::close(fd_); }
  [[nodiscard]] int native_handle() const noexcept { return fd_; }
  [[nodiscard]] std::uint64_t size() const noexcept override { return size_; }
  std::span<const std::byte> read(std::uint64_t offset, std::size_t length, std::vector<std::byte>& scratch,
                                  error_code& ec) override {
    ec = {};
    scratch.resize(length);
    std::size_t done = 0;
    while (done < length) {
      const ssize_t n = ::pread(fd_, scratch.data() + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        ec = error_code(errno, boost::system::system_category());
        return {};
      }
      if (n == 0) {  // the file shrank under us
        ec = make_error_code(boost::system::errc::io_error);
        return {};
      }
      done += static_cast<std::size_t>(n);
    }
    return {scratch.data(), length};
  }

 private:
  explicit file_source(int fd) : fd_(fd) {}
  int fd_;
  std::uint64_t size_ = 0;
};

std::array<std::byte, 16> md5_of(std::span<const std::byte> data) {
  digest d(digest_kind::md5);
  d.update(data);
  const std::vector<std::byte> bytes = d.finish();
  std::array<std::byte, 16> out{};
  std::copy_n(bytes.begin(), std::min<std::size_t>(bytes.size(), out.size()), out.begin());
  return out;
}

/// Shared by the workers of one multipart upload (all on the operation's strand).
/// What every multipart upload's workers share (all on the operation's strand): where it goes,
/// the parts sent so far and the first failure.
struct part_upload {
  std::string bucket;
  std::string key;
  std::string upload_id;
  std::uint64_t part_size = 0;
  std::vector<xml::completed_part> done;        // by part number - 1
  std::vector<std::array<std::byte, 16>> md5s;  // by part number - 1
  error_code failure;
  transfer_progress* progress = nullptr;
  transfer_via via = transfer_via::automatic;
  path_counter* paths = nullptr;
};

/// A multipart upload of a source of known size (memory, a file, an upload_source).
struct upload : part_upload {
  std::shared_ptr<byte_source> source;
  std::uint64_t parts = 0;
  std::uint64_t next = 0;
};

/// Sends a PUT (object or part) whose payload is `spec.body`: by RDMA when `via` allows and
/// the client has a plane (no body; token, size and checksums in headers), else, or after the
/// server declined (automatic), with the body. The answer of the request that carried the bytes.
asio::awaitable<response> put_payload(const op_context& op, request_spec spec, transfer_via via, path_counter& paths,
                                      error_code& ec) {
  const std::span<const std::byte> data = spec.body;
  // Registered for the server to read (rdma_op::read): the only access it is granted.
  const region memory = sluice::detail::readable_as_region(host_region(data));
  const auto grant = grant_for(op.config(), via, memory, rdma_op::read, ec);
  if (ec) co_return response{};
  if (grant) {
    request_spec by_rdma = spec;
    by_rdma.body = {};
    by_rdma.has_body = true;  // Content-Length: 0
    by_rdma.payload_hash = std::string(unsigned_payload);
    by_rdma.progress = nullptr;
    digest crc(digest_kind_of(checksum_algorithm::crc32c));
    crc.update(data);
    by_rdma.headers.emplace_back("x-amz-rdma-token", grant->token());
    by_rdma.headers.emplace_back("x-amz-decoded-content-length", std::to_string(data.size()));
    by_rdma.headers.emplace_back("x-amz-checksum-crc32c", base64_encode(crc.finish()));
    response res = co_await execute(op, by_rdma, ec);
    if (ec) co_return res;
    const std::string_view reply = res.field("x-amz-rdma-reply");
    if (res.status < 300 && moved_by_rdma(res)) {
      paths.rdma(*op.state, data.size());
      if (spec.progress != nullptr) spec.progress->add(data.size());
      co_return res;
    }
    // A decline is x-amz-rdma-reply: 501, or an answer without the header from a server that
    // does not know the protocol: one that rejected the empty body (its checksums fail), or one
    // that checks nothing and stored 0 bytes (a 2xx without x-amz-rdma-reply), which the PUT
    // with a body that follows replaces. A body would not change a refusal of the caller (403)
    // or of the bucket or upload (404).
    const bool declined = reply == "501" || (reply.empty() && res.status != 403 && res.status != 404);
    if (!declined) co_return res;
    ++paths.declined;
    if (via == transfer_via::rdma) {
      if (res.status < 300) {  // it stored 0 bytes: put the real ones back before failing
        error_code repair;
        static_cast<void>(co_await execute(op, spec, repair));
      }
      ec = s3::errc::rdma_not_supported;
      co_return res;
    }
  }
  response res = co_await execute(op, spec, ec);
  if (!ec && res.status < 300) paths.http(*op.state, data.size());
  co_return res;
}

/// UploadPart of part `number` (from 1) of `job` with `data`; false (and job.failure set, if it
/// was not) when it failed.
asio::awaitable<bool> send_part(const op_context& op, part_upload& job, std::uint32_t number,
                                std::span<const std::byte> data) {
  const auto md5 = md5_of(data);
  request_spec spec;
  spec.method = http::verb::put;
  spec.bucket = job.bucket;
  spec.key = job.key;
  spec.query = {{"partNumber", std::to_string(number)}, {"uploadId", job.upload_id}};
  spec.headers.emplace_back("content-md5", base64_encode(md5));
  spec.body = data;
  spec.has_body = true;
  spec.payload_hash = std::string(unsigned_payload);
  spec.progress = job.progress;
  error_code ec;
  const response res = co_await put_payload(op, std::move(spec), job.via, *job.paths, ec);
  if (!ec && res.status >= 300) ec = error_of(res, false);
  if (ec) {
    if (!job.failure) job.failure = ec;
    co_return false;
  }
  std::string etag(unquote_etag(res.field("ETag")));
  if (etag.empty()) etag = to_hex(md5);
  job.done[number - 1] = xml::completed_part{number, std::move(etag), {}};
  job.md5s[number - 1] = md5;
  co_return true;
}

asio::awaitable<void> upload_parts(const op_context& op, upload& job) {
  std::vector<std::byte> scratch;
  while (!job.failure && job.next < job.parts) {
    const std::uint64_t index = job.next++;
    const std::uint64_t offset = index * job.part_size;
    const auto length = static_cast<std::size_t>(std::min(job.part_size, job.source->size() - offset));
    error_code ec;
    const std::span<const std::byte> data = job.source->read(offset, length, scratch, ec);
    if (ec) {
      if (!job.failure) job.failure = ec;
      co_return;
    }
    if (!co_await send_part(op, job, static_cast<std::uint32_t>(index + 1), data)) co_return;
  }
}

asio::awaitable<void> abort_upload(const op_context& op, const std::string& bucket, const std::string& key,
                                   const std::string& upload_id) {
  const op_context fresh = make_op(op.state);
  request_spec spec;
  spec.method = http::verb::delete_;
  spec.bucket = bucket;
  spec.key = key;
  spec.query = {{"uploadId", upload_id}};
  // While the client is being destroyed, its destructor waits for this: keep it short.
  spec.timeout = op.state->closing ? std::chrono::seconds(2) : std::min(op.config().request_timeout, abort_timeout);
  error_code ignored;
  (void)co_await execute(fresh, spec, ignored);
}

asio::awaitable<std::string> create_upload(const op_context& op, const std::string& bucket, const std::string& key,
                                           const object_attributes& attributes, error_code& ec) {
  request_spec spec;
  spec.method = http::verb::post;
  spec.bucket = bucket;
  spec.key = key;
  spec.query = {{"uploads", ""}};
  spec.has_body = true;
  spec.retry = retry_mode::rejected_only;
  add_attribute_headers(spec.headers, attributes, ec);
  if (ec) co_return std::string();
  const response res = co_await execute(op, spec, ec);
  if (ec) co_return std::string();
  if (res.status >= 300) {
    ec = error_of(res, false);
    co_return std::string();
  }
  co_return xml::parse_initiate_multipart_upload(res.body, ec).upload_id;
}

/// If-None-Match: * and If-Match of a conditional write (put_options::precondition).
void add_precondition_headers(std::vector<std::pair<std::string, std::string>>& headers,
                              const write_precondition& precondition) {
  if (precondition.if_absent) headers.emplace_back("if-none-match", "*");
  if (precondition.if_etag) headers.emplace_back("if-match", "\"" + *precondition.if_etag + "\"");
}

asio::awaitable<outcome<std::string>> single_put(const op_context& op, const std::string& bucket,
                                                 const std::string& key, byte_source& source,
                                                 const put_options& options, transfer_progress& progress,
                                                 path_counter& paths) {
  outcome<std::string> out;
  std::vector<std::byte> scratch;
  const std::span<const std::byte> data = source.read(0, static_cast<std::size_t>(source.size()), scratch, out.ec);
  if (out.ec) co_return out;
  request_spec spec;
  spec.method = http::verb::put;
  spec.bucket = bucket;
  spec.key = key;
  add_attribute_headers(spec.headers, options.attributes, out.ec);
  if (out.ec) co_return out;
  spec.headers.emplace_back("content-md5", base64_encode(md5_of(data)));
  add_precondition_headers(spec.headers, options.precondition);
  spec.body = data;
  spec.has_body = true;
  spec.payload_hash = std::string(unsigned_payload);
  spec.progress = &progress;
  const response res = co_await put_payload(op, std::move(spec), options.via, paths, out.ec);
  if (out.ec) co_return out;
  if (res.status >= 300) {
    out.ec = error_of(res, false);
    co_return out;
  }
  out.value = unquote_etag(res.field("ETag"));
  co_return out;
}

std::string multipart_etag(std::span<const std::array<std::byte, 16>> md5s) {
  digest etags(digest_kind::md5);
  for (const auto& md5 : md5s) etags.update(std::span<const std::byte>(md5));
  return to_hex(etags.finish()) + "-" + std::to_string(md5s.size());
}

asio::awaitable<std::string> complete_upload(const op_context& op, const std::string& bucket, const std::string& key,
                                             const std::string& upload_id,
                                             const std::vector<xml::completed_part>& parts,
                                             const write_precondition& precondition, const std::string& expected,
                                             error_code& ec) {
  std::string etag;
  const std::string body = xml::complete_multipart_upload_request(parts);
  request_spec spec;
  spec.method = http::verb::post;
  spec.bucket = bucket;
  spec.key = key;
  spec.query = {{"uploadId", upload_id}};
  spec.headers.emplace_back("content-type", "application/xml");
  add_precondition_headers(spec.headers, precondition);
  spec.body = std::as_bytes(std::span(body));
  spec.has_body = true;
  spec.payload_hash = sha256_hex(body);
  spec.retry = retry_mode::complete_upload;
  const response res = co_await execute(op, spec, ec);
  if (!ec && res.status >= 300) {
    ec = error_of(res, false);
    if (ec == errc::no_such_upload && res.attempts > 1 && !expected.empty()) {
      // An earlier attempt may have completed it: accept the object if it is ours.
      error_code head_ec;
      const object_info info = co_await head_request(op, bucket, key, head_ec);
      if (!head_ec && info.attributes.etag == expected) {
        ec = {};
        co_return info.attributes.etag;
      }
    }
  } else if (!ec) {
    etag = xml::parse_complete_multipart_upload_result(res.body, ec).etag;
    if (!ec && etag.empty()) {
      // Completed, but the answer names no ETag (Ceph RGW 16.2 sends <ETag></ETag>): the object's
      // HEAD says it; when the HEAD fails, the ETag an S3 multipart upload has by definition.
      error_code head_ec;
      const object_info info = co_await head_request(op, bucket, key, head_ec);
      etag = !head_ec && !info.attributes.etag.empty() ? info.attributes.etag : expected;
    }
  }
  if (ec) {
    co_await abort_upload(op, bucket, key, upload_id);
    etag.clear();
  }
  co_return etag;
}

asio::awaitable<outcome<std::string>> multipart_put(const op_context& op, const std::string& bucket,
                                                    const std::string& key, std::shared_ptr<byte_source> source,
                                                    const put_options& options, transfer_progress& progress,
                                                    path_counter& paths) {
  outcome<std::string> out;
  const client_config& config = op.config();
  constexpr std::uint64_t max_parts = 10000;
  upload job;
  job.bucket = bucket;
  job.key = key;
  job.source = std::move(source);
  job.part_size = std::max(config.part_size, (job.source->size() + max_parts - 1) / max_parts);
  job.parts = (job.source->size() + job.part_size - 1) / job.part_size;
  job.done.resize(static_cast<std::size_t>(job.parts));
  job.md5s.resize(static_cast<std::size_t>(job.parts));
  job.progress = &progress;
  job.via = options.via;
  job.paths = &paths;

  job.upload_id = co_await create_upload(op, bucket, key, options.attributes, out.ec);
  if (out.ec) co_return out;

  const std::size_t workers = static_cast<std::size_t>(std::min<std::uint64_t>(config.parts_in_flight, job.parts));
  const std::function<asio::awaitable<void>()> worker = [&] { return upload_parts(op, job); };
  co_await run_workers(workers, worker);
  if (job.failure) {
    out.ec = job.failure;
    co_await abort_upload(op, job.bucket, job.key, job.upload_id);
    co_return out;
  }

  // CompleteMultipartUpload, and the ETag it must produce (MD5 of the parts' MD5s, "-N").
  out.value = co_await complete_upload(op, bucket, key, job.upload_id, job.done, options.precondition,
                                       multipart_etag(job.md5s), out.ec);
  co_return out;
}

asio::awaitable<outcome<std::string>> put_op(op_context op, std::string bucket, std::string key,
                                             std::shared_ptr<byte_source> source, put_options options) {
  transfer_progress progress{options.progress, source->size(), 0};
  path_counter paths;
  outcome<std::string> out;
  if (options.via == transfer_via::rdma && !op.config().rdma) {
    out.ec = s3::errc::rdma_not_supported;
    co_return out;
  }
  if (source->size() <= op.config().multipart_threshold) {
    out = co_await single_put(op, bucket, key, *source, options, progress, paths);
  } else {
    out = co_await multipart_put(op, bucket, key, std::move(source), options, progress, paths);
  }
  paths.report_to(options.report);
  co_return out;
}

// -- A stream of unknown length (put_stream) --------------------------------------------------

/// Shared by the workers of one streamed upload (all on the operation's strand). One worker at a
/// time reads the stream (`reading`; `turn` wakes the others when it is done), a whole part into
/// its own buffer, then sends it while the next worker reads: parts_in_flight buffers in all.
struct stream_upload : part_upload {
  asio::posix::stream_descriptor* input = nullptr;
  asio::steady_timer* turn = nullptr;
  bool reading = false;
  bool ended = false;
  std::vector<std::byte> first;  // part 1, read before the upload was created
  std::uint32_t parts = 0;       // part numbers handed out
};

/// The size of part `number` (from 1) of a stream: part_size, doubled every 1,000 parts, at most
/// 5 GiB (S3's largest part), so that 10,000 parts hold a long stream.
std::uint64_t stream_part_size(std::uint64_t part_size, std::uint32_t number) {
  const unsigned doublings = std::min<unsigned>((number - 1) / 1000, 10);
  return std::min<std::uint64_t>(part_size << doublings, std::uint64_t{5} << 30);
}

/// Reads `buffer` full, or less at the stream's end (then sets `ended`); `ec` on a read error.
asio::awaitable<std::size_t> read_part(asio::posix::stream_descriptor& input, std::span<std::byte> buffer, bool& ended,
                                       error_code& ec) {
  const std::size_t n = co_await asio::async_read(input, asio::buffer(buffer.data(), buffer.size()),
                                                  asio::redirect_error(asio::use_awaitable, ec));
  if (ec == asio::error::eof) {
    ec = {};
    ended = true;
  }
  co_return n;
}

asio::awaitable<void> stream_parts(const op_context& op, stream_upload& job) {
  constexpr std::uint32_t max_parts = 10000;
  std::vector<std::byte> buffer = std::exchange(job.first, {});  // one worker sends part 1
  std::uint32_t number = buffer.empty() ? 0 : 1;
  std::size_t length = buffer.size();
  while (!job.failure) {
    if (number == 0) {  // read the next part, in turn
      while (job.reading && !job.failure) {
        error_code woken;
        co_await job.turn->async_wait(asio::redirect_error(asio::use_awaitable, woken));
      }
      if (job.failure || job.ended) co_return;
      job.reading = true;
      number = ++job.parts;
      buffer.resize(static_cast<std::size_t>(stream_part_size(job.part_size, number)));
      error_code ec;
      length = co_await read_part(*job.input, buffer, job.ended, ec);
      job.reading = false;
      job.turn->cancel();
      if (!ec && length > 0 && number > max_parts) ec = s3::errc::entity_too_large;  // more than S3 takes
      if (ec) {
        if (!job.failure) job.failure = op.aborted() ? error_code(asio::error::operation_aborted) : ec;
        job.turn->cancel();
        co_return;
      }
      if (length == 0) {  // the stream ended on a part's boundary: no empty part
        --job.parts;
        co_return;
      }
      job.done.resize(std::max<std::size_t>(job.done.size(), number));
      job.md5s.resize(job.done.size());
    }
    if (!co_await send_part(op, job, number, std::span<const std::byte>(buffer.data(), length))) {
      job.turn->cancel();
      co_return;
    }
    number = 0;
  }
}

/// Restores a descriptor's file status flags (O_NONBLOCK, which asio sets on the open file,
/// shared with the caller's descriptor: a terminal left non-blocking breaks the shell).
class flags_restorer {
 public:
  explicit flags_restorer(int fd) : fd_(fd), flags_(::fcntl(fd, F_GETFL)) {}
  flags_restorer(const flags_restorer&) = delete;
  flags_restorer& operator=(const flags_restorer&) = delete;
  ~flags_restorer() {
    if (flags_ >= 0) (void)::fcntl(fd_, F_SETFL, flags_);
  }

 private:
  int fd_;
  int flags_;
};

asio::awaitable<outcome<std::string>> put_stream_op(op_context op, std::string bucket, std::string key, int fd,
                                                    put_options options) {
  outcome<std::string> out;
  const client_config& config = op.config();
  if (options.via == transfer_via::rdma && !config.rdma) {
    out.ec = s3::errc::rdma_not_supported;
    co_return out;
  }
  const flags_restorer restore(fd);
  const int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) {
    out.ec = error_code(errno, boost::system::system_category());
    co_return out;
  }
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  asio::posix::stream_descriptor input(executor, own);
  asio::steady_timer turn(executor, asio::steady_timer::time_point::max());
  const cancel_scope scope(op, executor, [&input, &turn] {
    error_code ignored;
    input.cancel(ignored);
    turn.cancel();
  });
  transfer_progress progress{options.progress, 0, 0};
  path_counter paths;
  stream_upload job;
  job.first.resize(static_cast<std::size_t>(config.part_size));
  const std::size_t head = op.aborted() ? 0 : co_await read_part(input, job.first, job.ended, out.ec);
  if (op.aborted()) out.ec = asio::error::operation_aborted;
  if (out.ec) co_return out;
  if (job.ended) {  // the whole stream fits one part: one PUT
    region_source whole(const_region{job.first.data(), head});
    progress.total = head;
    out = co_await single_put(op, bucket, key, whole, options, progress, paths);
    paths.report_to(options.report);
    co_return out;
  }
  job.upload_id = co_await create_upload(op, bucket, key, options.attributes, out.ec);
  if (out.ec) co_return out;
  job.input = &input;
  job.turn = &turn;
  job.bucket = std::move(bucket);
  job.key = std::move(key);
  job.part_size = config.part_size;
  job.parts = 1;
  job.done.resize(1);
  job.md5s.resize(1);
  job.progress = &progress;
  job.via = options.via;
  job.paths = &paths;
  const std::function<asio::awaitable<void>()> worker = [&] { return stream_parts(op, job); };
  co_await run_workers(config.parts_in_flight, worker);
  if (!job.failure && op.aborted()) job.failure = asio::error::operation_aborted;
  if (job.failure) {
    out.ec = job.failure;
    co_await abort_upload(op, job.bucket, job.key, job.upload_id);
    co_return out;
  }
  out.value = co_await complete_upload(op, job.bucket, job.key, job.upload_id, job.done, options.precondition,
                                       multipart_etag(job.md5s), out.ec);
  paths.report_to(options.report);
  co_return out;
}

/// PutObject of device memory: one PUT whose bytes the server takes through the client's plane
/// (a same-host CUDA IPC grant, or a fabric that registers device memory). It carries no
/// Content-MD5 or checksum (the bytes are not on the host to hash); the server keeps a CRC32C
/// and answers an opaque ETag. Its x-amz-content-sha256 is the SHA-256 of its token, which no
/// empty body matches: a server that ignores the token rejects it instead of storing 0 bytes.
asio::awaitable<outcome<std::string>> put_device_op(op_context op, std::string bucket, std::string key,
                                                    const_region source, put_options options) {
  outcome<std::string> out;
  constexpr std::uint64_t max_single_put = std::uint64_t{5} << 30;  // S3's PutObject limit
  if (options.via == transfer_via::http || source.size > max_single_put) {
    out.ec = sluice::errc::unsupported_memory;  // no body from device memory; no multipart of it yet
    co_return out;
  }
  // Registered for the server to read (rdma_op::read): the only access it is granted.
  const auto grant =
      grant_for(op.config(), transfer_via::rdma, sluice::detail::readable_as_region(source), rdma_op::read, out.ec);
  if (!out.ec && !grant) out.ec = s3::errc::rdma_not_supported;
  if (out.ec) co_return out;
  request_spec spec;
  spec.method = http::verb::put;
  spec.bucket = std::move(bucket);
  spec.key = std::move(key);
  add_attribute_headers(spec.headers, options.attributes, out.ec);
  if (out.ec) co_return out;
  spec.has_body = true;  // Content-Length: 0
  spec.payload_hash = sha256_hex(grant->token());
  spec.headers.emplace_back("x-amz-rdma-token", grant->token());
  spec.headers.emplace_back("x-amz-decoded-content-length", std::to_string(source.size));
  add_precondition_headers(spec.headers, options.precondition);
  path_counter paths;
  const response res = co_await execute(op, spec, out.ec);
  if (out.ec) co_return out;
  if (res.status < 300 && moved_by_rdma(res)) {
    paths.rdma(*op.state, source.size);
    if (options.progress) options.progress(source.size, source.size);
    out.value = unquote_etag(res.field("ETag"));
  } else if (res.field("x-amz-rdma-reply") == "501" || (res.field("x-amz-rdma-reply").empty() && res.status < 300)) {
    ++paths.declined;
    out.ec = s3::errc::rdma_not_supported;
  } else {
    out.ec = error_of(res, false);
  }
  paths.report_to(options.report);
  co_return out;
}

asio::awaitable<outcome<std::string>> put_region_op(op_context op, std::string bucket, std::string key,
                                                    const_region source, put_options options) {
  outcome<std::string> out;
  if (!source.host_accessible() && source.size > 0) {
    if (source.data == nullptr) {
      out.ec = sluice::errc::invalid_argument;
      co_return out;
    }
    co_return co_await put_device_op(std::move(op), std::move(bucket), std::move(key), source, std::move(options));
  }
  if (source.data == nullptr && source.size > 0) {
    out.ec = sluice::errc::invalid_argument;
    co_return out;
  }
  if (source.size == 0) source = const_region{};  // an empty object: no device bytes to read
  std::shared_ptr<byte_source> bytes = std::make_shared<region_source>(source);
  co_return co_await put_op(std::move(op), std::move(bucket), std::move(key), std::move(bytes), std::move(options));
}

asio::awaitable<outcome<std::string>> put_source_op(op_context op, std::string bucket, std::string key,
                                                    std::shared_ptr<byte_source> source, put_options options) {
  if (!source) {
    outcome<std::string> out;
    out.ec = sluice::errc::invalid_argument;
    co_return out;
  }
  co_return co_await put_op(std::move(op), std::move(bucket), std::move(key), std::move(source), std::move(options));
}

asio::awaitable<outcome<std::string>> put_file_op(op_context op, std::string bucket, std::string key,
                                                  std::filesystem::path file, put_options options) {
  outcome<std::string> out;
  std::shared_ptr<byte_source> bytes = file_source::open(file, out.ec);
  if (out.ec) co_return out;
  co_return co_await put_op(std::move(op), std::move(bucket), std::move(key), std::move(bytes), std::move(options));
}

}  // namespace sluice::s3::detail::client_impl
