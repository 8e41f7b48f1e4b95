// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/fs_store.hpp; included by src/s3/s3.cpp.
#include <sluice/s3/fs_store.hpp>

#include <sluice/s3/checksum.hpp>

#include <simdjson.h>

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <system_error>
#include <tuple>
#include <utility>

#include "common/text.hpp"
#include "common/unique_fd.hpp"

// The parts, in order: each uses what the ones before it define. This file is the store
// itself: its directory layout, opening and scanning the root, buckets, objects and listing.
// clang-format off
#include "fs_store_format.ipp"
#include "fs_store_writer.ipp"
// clang-format on

namespace sluice::s3 {

// --- the store -------------------------------------------------------------------------------

struct fs_store::opened {
  fs_store_impl::unique_fd fd;
  entry object;
};

fs_store::version::~version() {
  if (const std::byte* bytes = cached.load(std::memory_order_acquire)) {
    delete[] bytes;
    budget->fetch_sub(info.size, std::memory_order_relaxed);
  }
}

fs_store::entry fs_store::make_version(object_info info, std::uint64_t data_offset) const {
  return std::make_shared<const version>(std::move(info), data_offset, &cached_bytes_);
}

const std::byte* fs_store::small_bytes(const version& v, int fd, std::unique_ptr<std::byte[]>& own,
                                       error_code& ec) const {
  if (const std::byte* cached = v.cached.load(std::memory_order_acquire)) return cached;
  const auto size = static_cast<std::size_t>(v.info.size);
  auto bytes = std::make_unique_for_overwrite<std::byte[]>(size);
  if (fs_store_impl::read_all(fd, bytes.get(), size, v.data_offset, ec) != size) {
    if (!ec) ec = sluice::errc::protocol_violation;  // shorter than its header says
    return nullptr;
  }
  const std::uint64_t held = cached_bytes_.fetch_add(size, std::memory_order_relaxed);
  if (held + size > config_.small_object_cache_bytes) {  // no room: this GET's own copy
    cached_bytes_.fetch_sub(size, std::memory_order_relaxed);
    own = std::move(bytes);
    return own.get();
  }
  const std::byte* expected = nullptr;
  if (v.cached.compare_exchange_strong(expected, bytes.get(), std::memory_order_acq_rel, std::memory_order_acquire)) {
    return bytes.release();  // the version's now, freed with it
  }
  cached_bytes_.fetch_sub(size, std::memory_order_relaxed);  // another reader cached them first
  return expected;
}

fs_store::fs_store(unopened, fs_store_config config) : config_(std::move(config)) {}

fs_store::fs_store(fs_store_config config) : config_(std::move(config)) {
  if (auto error = config_.validate()) throw std::invalid_argument(error->message());
  error_code ec;
  open_root(ec);
  if (ec) {
    if (lock_fd_ >= 0) ::close(lock_fd_);
    detail::throw_on_error(ec, "fs_store: cannot open the root");
  }
}

std::unique_ptr<fs_store> fs_store::open(fs_store_config config, error_code& ec) {
  if (config.validate()) {
    ec = sluice::errc::invalid_config;
    return nullptr;
  }
  std::unique_ptr<fs_store> store(new fs_store(unopened{}, std::move(config)));
  store->open_root(ec);
  if (ec) return nullptr;
  return store;
}

fs_store::~fs_store() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

std::filesystem::path fs_store::bucket_dir(std::string_view bucket) const {
  return config_.root / "buckets" / std::string(bucket);
}

void fs_store::spell_object_path(std::string& out, const object_ref& object) const {
  std::array<char, 64> hash{};
  hex_into(hash, sluice::s3::sha256(std::as_bytes(std::span(object.key.data(), object.key.size()))));
  out.assign(config_.root.native()).append("/buckets/").append(object.bucket).append("/objects/");
  out.append(hash.data(), 2).push_back('/');
  out.append(hash.data(), hash.size());
}

std::filesystem::path fs_store::object_path(const object_ref& object) const {
  std::string path;
  spell_object_path(path, object);
  return path;
}

std::filesystem::path fs_store::upload_dir(std::string_view bucket, std::string_view upload_id) const {
  return bucket_dir(bucket) / "uploads" / std::string(upload_id);
}

std::string fs_store::random_hex(std::size_t digits) {
  std::string out;
  out.reserve(digits + 8);
  std::lock_guard lock(random_mutex_);
  while (out.size() < digits) {
    const std::uint32_t word = random_();
    for (int shift = 28; shift >= 0; shift -= 4) out.push_back(fs_store_impl::hex_digits[(word >> shift) & 0xfU]);
  }
  out.resize(digits);
  return out;
}

std::filesystem::path fs_store::temp_path(std::string_view prefix) {
  return config_.root / "tmp" / (std::string(prefix) + random_hex(32));
}

bool fs_store::has_bucket(std::string_view name) const {
  std::shared_lock lock(mutex_);
  return buckets_.find(name) != buckets_.end();
}

void fs_store::sync_directory(const std::filesystem::path& dir, error_code& ec) const {
  ec = {};
  if (!config_.fsync) return;
  fs_store_impl::unique_fd fd = fs_store_impl::open_fd(dir, O_RDONLY | O_DIRECTORY, ec);
  if (ec) return;
  if (::fsync(fd.get()) != 0) ec = fs_store_impl::last_error();
}

void fs_store::open_root(error_code& ec) {
  namespace impl = fs_store_impl;
  namespace fs = std::filesystem;
  std::error_code e;
  fs::create_directories(config_.root / "buckets", e);
  if (!e) fs::create_directories(config_.root / "tmp", e);
  if (e) {
    ec = impl::sys_error(e);
    return;
  }
  impl::unique_fd lock = impl::open_fd(config_.root / "lock", O_RDWR | O_CREAT, ec);
  if (ec) return;
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    ec = impl::last_error();
    return;
  }
  lock_fd_ = lock.release();

  // Crash leftovers: temporary files, buckets being created or removed, discarded uploads.
  for (const auto& leftover : impl::list_directory(config_.root / "tmp", ec)) {
    fs::remove_all(leftover, e);
    if (e) {
      ec = impl::sys_error(e);
      return;
    }
  }
  if (ec) return;

  const auto entries = impl::list_directory(config_.root / "buckets", ec);
  if (ec) return;
  for (const auto& dir : entries) {
    const std::string name = dir.filename().string();
    if (!is_valid_bucket_name(name) || !impl::is_directory(dir)) {
      ++skipped_;
      continue;
    }
    scan_bucket(dir, name, ec);
    if (ec) return;
  }
  ec = {};
}

void fs_store::scan_bucket(const std::filesystem::path& dir, std::string_view name, error_code& ec) {
  namespace impl = fs_store_impl;
  error_code file_ec;
  const std::string json = impl::read_small_file(dir / "bucket.json", max_bucket_json_bytes, file_ec);
  bucket_state state;
  state.info.name = std::string(name);
  if (file_ec || !impl::decode_bucket_json(json, state.info.created, state.owner, &state.settings)) {
    ++skipped_;
    ec = {};
    return;
  }
  for (const char* sub : {"objects", "uploads"}) {
    if (!impl::is_directory(dir / sub) && !impl::make_directory(dir / sub, ec)) return;
  }

  const auto shards = impl::list_directory(dir / "objects", ec);
  if (ec) return;
  for (const auto& shard : shards) {
    const std::string shard_name = shard.filename().string();
    if (!impl::is_lower_hex(shard_name, 2) || !impl::is_directory(shard)) {
      ++skipped_;
      continue;
    }
    const auto files = impl::list_directory(shard, ec);
    if (ec) return;
    for (const auto& file : files) {
      const std::string file_name = file.filename().string();
      bool good = impl::is_lower_hex(file_name, 64) && file_name.starts_with(shard_name);
      impl::unique_fd fd;
      if (good) {
        fd = impl::open_fd(file, O_RDONLY | O_NOFOLLOW, file_ec);
        good = !file_ec;
      }
      object_info info;
      std::uint64_t data_offset = 0;
      struct stat st {};
      if (good) {
        info = impl::read_header(fd.get(), data_offset, file_ec);
        good = !file_ec && ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) &&
               sluice::s3::sha256_hex(info.key) == file_name && static_cast<std::uint64_t>(st.st_size) >= data_offset &&
               static_cast<std::uint64_t>(st.st_size) - data_offset == info.size;
      }
      if (!good) {
        ++skipped_;
        continue;
      }
      std::string key = info.key;
      state.objects.emplace(std::move(key), make_version(std::move(info), data_offset));
    }
  }
  clean_uploads(dir / "uploads");
  buckets_.emplace(std::string(name), std::move(state));
  ec = {};
}

void fs_store::clean_uploads(const std::filesystem::path& dir) {
  namespace impl = fs_store_impl;
  error_code ec;
  for (const auto& upload : impl::list_directory(dir, ec)) {
    const std::string id = upload.filename().string();
    if (!impl::valid_upload_id(id) || !impl::is_directory(upload)) {
      ++skipped_;
      continue;
    }
    object_info info;
    const std::string json = impl::read_small_file(upload / "upload.json", max_object_header_bytes, ec);
    if (ec || !impl::decode_info_json(json, info)) {
      impl::remove_quietly(upload);  // cannot be an upload anyone can name: discard it
      continue;
    }
    for (const auto& file : impl::list_directory(upload, ec)) {
      const std::string name = file.filename().string();
      if (name == "upload.json") continue;
      bool good = impl::part_number_of(name) != 0;
      if (good) {
        error_code file_ec;
        impl::unique_fd fd = impl::open_fd(file, O_RDONLY | O_NOFOLLOW, file_ec);
        std::uint64_t offset = 0;
        if (!file_ec) (void)impl::read_header(fd.get(), offset, file_ec);
        good = !file_ec;
      }
      // Partial part files ("tmp-..." of a writer that crashed) and damaged parts go.
      if (!good) impl::remove_quietly(file);
    }
  }
}

void fs_store::create_bucket(std::string_view name, error_code& ec) { create_bucket(name, {}, ec); }

std::optional<std::string> fs_store::bucket_owner(std::string_view name) const {
  std::shared_lock lock(mutex_);
  const auto it = buckets_.find(name);
  return it == buckets_.end() ? std::nullopt : it->second.owner;
}

void fs_store::create_bucket(std::string_view name, std::string_view owner, error_code& ec) {
  namespace impl = fs_store_impl;
  std::optional<std::string> recorded;
  if (!owner.empty()) recorded = std::string(owner);
  if (!is_valid_bucket_name(name)) {
    ec = sluice::errc::invalid_name;
    return;
  }
  if (has_bucket(name)) {
    ec = sluice::errc::bucket_exists;
    return;
  }
  // Built complete in tmp, then renamed into place: a crash leaves no half-made bucket.
  const auto created = std::chrono::system_clock::now();
  const auto staging = temp_path("bucket-");
  auto fail = [&](error_code e) {
    impl::remove_quietly(staging);
    ec = e;
  };
  if (!impl::make_directory(staging, ec) || !impl::make_directory(staging / "objects", ec) ||
      !impl::make_directory(staging / "uploads", ec) ||
      !impl::write_new_file(staging / "bucket.json", impl::encode_bucket_json(created, recorded), config_.fsync, ec)) {
    return fail(ec);
  }
  sync_directory(staging, ec);
  if (ec) return fail(ec);
  {
    std::unique_lock lock(mutex_);
    if (buckets_.find(name) != buckets_.end()) return fail(sluice::errc::bucket_exists);
    if (!impl::rename_path(staging, bucket_dir(name), ec)) return fail(ec);
    bucket_state state;
    state.info = {std::string(name), created};
    state.owner = std::move(recorded);
    buckets_.emplace(std::string(name), std::move(state));
  }
  sync_directory(config_.root / "buckets", ec);
}

bucket_settings fs_store::bucket_settings_of(std::string_view name, error_code& ec) const {
  std::shared_lock lock(mutex_);
  const auto it = buckets_.find(name);
  if (it == buckets_.end()) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  ec = {};
  return it->second.settings;
}

void fs_store::set_bucket_settings(std::string_view name, const bucket_settings& settings, error_code& ec) {
  namespace impl = fs_store_impl;
  std::chrono::system_clock::time_point created;
  std::optional<std::string> owner;
  {
    std::shared_lock lock(mutex_);
    const auto it = buckets_.find(name);
    if (it == buckets_.end()) {
      ec = sluice::errc::no_such_bucket;
      return;
    }
    created = it->second.info.created;
    owner = it->second.owner;
  }
  const std::string json = impl::encode_bucket_json(created, owner, settings);
  if (json.size() > max_bucket_json_bytes) {
    ec = sluice::errc::capacity_exceeded;
    return;
  }
  // A new bucket.json written whole, then renamed over the old one: a crash leaves one of them.
  const auto temp = temp_path("bucket-json-");
  if (!impl::write_new_file(temp, json, config_.fsync, ec)) {
    impl::remove_quietly(temp);
    return;
  }
  {
    std::unique_lock lock(mutex_);
    const auto it = buckets_.find(name);
    if (it == buckets_.end()) {
      impl::remove_quietly(temp);
      ec = sluice::errc::no_such_bucket;
      return;
    }
    if (!impl::rename_path(temp, bucket_dir(name) / "bucket.json", ec)) {
      impl::remove_quietly(temp);
      return;
    }
    it->second.settings = settings;
  }
  sync_directory(bucket_dir(name), ec);
}

void fs_store::remove_bucket(std::string_view name, error_code& ec) {
  namespace impl = fs_store_impl;
  const auto trash = temp_path("trash-");
  {
    std::unique_lock lock(mutex_);
    auto it = buckets_.find(name);
    if (it == buckets_.end()) {
      ec = sluice::errc::no_such_bucket;
      return;
    }
    if (!it->second.objects.empty()) {
      ec = sluice::errc::bucket_not_empty;
      return;
    }
    const auto uploads = impl::list_directory(bucket_dir(name) / "uploads", ec);
    if (ec) return;
    if (!uploads.empty()) {
      ec = sluice::errc::bucket_not_empty;  // uploads in progress count as content
      return;
    }
    if (!impl::rename_path(bucket_dir(name), trash, ec)) return;
    buckets_.erase(it);
  }
  sync_directory(config_.root / "buckets", ec);
  impl::remove_quietly(trash);
}

std::vector<bucket_info> fs_store::list_buckets(error_code& ec) const {
  std::shared_lock lock(mutex_);
  std::vector<bucket_info> out;
  out.reserve(buckets_.size());
  for (const auto& [name, state] : buckets_) out.push_back(state.info);
  ec = {};
  return out;
}

const fs_store::entry* fs_store::find_version(const object_ref& object, error_code& ec) const {
  auto b = buckets_.find(object.bucket);
  if (b == buckets_.end()) {
    ec = sluice::errc::no_such_bucket;
    return nullptr;
  }
  auto it = b->second.objects.find(object.key);
  if (it == b->second.objects.end()) {
    ec = sluice::errc::no_such_object;
    return nullptr;
  }
  ec = {};
  return &it->second;
}

object_info fs_store::head(const object_ref& object, error_code& ec) const {
  std::shared_lock lock(mutex_);
  const entry* found = find_version(object, ec);
  return found ? (*found)->info : object_info{};
}

fs_store::opened fs_store::open_object(const object_ref& object, error_code& ec, bool cached_suffices) const {
  // Opened under the lock: renames and unlinks take it exclusively, so the file opened is the
  // version the index describes.
  std::shared_lock lock(mutex_);
  const entry* found = find_version(object, ec);
  if (found == nullptr) return {};
  opened out{{}, *found};
  if (cached_suffices && out.object->cached.load(std::memory_order_acquire) != nullptr) return out;
  // object_path() spelled into this thread's buffer: a GET builds no path object.
  thread_local std::string path;
  spell_object_path(path, object);
  out.fd = fs_store_impl::open_fd(path.c_str(), O_RDONLY, ec);
  if (ec) return {};
  return out;
}

std::size_t fs_store::read(const object_ref& object, std::uint64_t offset, std::span<std::byte> out,
                           error_code& ec) const {
  const opened found = open_object(object, ec, true);
  if (ec) return 0;
  const version& v = *found.object;
  const std::uint64_t size = v.info.size;
  if (offset >= size || out.empty()) return 0;
  const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), size - offset));
  if (size <= small_object_bytes) {
    std::unique_ptr<std::byte[]> own;
    const std::byte* bytes = small_bytes(v, found.fd.get(), own, ec);
    if (bytes == nullptr) return 0;
    std::memcpy(out.data(), bytes + offset, n);
    return n;
  }
  const std::size_t got = fs_store_impl::read_all(found.fd.get(), out.data(), n, v.data_offset + offset, ec);
  if (ec) return 0;
  if (got != n) {  // the file is shorter than its header says: damaged behind our back
    ec = fs_store_impl::sys_error(EIO);
    return 0;
  }
  return n;
}

fs_store::mapping fs_store::describe(const object_ref& object, error_code& ec) const {
  std::shared_lock lock(mutex_);
  const entry* found = find_version(object, ec);
  mapping m;
  if (found != nullptr) m.version_ = *found;
  return m;
}

fs_store::mapping fs_store::map(const object_ref& object, error_code& ec) const {
  opened found = open_object(object, ec, true);
  if (ec) return {};
  mapping m;
  m.fd_ = found.fd.release();
  m.version_ = std::move(found.object);
  const version& v = *m.version_;
  if (v.info.size == 0) return m;
  const std::uint64_t offset = v.data_offset;
  m.data_offset_ = offset;
  if (v.info.size <= small_object_bytes) {  // read (and cached), not mapped (see mapping)
    m.data_ = small_bytes(v, m.fd_, m.copy_, ec);
    if (m.data_ == nullptr) return {};
    m.size_ = static_cast<std::size_t>(v.info.size);
    return m;
  }
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t aligned = offset - offset % page;
  const auto length = static_cast<std::size_t>(offset - aligned + v.info.size);
  void* base = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, m.fd_, fs_store_impl::to_off(aligned));
  if (base == MAP_FAILED) {
    ec = fs_store_impl::last_error();
    return {};
  }
  m.base_ = base;
  m.length_ = length;
  m.data_ = static_cast<const std::byte*>(base) + (offset - aligned);
  m.size_ = static_cast<std::size_t>(v.info.size);
  return m;
}

fs_store::writer fs_store::make_writer(const object_ref& object, const std::filesystem::path& temp, error_code& ec) {
  fs_store_impl::unique_fd fd = fs_store_impl::open_fd(temp, O_RDWR | O_CREAT | O_EXCL, ec);
  if (ec) return {};
  writer w;
  w.store_ = this;
  w.fd_ = fd.release();
  w.temp_ = temp;
  w.object_ = object;
  w.data_offset_ = fs_store_impl::initial_header_bytes(object.key);
  return w;
}

fs_store::writer fs_store::begin_put(const object_ref& object, error_code& ec) {
  if (!is_valid_object_key(object.key)) {
    ec = sluice::errc::invalid_name;
    return {};
  }
  if (!has_bucket(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  return make_writer(object, temp_path("object-"), ec);
}

object_info fs_store::publish(writer& w, const object_attributes& attributes, error_code& ec) {
  namespace impl = fs_store_impl;
  object_info info{w.object_.key, w.written_, std::chrono::system_clock::now(), attributes};
  if (!w.flush(ec)) return {};
  // Drop whatever a failed write left past the data.
  if (::ftruncate(w.fd_, impl::to_off(w.data_offset_ + w.written_)) != 0) {
    ec = impl::last_error();
    return {};
  }
  const auto header = encode_object_header(info, w.data_offset_, ec);
  if (ec) return {};
  if (header.size() != w.data_offset_) {
    // The attributes outgrew the room left for them: move the data into a new file.
    const auto moved = w.part_number_ == 0 ? temp_path("object-")
                                           : upload_dir(w.object_.bucket, w.upload_id_) / ("tmp-" + random_hex(32));
    impl::unique_fd fd = impl::open_fd(moved, O_RDWR | O_CREAT | O_EXCL, ec);
    if (w.part_number_ != 0 && ec == boost::system::errc::no_such_file_or_directory) ec = sluice::errc::no_such_upload;
    if (ec) return {};
    const bool copied = impl::copy_range(w.fd_, w.data_offset_, fd.get(), header.size(), w.written_, ec);
    ::close(w.fd_);
    ::unlink(w.temp_.c_str());
    w.fd_ = fd.release();
    w.temp_ = moved;
    w.data_offset_ = header.size();
    if (!copied) return {};
  }
  if (!impl::write_all(w.fd_, header.data(), header.size(), 0, ec)) return {};
  if (config_.fsync && ::fsync(w.fd_) != 0) {
    ec = impl::last_error();
    return {};
  }

  if (w.part_number_ != 0) {
    const auto dir = upload_dir(w.object_.bucket, w.upload_id_);
    {
      std::shared_lock lock(mutex_);  // excludes abort, complete and remove_bucket
      if (buckets_.find(w.object_.bucket) == buckets_.end()) {
        ec = sluice::errc::no_such_bucket;
        return {};
      }
      if (!impl::rename_path(w.temp_, dir / impl::part_file_name(w.part_number_), ec)) {
        if (ec == boost::system::errc::no_such_file_or_directory) ec = sluice::errc::no_such_upload;
        return {};
      }
      w.temp_.clear();
    }
    sync_directory(dir, ec);
    return info;
  }

  const auto path = object_path(w.object_);
  const auto shard = path.parent_path();
  bool new_shard = false;
  {
    std::unique_lock lock(mutex_);
    auto b = buckets_.find(w.object_.bucket);
    if (b == buckets_.end()) {
      ec = sluice::errc::no_such_bucket;
      return {};
    }
    if (!w.precondition_.none()) {
      const auto current = b->second.objects.find(w.object_.key);
      if (!w.precondition_.met_by(current == b->second.objects.end() ? nullptr
                                                                     : &current->second->info.attributes.etag)) {
        ec = sluice::errc::precondition_failed;
        return {};
      }
    }
    new_shard = ::mkdir(shard.c_str(), 0755) == 0;
    if (!new_shard && errno != EEXIST) {
      ec = impl::last_error();
      return {};
    }
    if (!impl::rename_path(w.temp_, path, ec)) return {};
    w.temp_.clear();
    b->second.objects.insert_or_assign(w.object_.key, make_version(info, w.data_offset_));
  }
  if (new_shard) sync_directory(shard.parent_path(), ec);
  if (!ec) sync_directory(shard, ec);
  return info;  // the caller reports an fsync error (the object is visible, its durability unknown)
}

void fs_store::remove(const object_ref& object, error_code& ec) {
  const auto path = object_path(object);
  {
    std::unique_lock lock(mutex_);
    auto b = buckets_.find(object.bucket);
    if (b == buckets_.end()) {
      ec = sluice::errc::no_such_bucket;
      return;
    }
    auto it = b->second.objects.find(object.key);
    if (it == b->second.objects.end()) {
      ec = sluice::errc::no_such_object;
      return;
    }
    if (::unlink(path.c_str()) != 0) {
      ec = fs_store_impl::last_error();
      return;
    }
    b->second.objects.erase(it);
  }
  sync_directory(path.parent_path(), ec);
}

list_result fs_store::list(const list_request& request, error_code& ec) const {
  std::shared_lock lock(mutex_);
  list_result out;
  auto b = buckets_.find(request.bucket);
  if (b == buckets_.end()) {
    ec = sluice::errc::no_such_bucket;
    return out;
  }
  const auto& objects = b->second.objects;
  // First key: after start_after when that lies inside or past the prefix, else the prefix itself.
  auto it = request.start_after < request.prefix ? objects.lower_bound(request.prefix)
                                                 : objects.upper_bound(request.start_after);
  for (; it != objects.end() && it->first.starts_with(request.prefix); ++it) {
    if (out.objects.size() == request.max_keys) {
      out.truncated = true;
      break;
    }
    out.objects.push_back(it->second->info);
  }
  ec = {};
  return out;
}

}  // namespace sluice::s3

#include "fs_store_multipart.ipp"
