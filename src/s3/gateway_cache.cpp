// SPDX-License-Identifier: Apache-2.0
// The gateway store's cache (include/sluice/s3/gateway_store.hpp): its index and byte budget,
// the plan and progress of a fetch's copy, the mapping of a copy being written, and the members
// that keep the cache within its budget and its disk. A translation unit of its own.
#include "gateway_internal.hpp"

#include <sluice/s3/gateway_store.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <boost/asio/error.hpp>

#include <algorithm>
#include <cerrno>
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

fill_progress::~fill_progress() {
  // Nobody else holds the fill now: no lock.
  for (auto& waiting : waiters_) waiting.second(boost::asio::error::operation_aborted);
}

void fill_progress::async_wait_until(std::uint64_t end, waiter done) {
  error_code answer;
  {
    const std::lock_guard lock(mutex_);
    if (!ready(end)) {
      if (!ended_) {
        waiters_.emplace(end, std::move(done));
        return;
      }
      answer = error_;
    }
  }
  done(answer);
}

void fill_progress::advance(std::uint64_t ready) {
  // The waiters it satisfies move here, node by node (no allocation), and are answered unlocked.
  std::multimap<std::uint64_t, waiter> due;
  {
    const std::lock_guard lock(mutex_);
    if (ended_ || ready <= ready_.load(std::memory_order_relaxed)) return;
    ready_.store(ready, std::memory_order_release);
    const auto last = waiters_.upper_bound(ready);
    while (waiters_.begin() != last) due.insert(waiters_.extract(waiters_.begin()));
  }
  for (auto& satisfied : due) satisfied.second({});
}

void fill_progress::finish(std::uint64_t size) { settle(size, sluice::errc::protocol_violation); }

void fill_progress::fail(error_code ec) { settle(0, ec ? ec : error_code(sluice::errc::protocol_violation)); }

void fill_progress::settle(std::uint64_t size, error_code error) {
  std::multimap<std::uint64_t, waiter> due;
  {
    const std::lock_guard lock(mutex_);
    if (ended_) return;
    ended_ = true;
    error_ = error;
    if (size > ready_.load(std::memory_order_relaxed)) ready_.store(size, std::memory_order_release);
    due.swap(waiters_);
  }
  // error_ and ready_ no longer change.
  for (auto& [wanted, done] : due) done(ready(wanted) ? error_code{} : error_);
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

// -- the budget ---------------------------------------------------------------------------------

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

}  // namespace sluice::s3
