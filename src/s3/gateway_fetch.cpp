// SPDX-License-Identifier: Apache-2.0
// The gateway store's fetch (include/sluice/s3/gateway_store.hpp): an object version copied from
// the upstream into the cache as a composed operation on the upstream client's executor.
// A translation unit of its own.
#include "gateway_internal.hpp"

#include <sluice/s3/checksum.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/gateway_store.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <utility>

namespace sluice::s3 {

namespace gateway_impl {

// A staged cache file's data, extended to `size`, and a shared mapping of it for what needs one.
// How a fetch's steps reach the file (docs/gateway.md, "Where to put the cache"):
// - handed by the client as they arrive (get_options::sink, through its small buffer, still in
//   the core's cache) and pwrite()n (`mode::read` or `mode::none`): a page that a write() adds to a
//   tmpfs file is not zeroed first (it is filled whole), and no page table maps it.
// - received in place through a writable mapping (`mode::receive`), on a tmpfs with 2 MiB pages
//   (mounted huge=within_size, always or advise): every byte is then copied once, from the socket
//   into the page cache. Each page is zeroed when the mapping backs it, as a 2 MiB page that a
//   write() fills in part would be; and huge=advise gives them only to a mapping that asks.
// A mapping for reading (`mode::read`) serves the MD5 of a single-part ETag. data() is null
// without a mapping (`mode::none`, or a failed mmap: then the caller reads with pread()).
class write_window {
 public:
  enum class mode { none, read, receive };

  write_window(int fd, std::uint64_t data_offset, std::uint64_t size, mode how) {
    if (size == 0 || ::ftruncate(fd, static_cast<off_t>(data_offset + size)) != 0 || how == mode::none) return;
    error_code ignored;
    const int protection = how == mode::receive ? PROT_READ | PROT_WRITE : PROT_READ;
    data_ = detail::map_file_data(fd, data_offset, size, protection, base_, length_, ignored);
    // 2 MiB pages where the file system offers them on advice (tmpfs mounted huge=advise) too:
    // each insertion into the file's page cache then adds 512 pages.
    if (data_ != nullptr && how == mode::receive) (void)::madvise(base_, length_, MADV_HUGEPAGE);
    receives_ = data_ != nullptr && how == mode::receive;
  }
  write_window(const write_window&) = delete;
  write_window& operator=(const write_window&) = delete;
  ~write_window() {
    if (base_ != nullptr) ::munmap(base_, length_);
  }
  [[nodiscard]] const std::byte* data() const noexcept { return data_; }
  /// Where steps are received in place; null when they are written as they arrive.
  [[nodiscard]] std::byte* receiving() const noexcept { return receives_ ? data_ : nullptr; }

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
  bool receives_ = false;
};

bool huge_page_cache(const std::filesystem::path& dir) {
  if (::madvise(nullptr, 0, MADV_POPULATE_WRITE) != 0) return false;  // before 5.14: no receiving in place
  std::error_code fs_error;
  const std::string path = std::filesystem::canonical(dir, fs_error).string();
  if (fs_error) return false;
  std::ifstream mounts("/proc/self/mountinfo");
  // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue" (proc(5)):
  // the mount point is the 5th field (octal escapes for blanks), the super options the last.
  const auto unescape = [](std::string_view text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\\' && i + 3 < text.size()) {
        out += static_cast<char>((text[i + 1] - '0') * 64 + (text[i + 2] - '0') * 8 + (text[i + 3] - '0'));
        i += 3;
      } else {
        out += text[i];
      }
    }
    return out;
  };
  std::size_t best = 0;
  bool huge = false;
  for (std::string line; std::getline(mounts, line);) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point;
    fields >> id >> parent >> device >> root >> point;
    point = unescape(point);
    const bool under = path == point || point == "/" ||
                       (path.size() > point.size() && path.starts_with(point) && path[point.size()] == '/');
    if (!under || point.size() < best) continue;
    std::string word;
    while (fields >> word && word != "-") {
    }
    std::string type, source, options;
    fields >> type >> source >> options;
    best = point.size();
    std::string listed = ",";  // the options, each between commas
    listed += options;
    listed += ',';
    huge = type == "tmpfs" &&
           (listed.find(",huge=within_size,") != std::string::npos ||
            listed.find(",huge=always,") != std::string::npos || listed.find(",huge=advise,") != std::string::npos);
    if (type == "tmpfs" && !huge) {  // "force": every tmpfs gets them whatever its options say
      std::ifstream policy("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
      std::string text;
      std::getline(policy, text);
      huge = text.find("[force]") != std::string::npos;
    }
  }
  return huge;
}

}  // namespace gateway_impl

// -- one GET ------------------------------------------------------------------------------------

get_options gateway_store::upstream_get(const object_info& info, std::uint64_t offset, std::uint64_t length,
                                        std::shared_ptr<detail::upstream_get_answer> seen) const {
  get_options options{byte_range{offset, length}};
  options.if_match = info.attributes.etag;
  // Every answer is checked before its body is read (on a client thread; the parts of one GET one
  // after the other): the version asked for, the range asked for, the size the fetch counts on.
  options.check = [etag = info.attributes.etag, offset, length, size = info.size, limit = config_.max_object_bytes,
                   seen = std::move(seen)](unsigned status,
                                           const std::function<std::string_view(std::string_view)>& field) {
    error_code verdict;
    *seen = detail::check_upstream_get(
        {status, field("ETag"), field("Content-Length"), field("Content-Range"), field("x-amz-server-side-encryption"),
         field("x-amz-server-side-encryption-customer-algorithm")},
        {etag, offset, length, size, limit}, verdict);
    return verdict;
  };
  return options;
}

void gateway_store::fetch_range(const object_ref& object, const object_info& info, std::uint64_t offset,
                                std::span<std::byte> out, error_code& ec, detail::upstream_get_answer* answer) {
  ec = {};
  auto seen = std::make_shared<detail::upstream_get_answer>();
  auto got = std::make_shared<std::promise<std::pair<error_code, std::uint64_t>>>();
  auto result = got->get_future();
  upstream_->async_get_object(object.bucket, object.key, region{out.data(), out.size(), memory_kind::host_pageable, -1},
                              upstream_get(info, offset, out.size(), seen), [got](error_code e, std::uint64_t n) {
                                got->set_value({e, n});
                              });
  const auto [error, bytes] = result.get();
  ec = error;
  if (!ec && bytes != out.size()) ec = sluice::errc::protocol_violation;
  if (ec) ec = from_upstream(ec);
  if (answer != nullptr) *answer = *seen;
}

// -- one fetch ----------------------------------------------------------------------------------

// Ranged steps of chunk_bytes (ramped up to it when readers wait for the written prefix), taken by
// `streams` chains of GETs on the client's executor: each chain takes the next step and receives
// it from the upstream into its place in the file, written as it arrives (get_options::sink; on a
// tmpfs with 2 MiB pages, received in place through a writable mapping: write_window), then
// takes the next one. The prefix of whole steps is reported to `fill`: a step's bytes are final only once its GET ended
// (a retried attempt writes its range again, and a hostile upstream may send other bytes then), and the MD5 hashes
// exactly what readers were given. No thread waits for a step; the last chain to end completes the operation.
class gateway_store::fetch_operation : public std::enable_shared_from_this<fetch_operation> {
 public:
  fetch_operation(gateway_store& owner, const object_ref& what, const object_info& version)
      : store(owner),
        object(what),
        info(version),
        name(detail::cache_index::name_of(what)),
        md5_etag(detail::is_md5_etag(version.attributes.etag)),
        held_back(md5_etag && version.size > 0 ? 1 : 0) {}

  [[nodiscard]] bool cacheable() const noexcept { return cacheable_; }

  // Under progress_mutex: what an answer said (encrypted: its ETag is no MD5; another size).
  void answered(const detail::upstream_get_answer& a) {
    if (a.encrypted) encrypted = true;
    if (a.other_size && !other_size) other_size = a.total;
  }

  // Whether `digest_of_all` (the MD5 of all the bytes) contradicts the ETag; then ec says so.
  bool contradicts(digest& digest_of_all, error_code& ec) const {
    if (!md5_etag || encrypted) return false;
    const std::string hex = to_hex(digest_of_all.finish());
    std::string etag = info.attributes.etag;
    std::transform(etag.begin(), etag.end(), etag.begin(),
                   [](char c) { return c >= 'A' && c <= 'F' ? static_cast<char>(c - 'A' + 'a') : c; });
    if (hex == etag) return false;
    ec = s3::errc::bad_gateway;
    store.log_upstream_failure("GET", object, s3::errc::bad_digest, ec);  // "BadDigest": the MD5 is not the ETag
    return true;
  }

  // Under hash_mutex: the MD5 of the prefix advanced to `end`.
  void hash_to(std::uint64_t end, error_code& e) {
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
  }

  // Posts the chains on the client's executor; `on_done` runs once they all ended.
  void start(std::function<void(error_code)> on_done) {
    done_ = std::move(on_done);
    // A chain posted here may end (no step left) on a client thread before the next is posted,
    // and counts `chains` down as it does: the loop counts its own, never the shared one.
    const std::size_t count = std::max<std::size_t>(streams, 1);  // an empty object: one chain that ends at once
    {
      const std::lock_guard lock(progress_mutex);
      chains = count;
    }
    for (std::size_t chain = 0; chain < count; ++chain) {
      boost::asio::post(store.upstream_->get_executor(),
                        [self = shared_from_this(), chain] { self->next_step(chain); });
    }
  }

  // What the store's state holds for this fetch goes now, on the thread that knows the store is
  // there: whoever drops the last reference afterwards (a client thread) touches no store.
  void release() {
    window.reset();
    staged = {};
    const std::lock_guard lock(store.mutex_);
    room.claim();
  }

  gateway_store& store;
  const object_ref object;
  const object_info info;
  const std::string name;
  // A single-part MD5 ETag is the MD5 of the bytes (unless an answer says the object is
  // encrypted): nothing that contradicts it is cached or served whole.
  const bool md5_etag;
  // Readers get the prefix but its last byte until the MD5 said yes (finish_fetch's caller gives
  // it): a copy that turns out wrong can only end short, never whole.
  const std::uint64_t held_back;
  std::shared_ptr<detail::fill_progress> fill;
  std::function<void(const streaming_copy&)> started;
  detail::cache_index::clock::time_point confirmed;  // when the HEAD that named the version was sent
  bool cacheable_ = false;
  reserved_room room;  // concurrent fetches must not count on the same free space
  fs_store::writer staged;
  std::optional<detail::fetch_plan> plan;
  std::uint64_t steps = 0;
  std::size_t streams = 0;
  std::optional<streaming_copy> growing;  // streaming: readers get a mapping of the file being written
  int fd = -1;
  std::uint64_t data_offset = 0;
  std::optional<gateway_impl::write_window> window;
  // The destination a sink's GET names (get_options::sink): never written, so no page of it
  // exists; the chains share it.
  std::unique_ptr<std::byte[]> unwritten;

  // The written prefix and the chains, under progress_mutex.
  std::mutex progress_mutex;
  std::vector<bool> got;
  std::uint64_t whole = 0;  // every step before `whole` is in the file
  std::uint64_t next = 0;   // the next step a chain takes
  std::size_t chains = 0;   // chains not ended
  bool handed = false;      // `started` was called
  bool encrypted = false;
  std::optional<std::uint64_t> other_size;  // the GETs' size, when they said another than the HEAD's
  error_code first_error;
  std::atomic<std::uint64_t> ready{0};  // the prefix of whole steps

  // The MD5 of the prefix, advanced by whichever chain finds it free, finished after them.
  std::mutex hash_mutex;
  digest md5{digest_kind::md5};
  std::uint64_t hashed = 0;

 private:
  // Under progress_mutex: step `step` is in the file.
  void arrived(std::uint64_t step) {
    got[step] = true;
    while (whole < steps && got[whole]) ++whole;
    const std::uint64_t prefix = whole < steps ? plan->offset(whole) : info.size;
    if (fill) fill->advance(std::min(prefix, info.size - held_back));
    // Readers join once the first step's answer matched the HEAD (its version and size): a HEAD
    // that misstated the size is fetched again with the GET's, before anyone is answered.
    if (started && !handed && whole > 0 && !first_error) {
      handed = true;
      started(*growing);
    }
    ready = prefix;
  }

  // Chain `chain` takes the next step, or ends (no step left, or a step failed).
  void next_step(std::size_t chain) {
    std::optional<std::uint64_t> step;
    bool last = false;
    {
      const std::lock_guard lock(progress_mutex);
      if (first_error || next >= steps) {
        last = --chains == 0;
      } else {
        step = next++;
      }
    }
    if (step) {
      request(chain, *step);
    } else if (last) {
      auto on_done = std::move(done_);
      on_done(first_error);  // every chain ended: nothing else writes it
    }
  }

  void request(std::size_t chain, std::uint64_t step) {
    const std::uint64_t offset = plan->offset(step);
    const auto n = static_cast<std::size_t>(plan->length(step));
    auto seen = std::make_shared<detail::upstream_get_answer>();
    auto unwritable = std::make_shared<error_code>();  // the sink's error: the cache's, not the upstream's
    error_code e;
    try {
      std::byte* into = nullptr;
      get_options options = store.upstream_get(info, offset, n, seen);
      if (std::byte* base = window->receiving()) {
        // Received in place (a retried attempt writes its range again).
        store.evicting(name, e, [&](error_code& x) { window->back(offset, n, x); });
        into = base + offset;
      } else {
        // Written as it arrives (a retried attempt writes its range again).
        into = unwritten.get();
        options.sink = [self = shared_from_this(), offset, unwritable](std::uint64_t at,
                                                                       std::span<const std::byte> bytes) {
          error_code x;
          self->store.evicting(self->name, x, [&](error_code& y) {
            gateway_impl::write_all(self->fd, bytes.data(), bytes.size(), self->data_offset + offset + at, y);
          });
          if (x) *unwritable = x;
          return x;
        };
      }
      if (!e) {
        store.upstream_->async_get_object(
            object.bucket, object.key, region{into, n, memory_kind::host_pageable, -1}, std::move(options),
            [self = shared_from_this(), chain, step, n, seen, unwritable](error_code ec, std::uint64_t bytes) {
              if (!ec && bytes != n) ec = sluice::errc::protocol_violation;
              // A write the cache refused (a full disk) is the cache's error, not the upstream's.
              ec = *unwritable ? *unwritable : from_upstream(ec);
              self->received(chain, step, ec, *seen);
            });
        return;
      }
    } catch (const std::bad_alloc&) {
      e = gateway_impl::errno_code(ENOMEM);
    } catch (const std::exception& x) {
      e = failed(x);
    }
    received(chain, step, e, *seen);
  }

  // Step `step`'s GET ended with `e` (a client thread, or request's when it could not start).
  void received(std::size_t chain, std::uint64_t step, error_code e, const detail::upstream_get_answer& a) noexcept {
    try {
      {
        const std::lock_guard lock(progress_mutex);
        answered(a);
        if (e && !first_error) first_error = e;  // the other chains stop after their step
        if (!e) arrived(step);
      }
      if (!e && md5_etag) {
        // Hash what is whole while the other chains fetch; a busy hasher is left to it.
        const std::unique_lock hashing(hash_mutex, std::try_to_lock);
        error_code hash_error;
        if (hashing) hash_to(ready.load(), hash_error);
        if (hash_error) {
          const std::lock_guard lock(progress_mutex);
          if (!first_error) first_error = hash_error;
        }
      }
    } catch (const std::exception& x) {
      const error_code error = failed(x);
      const std::lock_guard lock(progress_mutex);
      if (!first_error) first_error = error;
    }
    next_step(chain);
  }

  // An exception on a client thread (bad_alloc): said, and the fetch fails as the upstream's failure.
  error_code failed(const std::exception& x) const {
    store.log("gateway_store: GET " + name + ": the fetch failed: " + x.what());
    return s3::errc::service_unavailable;
  }

  std::function<void(error_code)> done_;
};

std::shared_ptr<gateway_store::fetch_operation> gateway_store::prepare_fetch(
    const object_ref& object, const object_info& info, detail::cache_index::clock::time_point confirmed,
    std::shared_ptr<detail::fill_progress> fill, std::function<void(const streaming_copy&)> started, error_code& ec) {
  ec = {};
  auto op = std::make_shared<fetch_operation>(*this, object, info);
  op->confirmed = confirmed;
  op->fill = std::move(fill);
  op->started = std::move(started);
  const std::uint64_t size = info.size;
  // A streaming answer cannot fall back to memory once it has begun: the disk must hold the copy.
  op->cacheable_ = reserve_room(size, op->name, op->room) && disk_has_room(op->name);
  if (op->cacheable_) ensure_cache_bucket(object.bucket, ec);
  if (op->cacheable_ && !ec) op->staged = cache_->begin_put(object, ec);
  if (!op->cacheable_ || ec) {
    op->cacheable_ = false;  // pass through from memory: over the budget, or a full disk
    ec = {};
    return op;
  }
  op->plan.emplace(size, std::min<std::uint64_t>(config_.chunk_bytes, size), config_.fetch_streams,
                   static_cast<bool>(op->started));
  op->steps = op->plan->steps();
  op->streams = static_cast<std::size_t>(std::min<std::uint64_t>(config_.fetch_streams, op->steps));
  op->fd = op->staged.native_handle();
  op->data_offset = op->staged.data_offset();
  if (op->started) {
    op->growing.emplace(
        streaming_copy{detail::growing_file::open(op->fd, op->data_offset, size, ec), op->fill, info, confirmed});
    if (ec) return nullptr;
    if (!gateway_impl::known_time(info.last_modified))
      op->growing->info.last_modified = std::chrono::system_clock::now();
  }
  using window_mode = gateway_impl::write_window::mode;
  op->window.emplace(op->fd, op->data_offset, size,
                     receive_in_place_ ? window_mode::receive
                     : op->md5_etag    ? window_mode::read
                                       : window_mode::none);
  op->got.assign(op->steps, false);
  if (op->window->receiving() == nullptr)
    op->unwritten = std::make_unique_for_overwrite<std::byte[]>(op->plan->longest());
  return op;
}

void gateway_store::start_fetch(const std::shared_ptr<fetch_operation>& op, std::function<void(error_code)> done) {
  op->start(std::move(done));
}

gateway_store::mapping gateway_store::pass_through(fetch_operation& op, error_code& ec) {
  ec = {};
  const std::uint64_t size = op.info.size;
  if (size > config_.passthrough_bytes) {
    ec = s3::errc::slow_down;
    log("gateway_store: " + op.name + " (" + std::to_string(size) +
        " bytes) fits neither the cache nor passthrough_bytes");
    return {};
  }
  mapping m;
  m.memory_ = std::make_unique<std::byte[]>(std::max<std::uint64_t>(size, 1));
  m.size_ = static_cast<std::size_t>(size);
  detail::upstream_get_answer a;
  if (size > 0) fetch_range(op.object, op.info, 0, {m.memory_.get(), m.size_}, ec, &a);
  {
    const std::lock_guard lock(op.progress_mutex);
    op.answered(a);
  }
  if (ec) return {};
  digest md5(digest_kind::md5);
  md5.update(std::span<const std::byte>(m.memory_.get(), m.size_));
  if (op.contradicts(md5, ec)) return {};
  m.info_ = op.info;
  std::lock_guard lock(mutex_);
  ++stats_.passthroughs;
  stats_.upstream_bytes += size;
  return m;
}

gateway_store::mapping gateway_store::finish_fetch(fetch_operation& op, error_code& ec) {
  const std::uint64_t size = op.info.size;
  if (!ec && op.md5_etag) {
    const std::lock_guard hashing(op.hash_mutex);
    op.hash_to(size, ec);
    // Nothing is published (the staged file goes with `staged`); a streamed answer ends short.
    if (!ec && op.contradicts(op.md5, ec)) return {};
  }
  op.window.reset();  // written: the commit below syncs the file
  if (ec && gateway_impl::is_no_space(ec) && !op.started) {
    op.staged = {};  // its temporary file goes before the copy is read into memory
    return pass_through(op, ec);
  }
  if (ec) return {};
  if (op.started && !op.handed) op.started(*op.growing);  // an empty object: no step handed it
  op.staged.wrote(size, ec);
  if (ec) return {};
  object_attributes attributes = op.info.attributes;
  (void)op.staged.commit(attributes, ec);
  if (ec) return {};
  // Mapped before it is indexed: until then no eviction can pick it, and the mapping keeps this
  // version readable whatever happens to the file next.
  mapping out;
  out.cached_ = cache_->map(op.object, ec);
  if (ec == sluice::errc::no_such_object) ec = sluice::errc::precondition_failed;  // replaced meanwhile: again
  if (ec) return {};
  out.info_ = out.cached_.info();
  const auto last_modified = gateway_impl::known_time(op.info.last_modified);
  {
    std::lock_guard lock(mutex_);
    op.room.claim();
    // Validated when the HEAD that named this version was sent: its GETs named it after that.
    index_.insert(op.name, {out.info_.size, out.info_.attributes.etag, op.confirmed, last_modified});
    ++stats_.misses;
    stats_.upstream_bytes += size;
  }
  if (last_modified) out.info_.last_modified = op.info.last_modified;
  return out;
}

gateway_store::mapping gateway_store::fetch(const object_ref& object, const object_info& info,
                                            detail::cache_index::clock::time_point confirmed, error_code& ec,
                                            std::optional<std::uint64_t>* other_size) {
  const std::shared_ptr<fetch_operation> op = prepare_fetch(object, info, confirmed, nullptr, nullptr, ec);
  if (!op) return {};
  mapping m;
  if (!op->cacheable()) {
    m = pass_through(*op, ec);
  } else {
    // The operation runs on the client's threads; this one (the server's blocking pool) waits.
    auto transferred = std::make_shared<std::promise<error_code>>();
    auto result = transferred->get_future();
    start_fetch(op, [transferred](error_code e) { transferred->set_value(e); });
    ec = result.get();
    m = finish_fetch(*op, ec);
  }
  if (other_size != nullptr && op->other_size) *other_size = op->other_size;
  op->release();
  return m;
}

void gateway_store::fetch_done(const std::string& name) {
  std::vector<std::function<void()>> queued;
  {
    std::lock_guard lock(mutex_);
    fetching_.erase(name);
    if (const auto w = waiters_.find(name); w != waiters_.end()) {
      queued = std::move(w->second);
      waiters_.erase(w);
    }
  }
  for (const auto& look_again : queued) look_again();
}

gateway_store::mapping gateway_store::reader_of(const streaming_copy& copy) {
  mapping m;
  m.growing_ = copy.file;
  m.fill_ = copy.fill;
  m.size_ = static_cast<std::size_t>(copy.info.size);
  m.info_ = copy.info;
  return m;
}

void gateway_store::fetch_streaming(const object_ref& object, const object_info& info,
                                    detail::cache_index::clock::time_point confirmed, streaming_answer answered) {
  // The fetch's first answer, given once: the mapping of the copy being written, or the whole
  // fetch's result when it ended without one (a pass-through, or an error before the first byte).
  struct handoff {
    std::mutex mutex;
    bool done = false;
    bool streamed = false;  // readers got the copy being written
    streaming_answer answered;
    void give(mapping m, error_code e, std::optional<std::uint64_t> other_size, bool streaming = false) {
      {
        const std::lock_guard lock(mutex);
        if (done) return;
        done = true;
        streamed = streaming;
      }
      if (e == sluice::errc::precondition_failed) e = s3::errc::service_unavailable;  // replaced meanwhile
      const streaming_answer once = std::move(answered);
      once(std::move(m), e, other_size);
    }
  };
  const std::string name = detail::cache_index::name_of(object);
  {
    // Each fetch holds fetch_streams upstream connections: beyond this many at once, a
    // miss is fetched whole on the caller's thread (the server's bounded blocking pool) before it
    // is served.
    constexpr std::size_t max_streaming = 16;
    std::unique_lock lock(mutex_);
    if (streaming_ >= max_streaming) {
      lock.unlock();
      error_code ec;
      std::optional<std::uint64_t> other_size;
      mapping m = fetch(object, info, confirmed, ec, &other_size);
      fetch_done(name);
      if (ec == sluice::errc::precondition_failed) ec = s3::errc::service_unavailable;  // replaced meanwhile
      return answered(std::move(m), ec, other_size);
    }
    ++streaming_;
  }
  auto answer = std::make_shared<handoff>();
  answer->answered = std::move(answered);
  auto fill = std::make_shared<detail::fill_progress>();
  // How the fetch ended (on whichever thread ends it): its readers learn it, later readers no
  // longer join it, and the destructor may go on.
  const auto ended = [this, object, name, fill, size = info.size](error_code fetch_error, bool streamed) {
    if (fetch_error == sluice::errc::precondition_failed) {
      // Replaced on the upstream during the fetch: the reader's client retries and gets the new one.
      log("gateway_store: GET " + name + ": the upstream's version changed during the fetch");
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
      fill->finish(size);
    }
    fetch_done(name);
    std::lock_guard lock(mutex_);
    // Under the lock, the last use of the store: the destructor goes on once it is released.
    if (--streaming_ == 0 && drained_) drained_->set_value();
  };
  std::shared_ptr<fetch_operation> op;
  error_code fetch_error;
  mapping passed;
  std::optional<std::uint64_t> passed_size;
  try {
    op = prepare_fetch(
        object, info, confirmed, fill,
        [this, name, answer](const streaming_copy& growing) {
          {
            std::lock_guard lock(mutex_);  // later readers of this version join it (resolve)
            streams_.insert_or_assign(name, growing);
          }
          answer->give(reader_of(growing), {}, std::nullopt, true);
        },
        fetch_error);
    if (op && !op->cacheable()) {
      passed = pass_through(*op, fetch_error);  // on this thread, as map() would
      passed_size = op->other_size;
      op->release();
      op.reset();
    }
  } catch (const std::exception& e) {  // bad_alloc
    log("gateway_store: GET " + name + ": the fetch failed: " + e.what());
    fetch_error = s3::errc::service_unavailable;
    op.reset();
  }
  if (!op) {
    ended(fetch_error, false);
    return answer->give(std::move(passed), fetch_error, passed_size);
  }
  // The rest of the fetch runs on the client's executor; the readers of the copy wait on `fill`.
  start_fetch(op, [this, op, answer, ended](error_code transfer_error) {
    mapping done;
    error_code e = transfer_error;
    try {
      done = finish_fetch(*op, e);
    } catch (const std::exception& x) {  // bad_alloc
      log("gateway_store: GET " + op->name + ": the fetch failed: " + x.what());
      e = s3::errc::service_unavailable;
    }
    const std::optional<std::uint64_t> other_size = op->other_size;
    op->release();
    bool streamed = false;
    {
      const std::lock_guard lock(answer->mutex);
      streamed = answer->streamed;
    }
    if (!streamed) answer->give(std::move(done), e, other_size);
    done = {};
    ended(e, streamed);
  });
}

}  // namespace sluice::s3
