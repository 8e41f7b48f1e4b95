// Implementation of include/sluice/s3/gateway_store.hpp; a translation unit of its own.
#include "server/support.hpp"  // parse_range: a ranged GET's Range header, as the server reads it

#include <sluice/names.hpp>
#include <sluice/s3/checksum.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/gateway_store.hpp>

#include <simdjson.h>
#include <boost/system/system_error.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <utility>

namespace sluice::s3 {

// -- cache_index ------------------------------------------------------------------------------

namespace detail {

void cache_index::insert(const std::string& name, entry e) {
  erase(name);
  lru_.push_back(name);
  used_ += e.size;
  entries_.emplace(name, slot{std::move(e), std::prev(lru_.end())});
}

const cache_index::entry* cache_index::find(const std::string& name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second.value;
}

bool cache_index::touch(const std::string& name, std::optional<clock::time_point> validated,
                        std::optional<std::chrono::system_clock::time_point> last_modified) {
  const auto it = entries_.find(name);
  if (it == entries_.end()) return false;
  lru_.splice(lru_.end(), lru_, it->second.position);
  if (validated) it->second.value.validated = validated;
  if (last_modified) it->second.value.last_modified = last_modified;
  return true;
}

bool cache_index::erase(const std::string& name) {
  const auto it = entries_.find(name);
  if (it == entries_.end()) return false;
  used_ -= it->second.value.size;
  lru_.erase(it->second.position);
  entries_.erase(it);
  return true;
}

std::vector<std::string> cache_index::victims(std::uint64_t incoming, std::string_view except) const {
  std::vector<std::string> out;
  if (fits(incoming)) return out;
  std::uint64_t used = used_ + reserved_;
  for (const std::string& name : lru_) {
    if (name == except) continue;
    out.push_back(name);
    used -= entries_.find(name)->second.value.size;
    if (incoming <= budget_ && used <= budget_ - incoming) break;
  }
  return out;
}

std::optional<std::string> cache_index::oldest(std::string_view except) const {
  for (const std::string& name : lru_) {
    if (name != except) return name;
  }
  return std::nullopt;
}

object_ref cache_index::object_of(std::string_view name) {
  const auto slash = name.find('/');
  if (slash == std::string_view::npos) return {std::string(name), {}};
  return {std::string(name.substr(0, slash)), std::string(name.substr(slash + 1))};
}

// -- the steps of a fetch ---------------------------------------------------------------------

fetch_plan::fetch_plan(std::uint64_t size, std::uint64_t chunk, std::size_t streams, bool ramp) noexcept
    : size_(size), chunk_(std::max<std::uint64_t>(chunk, 1)) {
  if (ramp && streams > 1 && size_ > 0) {
    first_ = std::max(chunk_ / 16, std::min(chunk_, mib));
    per_round_ = streams;
    for (std::uint64_t n = first_; n < chunk_ && ramp_bytes_ < size_; n *= 2) {
      ramp_steps_ += per_round_;
      ramp_bytes_ += per_round_ * n;
    }
  }
  if (size_ > ramp_bytes_) {
    steps_ = ramp_steps_ + (size_ - ramp_bytes_ + chunk_ - 1) / chunk_;
  } else {
    while (steps_ < ramp_steps_ && offset(steps_) < size_) ++steps_;
  }
}

std::uint64_t fetch_plan::offset(std::uint64_t step) const noexcept {
  if (step >= ramp_steps_) return ramp_bytes_ + (step - ramp_steps_) * chunk_;
  const std::uint64_t round = step / per_round_;
  return per_round_ * first_ * ((std::uint64_t{1} << round) - 1) + (step % per_round_) * (first_ << round);
}

std::uint64_t fetch_plan::length(std::uint64_t step) const noexcept {
  const std::uint64_t n = step >= ramp_steps_ ? chunk_ : first_ << (step / per_round_);
  return std::min(n, size_ - offset(step));
}

// -- a copy being fetched ---------------------------------------------------------------------

void fill_progress::wait_until(std::uint64_t end, error_code& ec) const {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return error_ || ready(end); });
  ec = ready(end) ? error_code{} : error_;
}

void fill_progress::advance(std::uint64_t ready) {
  {
    const std::lock_guard lock(mutex_);
    if (ready <= ready_.load(std::memory_order_relaxed)) return;
    ready_.store(ready, std::memory_order_release);
  }
  changed_.notify_all();
}

void fill_progress::fail(error_code ec) {
  {
    const std::lock_guard lock(mutex_);
    error_ = ec ? ec : error_code(sluice::errc::protocol_violation);
  }
  changed_.notify_all();
}

inline std::byte* map_file_data(int fd, std::uint64_t data_offset, std::uint64_t size, int protection, void*& base,
                                std::size_t& length, error_code& ec) {
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t aligned = data_offset - data_offset % page;
  length = static_cast<std::size_t>(data_offset - aligned + size);
  base = ::mmap(nullptr, length, protection, MAP_SHARED, fd, static_cast<off_t>(aligned));
  if (base == MAP_FAILED) {
    ec = error_code(errno, boost::system::generic_category());
    base = nullptr;
    length = 0;
    return nullptr;
  }
  return static_cast<std::byte*>(base) + (data_offset - aligned);
}

std::shared_ptr<growing_file> growing_file::open(int fd, std::uint64_t data_offset, std::uint64_t size,
                                                 error_code& ec) {
  ec = {};
  // The file gets its final size first (a sparse tail): the mapping then covers bytes not written
  // yet without SIGBUS, and the writer's publish truncates to this same size.
  if (::ftruncate(fd, static_cast<off_t>(data_offset + size)) != 0) {
    ec = error_code(errno, boost::system::generic_category());
    return nullptr;
  }
  std::shared_ptr<growing_file> out(new growing_file);
  out->fd_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (out->fd_ < 0) {
    ec = error_code(errno, boost::system::generic_category());
    return nullptr;
  }
  out->data_offset_ = data_offset;
  out->size_ = static_cast<std::size_t>(size);
  if (size == 0) return out;
  out->data_ = map_file_data(out->fd_, data_offset, size, PROT_READ, out->base_, out->length_, ec);
  if (ec) return nullptr;
  return out;
}

growing_file::~growing_file() {
  if (base_ != nullptr) ::munmap(base_, length_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace detail

// -- helpers ------------------------------------------------------------------------------------

namespace gateway_impl {

// An ETag the server may echo in a header: printable ASCII without quotes, at most 1 KiB.
inline bool is_sane_etag(std::string_view etag) noexcept {
  if (etag.empty() || etag.size() > 1024) return false;
  return std::all_of(etag.begin(), etag.end(), [](char c) { return c > 0x20 && c < 0x7f && c != '"'; });
}

inline error_code errno_code(int value) { return {value, boost::system::generic_category()}; }

// An upstream answer that is not HTTP (a bad status line, header or Content-Length): garbage, not
// a failure to reach the upstream. An answer cut short is a failure (the connection broke).
inline bool is_malformed_answer(const error_code& ec) noexcept {
  namespace http = boost::beast::http;
  if (ec.category() != make_error_code(http::error::bad_version).category()) return false;
  return ec != http::error::end_of_stream && ec != http::error::partial_message && ec != http::error::short_read &&
         ec != http::error::need_more && ec != http::error::need_buffer;
}

// An upstream's Last-Modified, unless it sent none (the epoch) or one past 2200 (system_clock
// counts nanoseconds: it ends in 2262).
inline std::optional<std::chrono::system_clock::time_point> known_time(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  if (t <= system_clock::time_point{} || t > system_clock::time_point{sys_days{year{2200} / 1 / 1}}) {
    return std::nullopt;
  }
  return t;
}

// pwrite all of `data` at `offset`.
inline bool write_all(int fd, const std::byte* data, std::size_t size, std::uint64_t offset, error_code& ec) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ec = errno_code(n < 0 ? errno : EIO);
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return true;
}

inline bool read_all(int fd, std::byte* data, std::size_t size, std::uint64_t offset, error_code& ec) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ec = n < 0 ? errno_code(errno) : error_code(sluice::errc::protocol_violation);
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return true;
}

inline bool is_no_space(const error_code& ec) noexcept {
  return (ec.category() == boost::system::generic_category() || ec.category() == boost::system::system_category()) &&
         (ec.value() == ENOSPC || ec.value() == EDQUOT);
}

// A writable shared mapping of a staged cache file's data (extended to `size` first), which a
// fetch receives into: each byte is then copied once on its way in, from the socket into the page
// cache, by every fetch stream at once (pwrite()s into one file serialize on its inode lock).
// data() is null when it cannot be used: a kernel without MADV_POPULATE_WRITE (before 5.14), or
// a failed mmap; the caller then writes through a buffer.
class write_window {
 public:
  write_window(int fd, std::uint64_t data_offset, std::uint64_t size) {
    if (size == 0 || ::ftruncate(fd, static_cast<off_t>(data_offset + size)) != 0) return;
    static const bool populate = ::madvise(nullptr, 0, MADV_POPULATE_WRITE) == 0;  // known advice?
    if (!populate) return;
    error_code ignored;
    data_ = detail::map_file_data(fd, data_offset, size, PROT_READ | PROT_WRITE, base_, length_, ignored);
    // 2 MiB pages where the file system offers them on advice (tmpfs mounted huge=advise): each
    // insertion into the file's page cache then adds 512 pages, which is what bounds a miss into
    // 4 KiB tmpfs pages (docs/gateway.md). A tmpfs mounted huge=within_size needs no advice.
    if (data_ != nullptr) (void)::madvise(base_, length_, MADV_HUGEPAGE);
  }
  write_window(const write_window&) = delete;
  write_window& operator=(const write_window&) = delete;
  ~write_window() {
    if (base_ != nullptr) ::munmap(base_, length_);
  }
  [[nodiscard]] std::byte* data() const noexcept { return data_; }

  // Backs [offset, offset + n) with pages or disk blocks before it is written, so that a full disk
  // is ENOSPC here instead of a SIGBUS on the write.
  void back(std::uint64_t offset, std::size_t n, error_code& ec) const {
    ec = {};
    static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto first = reinterpret_cast<std::uintptr_t>(data_ + offset);
    const std::uintptr_t start = first - first % page;
    for (int attempt = 0; attempt < 100; ++attempt) {
      // NOLINTNEXTLINE(performance-no-int-to-ptr): the page that holds data_ + offset
      if (::madvise(reinterpret_cast<void*>(start), first + n - start, MADV_POPULATE_WRITE) == 0) return;
      if (errno != EINTR && errno != EAGAIN) break;
    }
    ec = errno_code(errno == EFAULT ? ENOSPC : errno);  // EFAULT: "a SIGBUS would have been generated"
  }

 private:
  void* base_ = nullptr;
  std::size_t length_ = 0;
  std::byte* data_ = nullptr;
};

}  // namespace gateway_impl

// -- config -------------------------------------------------------------------------------------

std::optional<config_error> gateway_store_config::validate() const {
  if (root.empty()) return config_error{"root", "must not be empty"};
  if (auto e = upstream.validate()) return config_error{"upstream." + e->field, e->reason};
  if (cache_bytes < mib) return config_error{"cache_bytes", "must be at least 1 MiB"};
  if (chunk_bytes < mib || chunk_bytes > (std::uint64_t{1} << 32)) {
    return config_error{"chunk_bytes", "must be 1 MiB..4 GiB"};
  }
  if (fetch_streams == 0 || fetch_streams > 64) return config_error{"fetch_streams", "must be 1..64"};
  if (max_object_bytes == 0 || max_object_bytes > (std::uint64_t{1} << 62)) {
    return config_error{"max_object_bytes", "must be 1..2^62"};
  }
  return std::nullopt;
}

std::optional<gateway_store_config> parse_gateway_config(std::string_view json, gateway_store_config base,
                                                         error_code& ec, config_error& error) {
  ec = {};
  const auto fail = [&](const std::string& field, std::string reason) -> std::optional<gateway_store_config> {
    error = {field.empty() ? std::string("gateway") : "gateway." + field, std::move(reason)};
    ec = sluice::errc::invalid_config;
    return std::nullopt;
  };
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto err = parser.parse(simdjson::padded_string(json)).get(root); err != simdjson::SUCCESS) {
    error = {"", std::string("malformed JSON: ") + simdjson::error_message(err)};
    ec = sluice::errc::invalid_config;
    return std::nullopt;
  }
  if (!root.is_object()) return std::nullopt;  // parse_server_config says what is wrong with it
  // Beside the server's settings, or among them when those are under "server".
  simdjson::dom::element found;
  if (root["gateway"].get(found) != simdjson::SUCCESS && root["server"]["gateway"].get(found) != simdjson::SUCCESS) {
    return std::nullopt;
  }
  simdjson::dom::object section;
  if (found.get(section) != simdjson::SUCCESS) return fail("", "expected an object");
  gateway_store_config config = std::move(base);
  for (auto member : section) {
    const std::string key(member.key);
    const simdjson::dom::element value = member.value;
    std::string_view text;
    std::uint64_t number = 0;
    bool flag = false;
    const auto string_field = [&](std::string& into) {
      if (value.get(text) != simdjson::SUCCESS) return false;
      into = std::string(text);
      return true;
    };
    const auto size_field = [&](std::uint64_t& into) {
      if (value.get(number) == simdjson::SUCCESS) {
        into = number;
        return true;
      }
      if (value.get(text) != simdjson::SUCCESS) return false;
      const auto parsed = parse_size(text);
      if (parsed) into = *parsed;
      return parsed.has_value();
    };
    const auto seconds_field = [&](std::chrono::seconds& into) {
      if (value.get(number) != simdjson::SUCCESS || number > 366ULL * 24 * 3600) return false;
      into = std::chrono::seconds(number);
      return true;
    };
    bool ok = true;
    if (key == "upstream") {
      ok = string_field(config.upstream.endpoint);
    } else if (key == "upstream_access_key_id") {
      ok = string_field(config.upstream.creds.access_key_id);
    } else if (key == "upstream_secret_access_key") {
      ok = string_field(config.upstream.creds.secret_access_key);
    } else if (key == "upstream_region") {
      ok = string_field(config.upstream.region);
    } else if (key == "upstream_ca_bundle") {
      std::string path;
      ok = string_field(path);
      config.upstream.ca_bundle = path;
    } else if (key == "upstream_timeout_s") {
      ok = seconds_field(config.upstream.request_timeout) && config.upstream.request_timeout.count() > 0;
    } else if (key == "cache_bytes") {
      ok = size_field(config.cache_bytes);
    } else if (key == "chunk_bytes") {
      ok = size_field(config.chunk_bytes);
    } else if (key == "revalidate_after_s") {
      ok = seconds_field(config.revalidate_after);
    } else if (key == "stale_if_error") {
      ok = value.get(flag) == simdjson::SUCCESS;
      if (ok) config.stale_if_error = flag;
    } else if (key == "fetch_streams") {
      ok = value.get(number) == simdjson::SUCCESS && number >= 1 && number <= 64;
      if (ok) config.fetch_streams = static_cast<std::uint32_t>(number);
    } else {
      return fail(key, "unknown field");
    }
    if (!ok) return fail(key, "unexpected value");
  }
  return config;
}

// -- writer -------------------------------------------------------------------------------------

gateway_store::writer::writer(writer&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)),
      fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      object_(std::move(other.object_)),
      written_(std::exchange(other.written_, 0)),
      precondition_(std::exchange(other.precondition_, {})) {
  other.path_.clear();
}

gateway_store::writer& gateway_store::writer::operator=(writer&& other) noexcept {
  if (this != &other) {
    reset();
    store_ = std::exchange(other.store_, nullptr);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    other.path_.clear();
    object_ = std::move(other.object_);
    written_ = std::exchange(other.written_, 0);
    precondition_ = std::exchange(other.precondition_, {});
  }
  return *this;
}

gateway_store::writer::~writer() { reset(); }

void gateway_store::writer::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!path_.empty()) {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  path_.clear();
  store_ = nullptr;
  written_ = 0;
  precondition_ = {};
}

void gateway_store::writer::write(std::span<const std::byte> data, error_code& ec) {
  ec = {};
  if (store_ == nullptr) {
    ec = sluice::errc::invalid_argument;
    return;
  }
  if (data.size() > store_->config_.max_object_bytes - written_) {
    ec = sluice::errc::capacity_exceeded;
    return;
  }
  if (!gateway_impl::write_all(fd_, data.data(), data.size(), written_, ec)) return;
  written_ += data.size();
}

object_info gateway_store::writer::commit(const object_attributes& attributes, error_code& ec) {
  ec = {};
  if (store_ == nullptr) {
    ec = sluice::errc::invalid_argument;
    return {};
  }
  object_info info = store_->commit_put(*this, attributes, ec);
  reset();
  return info;
}

// -- the store ----------------------------------------------------------------------------------

gateway_store::gateway_store(unopened, gateway_store_config config)
    : config_(std::move(config)), index_(config_.cache_bytes) {}

gateway_store::~gateway_store() {
  // A streaming fetch's thread uses the cache and the upstream client: it ends first (it is
  // bounded by the upstream timeout).
  std::unique_lock lock(mutex_);
  fetched_.wait(lock, [&] { return streaming_ == 0; });
}

std::unique_ptr<gateway_store> gateway_store::open(gateway_store_config config, error_code& ec) {
  ec = {};
  if (auto error = config.validate()) {
    std::fprintf(stderr, "gateway_store: %s\n", error->message().c_str());
    ec = sluice::errc::invalid_config;
    return nullptr;
  }
  std::unique_ptr<gateway_store> store(new gateway_store(unopened{}, std::move(config)));
  const auto& root = store->config_.root;
  std::error_code fs_error;
  std::filesystem::create_directories(root, fs_error);
  store->spool_ = root / "spool";
  std::filesystem::remove_all(store->spool_, fs_error);
  std::filesystem::create_directories(store->spool_, fs_error);
  if (fs_error) {
    ec = gateway_impl::errno_code(fs_error.value());
    return nullptr;
  }
  store->cache_ = fs_store::open(
      {.root = root / "cache", .max_object_bytes = store->config_.max_object_bytes, .fsync = store->config_.fsync}, ec);
  if (ec) return nullptr;
  // Index every cached copy, unvalidated (see "Crash" at the top of the header).
  for (const bucket_info& bucket : store->cache_->list_buckets(ec)) {
    list_request page{bucket.name, {}, {}, 1000};
    for (;;) {
      list_result batch = store->cache_->list(page, ec);
      if (ec) return nullptr;
      for (const object_info& o : batch.objects) {
        store->index_.insert(detail::cache_index::name_of({bucket.name, o.key}),
                             {o.size, o.attributes.etag, std::nullopt});
      }
      if (!batch.truncated || batch.objects.empty()) break;
      page.start_after = batch.objects.back().key;
    }
  }
  if (ec) return nullptr;
  {
    std::lock_guard lock(store->mutex_);
    (void)store->make_room(0, {});
  }
  try {
    // A fetch's streams wait on the client's io threads: at least one each.
    auto& upstream = store->config_.upstream;
    upstream.io_threads = std::max<std::size_t>(upstream.io_threads, store->config_.fetch_streams);
    store->upstream_ = std::make_unique<client>(upstream);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "gateway_store: upstream: %s\n", e.what());
    ec = sluice::errc::invalid_config;
    return nullptr;
  }
  return store;
}

gateway_statistics gateway_store::statistics() const {
  std::lock_guard lock(mutex_);
  gateway_statistics out = stats_;
  out.cached_bytes = index_.used();
  out.cached_objects = index_.size();
  return out;
}

bool gateway_store::upstream_failed(const error_code& ec) noexcept {
  if (!ec) return false;
  if (ec.category() == s3_category()) {
    switch (static_cast<s3::errc>(ec.value())) {
      case s3::errc::internal_error:
      case s3::errc::service_unavailable:
      case s3::errc::slow_down:
      case s3::errc::request_timeout: return true;
      default: return false;
    }
  }
  // The upstream's own answers that are not failures of the upstream.
  if (ec.category() == sluice_category()) return false;
  if (gateway_impl::is_malformed_answer(ec)) return false;  // garbage: from_upstream says 502
  return true;  // connection refused or reset, timed out, TLS, name resolution
}

error_code gateway_store::from_upstream(const error_code& ec) noexcept {
  if (!ec) return {};
  if (upstream_failed(ec)) return s3::errc::service_unavailable;
  // Garbage from the upstream (an answer that is not XML, headers that break the protocol) is the
  // upstream's fault, not the client's: 502, never the 400 MalformedXML of the client's parser.
  if (ec == s3::errc::malformed_xml || ec == sluice::errc::protocol_violation ||
      gateway_impl::is_malformed_answer(ec)) {
    return s3::errc::bad_gateway;
  }
  if (ec == s3::errc::no_such_key) return sluice::errc::no_such_object;
  if (ec == s3::errc::no_such_bucket) return sluice::errc::no_such_bucket;
  if (ec == s3::errc::precondition_failed) return sluice::errc::precondition_failed;
  if (ec == s3::errc::bucket_already_owned_by_you) return sluice::errc::bucket_exists;
  if (ec == s3::errc::bucket_not_empty) return sluice::errc::bucket_not_empty;
  if (ec == s3::errc::no_such_upload) return sluice::errc::no_such_upload;
  return ec;
}

void gateway_store::log_upstream_failure(const char* what, const object_ref& object, const error_code& upstream,
                                         const error_code& answered) const {
  // The upstream's own answers are passed on; its failures and its garbage are said here, with
  // the upstream's name (the client's answer is a 503 or 502 without it).
  if (answered != s3::errc::service_unavailable && answered != s3::errc::bad_gateway) return;
  std::fprintf(stderr, "gateway_store: %s %s/%s: upstream %s %s: %s\n", what, object.bucket.c_str(), object.key.c_str(),
               config_.upstream.endpoint.c_str(), answered == s3::errc::bad_gateway ? "answered garbage" : "failed",
               upstream.message().c_str());
}

bool gateway_store::sane(const object_info& info) const noexcept {
  return info.size <= config_.max_object_bytes && gateway_impl::is_sane_etag(info.attributes.etag);
}

void gateway_store::ensure_cache_bucket(std::string_view bucket, error_code& ec) {
  ec = {};
  cache_->create_bucket(bucket, ec);
  if (ec == sluice::errc::bucket_exists) ec = {};
}

void gateway_store::drop(const object_ref& object) {
  {
    std::lock_guard lock(mutex_);
    index_.erase(detail::cache_index::name_of(object));
  }
  error_code ignored;
  cache_->remove(object, ignored);
}

bool gateway_store::make_room(std::uint64_t incoming, const std::string& except) {
  // Called with mutex_ held; unlinking a file does not wait for the disk.
  if (incoming > index_.budget()) return false;
  for (const std::string& name : index_.victims(incoming, except)) {
    index_.erase(name);
    ++stats_.evictions;
    error_code ignored;
    cache_->remove(detail::cache_index::object_of(name), ignored);
  }
  return index_.fits(incoming);
}

gateway_store::reserved_room::~reserved_room() {
  if (bytes_ == 0) return;
  std::lock_guard lock(store_->mutex_);
  claim();
}

void gateway_store::reserved_room::claim() noexcept {
  if (bytes_ > 0) store_->index_.release(bytes_);
  bytes_ = 0;
}

bool gateway_store::reserve_room(std::uint64_t incoming, const std::string& except, reserved_room& room) {
  std::lock_guard lock(mutex_);
  if (!make_room(incoming, except)) return false;
  index_.reserve(incoming);
  room.store_ = this;
  room.bytes_ = incoming;
  return true;
}

void gateway_store::fetch_range(const object_ref& object, const object_info& info, std::uint64_t offset,
                                std::span<std::byte> out, error_code& ec, progress_callback progress,
                                detail::upstream_get_answer* answer) {
  ec = {};
  get_options options{byte_range{offset, out.size()}, std::move(progress)};
  options.if_match = info.attributes.etag;
  // Every answer is checked before its body is read (on a client thread; the parts of one GET one
  // after the other): the version asked for, the range asked for, the size the fetch counts on.
  detail::upstream_get_answer seen;
  const detail::upstream_get_request asked{info.attributes.etag, offset, out.size(), info.size,
                                           config_.max_object_bytes};
  options.check = [&](unsigned status, const std::function<std::string_view(std::string_view)>& field) {
    error_code verdict;
    seen = detail::check_upstream_get(
        {status, field("ETag"), field("Content-Length"), field("Content-Range"), field("x-amz-server-side-encryption"),
         field("x-amz-server-side-encryption-customer-algorithm")},
        asked, verdict);
    return verdict;
  };
  const std::uint64_t got = upstream_->get_object(
      object.bucket, object.key, region{out.data(), out.size(), memory_kind::host_pageable, -1}, options, ec);
  if (!ec && got != out.size()) ec = sluice::errc::protocol_violation;
  if (ec) ec = from_upstream(ec);
  if (answer != nullptr) *answer = seen;
}

bool gateway_store::evict_oldest(const std::string& except) {
  std::optional<std::string> victim;
  {
    std::lock_guard lock(mutex_);
    victim = index_.oldest(except);
    if (!victim) return false;
    index_.erase(*victim);
    ++stats_.evictions;
  }
  error_code ignored;
  cache_->remove(detail::cache_index::object_of(*victim), ignored);
  return true;
}

void gateway_store::evicting(const std::string& name, error_code& ec, const std::function<void(error_code&)>& attempt) {
  for (;;) {
    attempt(ec);
    // A full disk: evict the least recently used copy and try again.
    if (!ec || !gateway_impl::is_no_space(ec) || !evict_oldest(name)) return;
  }
}

bool gateway_store::disk_has_room(const std::string& name) {
  // What every fetch under way may still write (theirs and this one, counted whole), plus room
  // for the copies' headers and the file system's own blocks.
  constexpr std::uint64_t slack = std::uint64_t{4} << 20;
  for (;;) {
    std::error_code fs_error;
    const std::filesystem::space_info space = std::filesystem::space(config_.root / "cache", fs_error);
    if (fs_error) return true;  // unknown: the writes will say
    std::uint64_t needed = 0;
    {
      std::lock_guard lock(mutex_);
      needed = index_.reserved() + slack;
    }
    if (space.available >= needed) return true;
    if (needed > space.capacity || !evict_oldest(name)) return false;  // the disk cannot hold them all
  }
}

gateway_store::mapping gateway_store::fetch(const object_ref& object, const object_info& info, error_code& ec,
                                            const std::shared_ptr<detail::fill_progress>& fill,
                                            const std::function<void(const streaming_copy&)>& started,
                                            std::optional<std::uint64_t>* other_size) {
  ec = {};
  const std::string name = detail::cache_index::name_of(object);
  const std::uint64_t size = info.size;
  // A single-part MD5 ETag is the MD5 of the bytes (unless an answer says the object is
  // encrypted): nothing that contradicts it is cached or served whole.
  const bool md5_etag = detail::is_md5_etag(info.attributes.etag);
  std::atomic<bool> encrypted{false};
  const auto answered = [&](const detail::upstream_get_answer& a) {
    if (a.encrypted) encrypted = true;
    if (a.other_size && other_size != nullptr && !*other_size) *other_size = a.total;
  };
  // Whether `md5` (of all the bytes) contradicts the ETag.
  const auto contradicts = [&](digest& md5) {
    if (!md5_etag || encrypted) return false;
    const std::vector<std::byte> sum = md5.finish();
    const std::string hex = to_hex(sum);
    std::string etag = info.attributes.etag;
    std::transform(etag.begin(), etag.end(), etag.begin(),
                   [](char c) { return c >= 'A' && c <= 'F' ? static_cast<char>(c - 'A' + 'a') : c; });
    if (hex == etag) return false;
    ec = s3::errc::bad_gateway;
    log_upstream_failure("GET", object, s3::errc::bad_digest, ec);  // "BadDigest": the MD5 is not the ETag
    return true;
  };
  reserved_room room;  // concurrent fetches must not count on the same free space
  // A streaming answer cannot fall back to memory once it has begun: the disk must hold the copy.
  const bool cacheable = reserve_room(size, name, room) && disk_has_room(name);
  if (cacheable) ensure_cache_bucket(object.bucket, ec);
  fs_store::writer staged;
  if (cacheable && !ec) staged = cache_->begin_put(object, ec);
  // Pass through from memory: the cache cannot take it (over the budget, or a full disk).
  const auto pass_through = [&]() -> mapping {
    ec = {};
    if (size > config_.passthrough_bytes) {
      ec = s3::errc::slow_down;
      std::fprintf(stderr, "gateway_store: %s (%llu bytes) fits neither the cache nor passthrough_bytes\n",
                   name.c_str(), static_cast<unsigned long long>(size));
      return {};
    }
    mapping m;
    m.memory_ = std::make_unique<std::byte[]>(std::max<std::uint64_t>(size, 1));
    m.size_ = static_cast<std::size_t>(size);
    detail::upstream_get_answer a;
    if (size > 0) fetch_range(object, info, 0, {m.memory_.get(), m.size_}, ec, {}, &a);
    answered(a);
    if (ec) return {};
    digest md5(digest_kind::md5);
    md5.update(std::span<const std::byte>(m.memory_.get(), m.size_));
    if (contradicts(md5)) return {};
    m.info_ = info;
    std::lock_guard lock(mutex_);
    ++stats_.passthroughs;
    stats_.upstream_bytes += size;
    return m;
  };
  if (!cacheable || ec) return pass_through();

  // Ranged steps of chunk_bytes (ramped up to it when readers wait for the written prefix), read
  // by fetch_streams workers: each takes the next step and receives it from the upstream straight
  // into its place in the file, through a writable mapping (else into its buffer, then pwrite()).
  // The prefix of whole steps is reported to `fill`: a step's bytes are final only once its GET
  // ended (a retried attempt writes its range again, and a hostile upstream may send other
  // bytes then), and the MD5 hashes exactly what readers were given.
  const detail::fetch_plan plan(size, std::min<std::uint64_t>(config_.chunk_bytes, size), config_.fetch_streams,
                                static_cast<bool>(started));
  const std::uint64_t steps = plan.steps();
  const std::size_t streams = static_cast<std::size_t>(std::min<std::uint64_t>(config_.fetch_streams, steps));
  std::optional<streaming_copy> growing;
  if (started) {  // streaming: readers get a mapping of the file being written
    growing.emplace(
        streaming_copy{detail::growing_file::open(staged.native_handle(), staged.data_offset(), size, ec), fill, info});
    if (ec) return {};
    if (!gateway_impl::known_time(info.last_modified)) growing->info.last_modified = std::chrono::system_clock::now();
  }
  const int fd = staged.native_handle();
  const std::uint64_t data_offset = staged.data_offset();
  std::optional<gateway_impl::write_window> window(std::in_place, fd, data_offset, size);
  // The written prefix: every step before `whole` is in the file.
  std::mutex progress_mutex;
  std::vector<bool> got(steps);
  std::uint64_t whole = 0;
  bool handed = false;  // `started` was called
  error_code first_error;
  // Readers get the prefix but its last byte until the MD5 said yes (the caller's finish() gives
  // it): a copy that turns out wrong can only end short, never whole.
  const std::uint64_t held_back = md5_etag && size > 0 ? 1 : 0;
  const auto arrived = [&](std::uint64_t step) {  // under progress_mutex
    got[step] = true;
    while (whole < steps && got[whole]) ++whole;
    const std::uint64_t prefix = whole < steps ? plan.offset(whole) : size;
    if (fill) fill->advance(std::min(prefix, size - held_back));
    // Readers join once the first step's answer matched the HEAD (its version and size): a HEAD
    // that misstated the size is fetched again with the GET's, before anyone is answered.
    if (started && !handed && whole > 0 && !first_error) {
      handed = true;
      started(*growing);
    }
  };
  // The MD5 of the prefix, advanced by whichever worker finds it free, finished after them.
  std::mutex hash_mutex;
  digest md5(digest_kind::md5);
  std::uint64_t hashed = 0;
  std::atomic<std::uint64_t> ready{0};                          // the prefix of whole steps
  const auto hash_to = [&](std::uint64_t end, error_code& e) {  // under hash_mutex
    std::vector<std::byte> buffer;
    while (hashed < end && !e) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(end - hashed, 4 * mib));
      if (const std::byte* bytes = window ? window->data() : nullptr) {
        md5.update(std::span<const std::byte>(bytes + hashed, n));
      } else {
        buffer.resize(n);
        if (!gateway_impl::read_all(fd, buffer.data(), n, data_offset + hashed, e)) return;
        md5.update(std::span<const std::byte>(buffer.data(), n));
      }
      hashed += n;
    }
  };
  std::atomic<std::uint64_t> next{0};
  const auto work = [&] {
    std::unique_ptr<std::byte[]> buffer;
    for (;;) {
      const std::uint64_t step = next.fetch_add(1);
      if (step >= steps) return;
      const std::uint64_t offset = plan.offset(step);
      const auto n = static_cast<std::size_t>(plan.length(step));
      error_code e;
      detail::upstream_get_answer a;
      if (std::byte* into = window->data()) {
        // Received in place (a retried attempt writes its range again).
        evicting(name, e, [&](error_code& x) { window->back(offset, n, x); });
        if (!e) fetch_range(object, info, offset, {into + offset, n}, e, {}, &a);
      } else {
        try {
          if (!buffer) buffer = std::make_unique_for_overwrite<std::byte[]>(plan.longest());
          fetch_range(object, info, offset, {buffer.get(), n}, e, {}, &a);
        } catch (const std::bad_alloc&) {
          e = gateway_impl::errno_code(ENOMEM);
        }
        if (!e) {
          evicting(name, e,
                   [&](error_code& x) { gateway_impl::write_all(fd, buffer.get(), n, data_offset + offset, x); });
        }
      }
      {
        const std::lock_guard lock(progress_mutex);
        answered(a);
        if (e) {
          if (!first_error) first_error = e;
          next = steps;  // the others stop after their step
          return;
        }
        arrived(step);
        ready = whole < steps ? plan.offset(whole) : size;
      }
      if (md5_etag) {
        // Hash what is whole while the other streams fetch; a busy hasher is left to it.
        const std::unique_lock hashing(hash_mutex, std::try_to_lock);
        error_code hash_error;
        if (hashing) hash_to(ready.load(), hash_error);
        if (hash_error) {
          const std::lock_guard lock(progress_mutex);
          if (!first_error) first_error = hash_error;
          next = steps;
          return;
        }
      }
    }
  };
  {
    std::vector<std::jthread> workers;
    for (std::size_t i = 1; i < streams; ++i) {
      try {
        workers.emplace_back(work);
      } catch (const std::system_error&) {
        break;  // fewer streams
      }
    }
    work();
  }
  ec = first_error;
  if (!ec && md5_etag) {
    const std::lock_guard hashing(hash_mutex);
    hash_to(size, ec);
    if (!ec && contradicts(md5)) {
      // Nothing is published (the staged file goes with `staged`); a streamed answer ends short.
      return {};
    }
  }
  window.reset();  // written: the commit below syncs the file
  if (ec && gateway_impl::is_no_space(ec) && !started) {
    staged = {};  // its temporary file goes before the copy is read into memory
    return pass_through();
  }
  if (ec) return {};
  if (started && !handed) started(*growing);  // an empty object: no step handed it
  staged.wrote(size, ec);
  if (ec) return {};
  object_attributes attributes = info.attributes;
  (void)staged.commit(attributes, ec);
  if (ec) return {};
  // Mapped before it is indexed: until then no eviction can pick it, and the mapping keeps this
  // version readable whatever happens to the file next.
  mapping out;
  out.cached_ = cache_->map(object, ec);
  if (ec == sluice::errc::no_such_object) ec = sluice::errc::precondition_failed;  // replaced meanwhile: again
  if (ec) return {};
  out.info_ = out.cached_.info();
  {
    std::lock_guard lock(mutex_);
    room.claim();
    index_.insert(name, {out.info_.size, out.info_.attributes.etag, detail::cache_index::clock::now(),
                         gateway_impl::known_time(info.last_modified)});
    ++stats_.misses;
    stats_.upstream_bytes += size;
  }
  if (gateway_impl::known_time(info.last_modified)) out.info_.last_modified = info.last_modified;
  return out;
}

std::optional<gateway_store::mapping> gateway_store::cached_copy(
    const object_ref& object, const std::string& etag,
    const std::optional<std::chrono::system_clock::time_point>& last_modified) const {
  error_code map_error;
  mapping m;
  m.cached_ = cache_->map(object, map_error);
  if (map_error || m.cached_.info().attributes.etag != etag) return std::nullopt;
  m.info_ = m.cached_.info();
  if (last_modified) m.info_.last_modified = *last_modified;
  return m;
}

std::optional<gateway_store::mapping> gateway_store::map_unconfirmed(const object_ref& object) {
  if (!is_valid_bucket_name(object.bucket) || !is_valid_object_key(object.key)) return std::nullopt;
  const std::string name = detail::cache_index::name_of(object);
  std::string etag;
  std::optional<std::chrono::system_clock::time_point> last_modified;
  {
    std::lock_guard lock(mutex_);
    // A fetch under way (the rest of a parallel download of a miss): its version, confirmed as a
    // cached copy's is, and read while it arrives.
    if (const auto s = streams_.find(name); s != streams_.end()) return reader_of(s->second);
    const auto* e = index_.find(name);
    if (e == nullptr || fetching_.contains(name)) return std::nullopt;
    if (config_.revalidate_after.count() > 0 && e->validated &&
        detail::cache_index::clock::now() - *e->validated < config_.revalidate_after) {
      return std::nullopt;  // trusted: map() asks nobody either
    }
    etag = e->etag;
    last_modified = e->last_modified;
  }
  return cached_copy(object, etag, last_modified);
}

bool gateway_store::confirm(const object_ref& object, const mapping& m) {
  error_code ec;
  const object_info current = upstream_->head_object(object.bucket, object.key, ec);
  const std::string name = detail::cache_index::name_of(object);
  if (from_upstream(ec) == s3::errc::service_unavailable && config_.stale_if_error) {
    // The upstream is down: a cached copy is served as map() would serve it (a fetch under way is
    // no cached copy; it fails on its own).
    std::lock_guard lock(mutex_);
    const auto* e = index_.find(name);
    if (e == nullptr || e->etag != m.info().attributes.etag || streams_.contains(name)) return false;
    index_.touch(name);
    ++stats_.stale_served;
    return true;
  }
  if (ec || !sane(current) || current.attributes.etag != m.info().attributes.etag || current.size != m.info().size) {
    return false;
  }
  std::lock_guard lock(mutex_);
  if (const auto* e = index_.find(name); e != nullptr && e->etag == current.attributes.etag) {
    index_.touch(name, detail::cache_index::clock::now(), gateway_impl::known_time(current.last_modified));
  }
  ++stats_.revalidations;
  ++stats_.hits;
  return true;
}

gateway_store::mapping gateway_store::resolve(const object_ref& object, bool need_bytes, error_code& ec, bool stream) {
  ec = {};
  if (!is_valid_bucket_name(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  if (!is_valid_object_key(object.key)) {
    ec = sluice::errc::no_such_object;
    return {};
  }
  const std::string name = detail::cache_index::name_of(object);
  using clock = detail::cache_index::clock;
  // The upstream's Last-Modified of the indexed copy, when known.
  std::optional<std::chrono::system_clock::time_point> held_modified;
  // The cached copy if the file is still the version the index names, with the upstream's
  // Last-Modified when known (else the copy's own).
  const auto from_cache = [&](const std::string& etag) { return cached_copy(object, etag, held_modified); };
  // The size the upstream's GETs gave a version whose HEAD said another: theirs wins.
  std::optional<std::pair<std::string, std::uint64_t>> sized;
  for (int attempt = 0;; ++attempt) {
    if (stream) {
      // Another reader's fetch is under way: read from it while it arrives, when the upstream
      // still names its version (else wait for it to end, below, and look again).
      std::optional<streaming_copy> joining;
      {
        std::lock_guard lock(mutex_);
        if (const auto s = streams_.find(name); s != streams_.end()) joining = s->second;
      }
      if (joining) {
        error_code head_error;
        const object_info current = upstream_->head_object(object.bucket, object.key, head_error);
        if (!head_error && current.attributes.etag == joining->info.attributes.etag &&
            current.size == joining->info.size) {
          std::lock_guard lock(mutex_);
          ++stats_.hits;
          return reader_of(*joining);
        }
      }
    }
    std::optional<std::string> trusted;  // the ETag of a copy still within revalidate_after
    std::optional<std::string> held;     // the ETag of any indexed copy
    {
      std::unique_lock lock(mutex_);
      fetched_.wait(lock, [&] { return !fetching_.contains(name); });
      held_modified.reset();
      if (const auto* e = index_.find(name)) {
        held = e->etag;
        held_modified = e->last_modified;
        if (config_.revalidate_after.count() > 0 && e->validated &&
            clock::now() - *e->validated < config_.revalidate_after) {
          trusted = e->etag;
        }
      }
    }
    if (trusted) {
      if (auto m = from_cache(*trusted)) {
        std::lock_guard lock(mutex_);
        index_.touch(name);
        ++stats_.hits;
        return std::move(*m);
      }
    }
    error_code upstream_error;
    object_info info = upstream_->head_object(object.bucket, object.key, upstream_error);
    if (upstream_error == s3::errc::no_such_key) {
      if (held) drop(object);
      ec = sluice::errc::no_such_object;
      return {};
    }
    if (upstream_error) {
      ec = from_upstream(upstream_error);
      if (ec == s3::errc::service_unavailable && config_.stale_if_error && held) {
        if (auto m = from_cache(*held)) {
          ec = {};
          std::lock_guard lock(mutex_);
          index_.touch(name);
          ++stats_.stale_served;
          return std::move(*m);
        }
      }
      log_upstream_failure("HEAD", object, upstream_error, ec);
      return {};
    }
    if (!sane(info)) {
      ec = s3::errc::bad_gateway;
      log_upstream_failure("HEAD", object, error_code(sluice::errc::protocol_violation), ec);
      return {};
    }
    info.key = object.key;
    if (sized && sized->first == info.attributes.etag) info.size = sized->second;
    if (held && *held == info.attributes.etag) {
      if (auto m = from_cache(*held)) {
        if (m->info_.size == info.size) {
          if (gateway_impl::known_time(info.last_modified)) m->info_.last_modified = info.last_modified;
          std::lock_guard lock(mutex_);
          index_.touch(name, clock::now(), gateway_impl::known_time(info.last_modified));
          ++stats_.revalidations;
          ++stats_.hits;
          return std::move(*m);
        }
      }
    }
    if (!need_bytes) {
      mapping m;
      m.info_ = std::move(info);
      return m;
    }
    {
      std::lock_guard lock(mutex_);
      if (fetching_.contains(name)) continue;  // another request fetches it: wait and look again
      fetching_.insert(name);
    }
    if (held) drop(object);  // another version: the old copy goes before the new one comes
    std::optional<std::uint64_t> other_size;
    mapping m;
    if (stream && info.size > config_.chunk_bytes) {
      m = fetch_streaming(object, info, ec, &other_size);
    } else {
      m = fetch(object, info, ec, nullptr, nullptr, &other_size);
      fetch_done(name);
    }
    if (ec && other_size) {
      // The HEAD misstated the size (a half object would have been cached as whole): fetched
      // again with the GET's size, which the next HEAD of the same version gets too.
      log_upstream_failure("GET", object, error_code(sluice::errc::protocol_violation), ec);
      if (attempt < 2) {
        sized.emplace(info.attributes.etag, *other_size);
        continue;
      }
      return {};
    }
    if (stream && info.size > config_.chunk_bytes) return m;
    // Replaced on the upstream while it was fetched: the next HEAD names the newer version.
    if (ec == sluice::errc::precondition_failed && attempt < 2) continue;
    if (ec == sluice::errc::precondition_failed) {
      // The client asked for no condition: an object that changes at every fetch is the
      // upstream's trouble, not a 412 of the client's.
      std::fprintf(stderr, "gateway_store: GET %s: the upstream's version changed during each of 3 fetches\n",
                   name.c_str());
      ec = s3::errc::service_unavailable;
    }
    return m;
  }
}

object_info gateway_store::head(const object_ref& object, error_code& ec) {
  mapping m = resolve(object, false, ec);
  if (ec) return {};
  return m.info_;
}

std::size_t gateway_store::read(const object_ref& object, std::uint64_t offset, std::span<std::byte> out,
                                error_code& ec) {
  mapping m = resolve(object, true, ec);
  if (ec) return 0;
  const const_region bytes = m.region();
  if (offset >= bytes.size) return 0;
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), bytes.size - offset));
  std::copy_n(bytes.bytes() + offset, n, out.data());
  return n;
}

gateway_store::mapping gateway_store::map(const object_ref& object, error_code& ec) {
  return resolve(object, true, ec);
}

gateway_store::mapping gateway_store::map_streaming(const object_ref& object, error_code& ec) {
  return resolve(object, true, ec, true);
}

void gateway_store::fetch_done(const std::string& name) {
  {
    std::lock_guard lock(mutex_);
    fetching_.erase(name);
  }
  fetched_.notify_all();
}

gateway_store::mapping gateway_store::reader_of(const streaming_copy& copy) {
  mapping m;
  m.growing_ = copy.file;
  m.fill_ = copy.fill;
  m.size_ = static_cast<std::size_t>(copy.info.size);
  m.info_ = copy.info;
  return m;
}

gateway_store::mapping gateway_store::fetch_streaming(const object_ref& object, const object_info& info, error_code& ec,
                                                      std::optional<std::uint64_t>* other_size) {
  // The first answer of the fetch thread: the mapping of the copy being written, or the whole
  // fetch's result when it ended without one (a pass-through, or an error before the first byte).
  struct handoff {
    std::mutex mutex;
    std::condition_variable given;
    bool done = false;
    mapping first;
    error_code error;
    std::optional<std::uint64_t> other_size;  // the GETs' size, when they said another than the HEAD's
    void give(mapping m, error_code e) {
      {
        const std::lock_guard lock(mutex);
        if (done) return;
        first = std::move(m);
        error = e;
        done = true;
      }
      given.notify_all();
    }
  };
  const std::string name = detail::cache_index::name_of(object);
  // Fetched whole on the caller's thread (the server's bounded blocking pool) before it is served.
  const auto fetch_whole = [&] {
    mapping m = fetch(object, info, ec, nullptr, nullptr, other_size);
    fetch_done(name);
    if (ec == sluice::errc::precondition_failed) ec = s3::errc::service_unavailable;  // replaced meanwhile
    return m;
  };
  {
    // Each fetch holds a thread, fetch_streams upstream connections (and, on a kernel without
    // MADV_POPULATE_WRITE, fetch_streams buffers of chunk_bytes): beyond this many at once, a
    // miss is fetched whole.
    constexpr std::size_t max_streaming = 16;
    std::unique_lock lock(mutex_);
    if (streaming_ >= max_streaming) {
      lock.unlock();
      return fetch_whole();
    }
    ++streaming_;
  }
  auto answer = std::make_shared<handoff>();
  auto fill = std::make_shared<detail::fill_progress>();
  try {
    std::thread([this, object, info, answer, fill, name] {
      error_code fetch_error;
      bool streamed = false;
      try {
        std::optional<std::uint64_t> sized;
        mapping done = fetch(
            object, info, fetch_error, fill,
            [&](const streaming_copy& growing) {
              streamed = true;
              {
                std::lock_guard lock(mutex_);  // later readers of this version join it (resolve)
                streams_.insert_or_assign(name, growing);
              }
              answer->give(reader_of(growing), {});
            },
            &sized);
        if (!streamed) {
          {
            const std::lock_guard lock(answer->mutex);
            answer->other_size = sized;
          }
          answer->give(std::move(done), fetch_error);
        }
      } catch (const std::exception& e) {  // bad_alloc, or a thread the upstream client could not start
        std::fprintf(stderr, "gateway_store: GET %s: the fetch failed: %s\n", name.c_str(), e.what());
        fetch_error = s3::errc::service_unavailable;
        answer->give({}, fetch_error);
      }
      if (fetch_error == sluice::errc::precondition_failed) {
        // Replaced on the upstream during the fetch: the reader's client retries and gets the new one.
        std::fprintf(stderr, "gateway_store: GET %s: the upstream's version changed during the fetch\n", name.c_str());
        fetch_error = s3::errc::service_unavailable;
      }
      {
        // Out of streams_ before its end is known: a reader that comes once the fill failed (the
        // retry of a client whose answer was cut: bytes that contradicted their MD5 ETag under
        // the same ETag) must not join the failed copy, but wait for fetch_done and look again.
        std::lock_guard lock(mutex_);
        streams_.erase(name);
      }
      if (fetch_error) {
        if (streamed) log_upstream_failure("GET", object, fetch_error, fetch_error);
        fill->fail(fetch_error);
      } else {
        fill->finish(info.size);
      }
      fetch_done(name);
      std::lock_guard lock(mutex_);
      --streaming_;
      fetched_.notify_all();  // under the lock: the destructor may run as soon as it is released
    }).detach();
  } catch (const std::system_error&) {  // no thread: fetch here, as map() would
    {
      std::lock_guard lock(mutex_);
      --streaming_;
    }
    return fetch_whole();
  }
  std::unique_lock lock(answer->mutex);
  answer->given.wait(lock, [&] { return answer->done; });
  ec = answer->error;
  if (other_size != nullptr) *other_size = answer->other_size;
  if (ec == sluice::errc::precondition_failed) ec = s3::errc::service_unavailable;
  return std::move(answer->first);
}

gateway_store::mapping gateway_store::map_range(const object_ref& object, std::string_view range_header,
                                                error_code& ec) {
  // A range from the first byte (the first part of a parallel download) caches the object whole,
  // as below, whatever the object's size: one HEAD, not one to describe it and one to fetch it.
  if (range_header.starts_with("bytes=0-")) return resolve(object, true, ec, true);
  mapping described = resolve(object, false, ec, true);
  if (ec) return {};
  // A valid cached copy, or one being fetched for another reader (a parallel download's parts).
  if (described.cached_.region().data != nullptr || described.growing_) return described;
  const object_info& info = described.info_;
  const detail::range_result range = detail::parse_range(range_header, info.size);
  // A small object, a large part of one, or a range from its first byte (the first part of a
  // parallel download, whose other parts then find it cached) is cached whole, as a GET would.
  if (!range.present || !range.satisfiable || info.size <= config_.chunk_bytes || range.offset == 0 ||
      range.length > info.size / 4 || range.length > config_.passthrough_bytes) {
    return resolve(object, true, ec, true);
  }
  mapping part;
  part.memory_ = std::make_unique<std::byte[]>(static_cast<std::size_t>(range.length));
  part.size_ = static_cast<std::size_t>(range.length);
  part.base_ = range.offset;
  fetch_range(object, info, range.offset, {part.memory_.get(), part.size_}, ec);
  if (ec == sluice::errc::precondition_failed) return resolve(object, true, ec, true);  // replaced meanwhile
  if (ec) {
    log_upstream_failure("GET (range)", object, ec, ec);
    return {};
  }
  part.info_ = info;
  std::lock_guard lock(mutex_);
  ++stats_.range_fetches;
  stats_.upstream_bytes += range.length;
  return part;
}

gateway_store::mapping gateway_store::describe(const object_ref& object, error_code& ec) {
  return resolve(object, false, ec);
}

gateway_store::writer gateway_store::begin_put(const object_ref& object, error_code& ec) {
  ec = {};
  if (!is_valid_bucket_name(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  if (!is_valid_object_key(object.key)) {
    ec = sluice::errc::invalid_name;
    return {};
  }
  std::uint64_t number = 0;
  {
    std::lock_guard lock(mutex_);
    number = ++spool_counter_;
  }
  writer w;
  w.path_ = spool_ / ("put-" + std::to_string(number));
  w.fd_ = ::open(w.path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (w.fd_ < 0) {
    ec = gateway_impl::errno_code(errno);
    w.path_.clear();
    return {};
  }
  w.store_ = this;
  w.object_ = object;
  return w;
}

object_info gateway_store::commit_put(writer& w, const object_attributes& attributes, error_code& ec) {
  // Whatever happens next, the cache must not keep a copy the upstream may have replaced.
  drop(w.object_);
  put_options options{attributes};
  options.precondition = w.precondition_;  // checked by the upstream as it publishes
  error_code upstream_error;
  const std::string etag = upstream_->put_object(w.object_.bucket, w.object_.key, w.path_, options, upstream_error);
  if (upstream_error) {
    ec = from_upstream(upstream_error);
    log_upstream_failure("PUT", w.object_, upstream_error, ec);
    return {};
  }
  if (!gateway_impl::is_sane_etag(etag)) {
    ec = s3::errc::bad_gateway;
    return {};
  }
  object_attributes cached = attributes;
  cached.etag = etag;
  object_info info{w.object_.key, w.written_, std::chrono::system_clock::now(), cached};
  cache_file(w.object_, w.fd_, w.written_, cached);
  return info;
}

void gateway_store::cache_file(const object_ref& object, int fd, std::uint64_t size,
                               const object_attributes& attributes) {
  // Best effort: a copy that cannot be made is simply not cached.
  const std::string name = detail::cache_index::name_of(object);
  reserved_room room;
  if (!reserve_room(size, name, room)) return;
  error_code ec;
  ensure_cache_bucket(object.bucket, ec);
  if (ec) return;
  fs_store::writer staged = cache_->begin_put(object, ec);
  if (ec) return;
  std::vector<std::byte> buffer(static_cast<std::size_t>(std::min<std::uint64_t>(size, 8 * mib)));
  for (std::uint64_t offset = 0; offset < size;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - offset));
    if (!gateway_impl::read_all(fd, buffer.data(), n, offset, ec)) return;
    staged.write({buffer.data(), n}, ec);
    if (ec) return;
    offset += n;
  }
  const object_info published = staged.commit(attributes, ec);
  if (ec) return;
  std::lock_guard lock(mutex_);
  room.claim();
  index_.insert(name, {published.size, published.attributes.etag, detail::cache_index::clock::now()});
}

void gateway_store::remove(const object_ref& object, error_code& ec) {
  ec = {};
  error_code upstream_error;
  upstream_->delete_object(object.bucket, object.key, upstream_error);
  if (upstream_error) {
    ec = from_upstream(upstream_error);
    return;
  }
  drop(object);
}

list_result gateway_store::list(const list_request& request, error_code& ec) const {
  ec = {};
  list_options options;
  options.prefix = request.prefix;
  options.start_after = request.start_after;
  options.max_keys = std::clamp<std::uint32_t>(request.max_keys, 1, 1000);
  const auto upstream_page = [&](const list_options& asked, error_code& e) {
    error_code upstream_error;
    xml::list_bucket_result page = upstream_->list_objects(request.bucket, asked, upstream_error);
    if (upstream_error) {
      e = from_upstream(upstream_error);
      log_upstream_failure("LIST", {request.bucket, request.prefix}, upstream_error, e);
    }
    return page;
  };
  // Empty pages marked truncated are followed by their tokens, a few of them: an upstream that
  // answers nothing but tokens is not listing anything.
  constexpr int max_empty_pages = 16;
  for (int round = 0;; ++round) {
    xml::list_bucket_result page = upstream_page(options, ec);
    if (ec) return {};
    detail::listing_next next = detail::listing_next::done;
    list_result out =
        detail::check_upstream_listing(page, request, options.max_keys, options.continuation_token, next, ec);
    if (ec) {
      log_upstream_failure("LIST", {request.bucket, request.prefix}, error_code(sluice::errc::protocol_violation), ec);
      return {};
    }
    if (next == detail::listing_next::follow_token) {
      if (round + 1 >= max_empty_pages) {
        ec = s3::errc::bad_gateway;
        log_upstream_failure("LIST", {request.bucket, request.prefix}, error_code(sluice::errc::protocol_violation),
                             ec);
        return {};
      }
      options.continuation_token = std::move(page.next_continuation_token);
      continue;
    }
    if (next == detail::listing_next::probe) {
      // A full page marked as the last one: one more key after it means the upstream stopped
      // early, and the answer says truncated so that the server's pager asks for the rest.
      list_options probe;
      probe.prefix = request.prefix;
      probe.start_after = out.objects.back().key;
      probe.max_keys = 1;
      xml::list_bucket_result after = upstream_page(probe, ec);
      if (ec) return {};
      const list_request rest{request.bucket, request.prefix, probe.start_after, 1};
      detail::listing_next then = detail::listing_next::done;
      const list_result more = detail::check_upstream_listing(after, rest, 1, {}, then, ec);
      if (ec) {
        log_upstream_failure("LIST", {request.bucket, request.prefix}, error_code(sluice::errc::protocol_violation),
                             ec);
        return {};
      }
      out.truncated = !more.objects.empty() || more.truncated || then == detail::listing_next::follow_token;
    }
    return out;
  }
}

void gateway_store::create_bucket(std::string_view name, error_code& ec) {
  ec = {};
  if (!is_valid_bucket_name(name)) {
    ec = sluice::errc::invalid_name;
    return;
  }
  error_code upstream_error;
  upstream_->create_bucket(std::string(name), upstream_error);
  if (upstream_error) {
    ec = from_upstream(upstream_error);
    return;
  }
  error_code ignored;
  ensure_cache_bucket(name, ignored);
}

void gateway_store::remove_bucket(std::string_view name, error_code& ec) {
  ec = {};
  error_code upstream_error;
  upstream_->delete_bucket(std::string(name), upstream_error);
  if (upstream_error) {
    ec = from_upstream(upstream_error);
    return;
  }
  // The cached copies of a bucket the upstream no longer has.
  error_code cache_error;
  for (;;) {
    const list_result batch = cache_->list({std::string(name), {}, {}, 1000}, cache_error);
    if (cache_error || batch.objects.empty()) break;
    for (const object_info& o : batch.objects) drop({std::string(name), o.key});
  }
  for (const upload_info& u : cache_->list_uploads(name, {}, cache_error)) {
    error_code ignored;
    cache_->abort_upload({std::string(name), u.key}, u.upload_id, ignored);
  }
  cache_->remove_bucket(name, cache_error);
}

std::vector<bucket_info> gateway_store::list_buckets(error_code& ec) const {
  ec = {};
  error_code upstream_error;
  std::vector<bucket_info> out = upstream_->list_buckets(upstream_error);
  if (upstream_error) {
    ec = from_upstream(upstream_error);
    return {};
  }
  std::erase_if(out, [](const bucket_info& b) { return !is_valid_bucket_name(b.name); });
  return out;
}

std::string gateway_store::create_upload(const object_ref& object, const object_attributes& attributes,
                                         error_code& ec) {
  ec = {};
  if (!is_valid_bucket_name(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  // The bucket must exist upstream: a one-key listing says so.
  list_options probe;
  probe.max_keys = 1;
  error_code upstream_error;
  (void)upstream_->list_objects(object.bucket, probe, upstream_error);
  if (upstream_error) {
    ec = from_upstream(upstream_error);
    return {};
  }
  ensure_cache_bucket(object.bucket, ec);
  if (ec) return {};
  return cache_->create_upload(object, attributes, ec);
}

gateway_store::part_writer_type gateway_store::begin_part(const object_ref& object, std::string_view upload_id,
                                                          std::uint32_t part_number, error_code& ec) {
  return cache_->begin_part(object, upload_id, part_number, ec);
}

std::vector<part_info> gateway_store::list_parts(const object_ref& object, std::string_view upload_id,
                                                 error_code& ec) const {
  return cache_->list_parts(object, upload_id, ec);
}

std::vector<upload_info> gateway_store::list_uploads(std::string_view bucket, std::string_view prefix,
                                                     error_code& ec) const {
  std::vector<upload_info> out = cache_->list_uploads(bucket, prefix, ec);
  if (ec == sluice::errc::no_such_bucket) {
    ec = {};  // a bucket of the upstream that no upload went through here yet
    out.clear();
  }
  return out;
}

object_info gateway_store::complete_upload(const object_ref& object, std::string_view upload_id,
                                           std::span<const part_info> chosen, const object_attributes& attributes,
                                           error_code& ec, const write_precondition& precondition) {
  ec = {};
  const std::string name = detail::cache_index::name_of(object);
  // Concatenated in the cache, where readers do not trust it: the index drops the old entry,
  // so a read revalidates against the upstream, which does not have these bytes yet.
  drop(object);
  object_info local = cache_->complete_upload(object, upload_id, chosen, attributes, ec);
  if (ec) return {};
  fs_store::mapping bytes = cache_->map(object, ec);
  if (ec) {
    drop(object);
    return {};
  }
  put_options options{attributes};
  options.precondition = precondition;  // checked by the upstream as it publishes
  error_code upstream_error;
  const std::string etag = upstream_->put_object(object.bucket, object.key, bytes.region(), options, upstream_error);
  if (upstream_error || !gateway_impl::is_sane_etag(etag)) {
    drop(object);
    ec = upstream_error ? from_upstream(upstream_error) : error_code(s3::errc::bad_gateway);
    log_upstream_failure("CompleteMultipartUpload", object, upstream_error, ec);
    return {};
  }
  bool kept = false;
  if (etag == local.attributes.etag) {
    std::lock_guard lock(mutex_);
    kept = make_room(local.size, name);
    if (kept) index_.insert(name, {local.size, etag, detail::cache_index::clock::now()});
  }
  if (!kept) {
    error_code ignored;
    cache_->remove(object, ignored);  // the upstream's ETag differs: the next GET fetches its version
  }
  local.attributes.etag = etag;
  return local;
}

void gateway_store::abort_upload(const object_ref& object, std::string_view upload_id, error_code& ec) {
  cache_->abort_upload(object, upload_id, ec);
}

// The server over a gateway is compiled here, not in server.cpp: it needs the client, which the
// fuzz build (server.cpp alone) leaves out.

}  // namespace sluice::s3
