// SPDX-License-Identifier: Apache-2.0
// Multipart uploads: staged parts in the bucket's upload directory, completion by one rename.
// Part of fs_store's implementation (include/sluice/s3/fs_store.hpp), included by src/s3/fs_store.ipp
// in the order written there.

namespace sluice::s3 {

// --- multipart -------------------------------------------------------------------------------

upload_info fs_store::read_upload(const object_ref& object, std::string_view upload_id, error_code& ec) const {
  namespace impl = fs_store_impl;
  if (!impl::valid_upload_id(upload_id)) {
    ec = sluice::errc::no_such_upload;
    return {};
  }
  const std::string json =
      impl::read_small_file(upload_dir(object.bucket, upload_id) / "upload.json", max_object_header_bytes, ec);
  if (ec == boost::system::errc::no_such_file_or_directory) ec = sluice::errc::no_such_upload;
  if (ec) return {};
  object_info info;
  if (!impl::decode_info_json(json, info)) {
    ec = sluice::errc::protocol_violation;
    return {};
  }
  if (info.key != object.key) {
    ec = sluice::errc::no_such_upload;
    return {};
  }
  ec = {};
  return {std::move(info.key), std::string(upload_id), info.last_modified, std::move(info.attributes)};
}

std::string fs_store::create_upload(const object_ref& object, const object_attributes& attributes, error_code& ec) {
  namespace impl = fs_store_impl;
  if (!is_valid_object_key(object.key)) {
    ec = sluice::errc::invalid_name;
    return {};
  }
  if (!has_bucket(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  const std::string json = impl::encode_info_json({object.key, 0, std::chrono::system_clock::now(), attributes});
  if (json.size() > max_object_header_bytes) {
    ec = sluice::errc::invalid_argument;
    return {};
  }
  std::string id = random_hex(32);
  const auto staging = temp_path("upload-");
  auto fail = [&](error_code e) {
    impl::remove_quietly(staging);
    ec = e;
    return std::string();
  };
  if (!impl::make_directory(staging, ec) || !impl::write_new_file(staging / "upload.json", json, config_.fsync, ec)) {
    return fail(ec);
  }
  sync_directory(staging, ec);
  if (ec) return fail(ec);
  const auto dir = upload_dir(object.bucket, id);
  {
    std::shared_lock lock(mutex_);  // excludes remove_bucket
    if (buckets_.find(object.bucket) == buckets_.end()) return fail(sluice::errc::no_such_bucket);
    if (!impl::rename_path(staging, dir, ec)) return fail(ec);
  }
  sync_directory(dir.parent_path(), ec);
  if (ec) return {};
  return id;
}

fs_store::writer fs_store::begin_part(const object_ref& object, std::string_view upload_id, std::uint32_t part_number,
                                      error_code& ec) {
  if (!is_valid_object_key(object.key)) {
    ec = sluice::errc::invalid_name;
    return {};
  }
  if (part_number == 0 || part_number > max_part_number) {
    ec = sluice::errc::invalid_argument;
    return {};
  }
  if (!has_bucket(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  (void)read_upload(object, upload_id, ec);
  if (ec) return {};
  writer w = make_writer(object, upload_dir(object.bucket, upload_id) / ("tmp-" + random_hex(32)), ec);
  if (ec == boost::system::errc::no_such_file_or_directory) ec = sluice::errc::no_such_upload;  // aborted meanwhile
  if (ec) return {};
  w.upload_id_ = std::string(upload_id);
  w.part_number_ = part_number;
  return w;
}

std::vector<part_info> fs_store::list_parts(const object_ref& object, std::string_view upload_id,
                                            error_code& ec) const {
  namespace impl = fs_store_impl;
  if (!has_bucket(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  (void)read_upload(object, upload_id, ec);
  if (ec) return {};
  const auto files = impl::list_directory(upload_dir(object.bucket, upload_id), ec);
  if (ec == boost::system::errc::no_such_file_or_directory) ec = sluice::errc::no_such_upload;
  if (ec) return {};
  std::vector<part_info> out;
  for (const auto& file : files) {
    const std::uint32_t number = impl::part_number_of(file.filename().string());
    if (number == 0) continue;
    impl::unique_fd fd = impl::open_fd(file, O_RDONLY, ec);
    if (ec == boost::system::errc::no_such_file_or_directory) continue;  // aborted meanwhile
    if (ec) return {};
    std::uint64_t offset = 0;
    object_info info = impl::read_header(fd.get(), offset, ec);
    if (ec) return {};
    out.push_back(
        {number, info.size, std::move(info.attributes.etag), info.last_modified, std::move(info.attributes.checksums)});
  }
  std::sort(out.begin(), out.end(), [](const part_info& a, const part_info& b) { return a.number < b.number; });
  ec = {};
  return out;
}

std::vector<upload_info> fs_store::list_uploads(std::string_view bucket, std::string_view prefix,
                                                error_code& ec) const {
  namespace impl = fs_store_impl;
  if (!has_bucket(bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  const auto dirs = impl::list_directory(bucket_dir(bucket) / "uploads", ec);
  if (ec) return {};
  std::vector<upload_info> out;
  for (const auto& dir : dirs) {
    const std::string id = dir.filename().string();
    if (!impl::valid_upload_id(id)) continue;
    const std::string json = impl::read_small_file(dir / "upload.json", max_object_header_bytes, ec);
    if (ec == boost::system::errc::no_such_file_or_directory) continue;  // completed or aborted meanwhile
    if (ec) return {};
    object_info info;
    if (!impl::decode_info_json(json, info)) {
      ec = sluice::errc::protocol_violation;
      return {};
    }
    if (!info.key.starts_with(prefix)) continue;
    out.push_back({std::move(info.key), id, info.last_modified, std::move(info.attributes)});
  }
  std::sort(out.begin(), out.end(), [](const upload_info& a, const upload_info& b) {
    return std::tie(a.key, a.initiated, a.upload_id) < std::tie(b.key, b.initiated, b.upload_id);
  });
  ec = {};
  return out;
}

object_info fs_store::complete_upload(const object_ref& object, std::string_view upload_id,
                                      std::span<const part_info> chosen, const object_attributes& attributes,
                                      error_code& ec, const write_precondition& precondition) {
  namespace impl = fs_store_impl;
  if (!impl::ascending(chosen)) {
    ec = sluice::errc::invalid_part_order;
    return {};
  }
  if (!has_bucket(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return {};
  }
  (void)read_upload(object, upload_id, ec);
  if (ec) return {};
  if (chosen.empty()) {
    ec = sluice::errc::invalid_part;
    return {};
  }

  // Open every chosen part and check it; the open files are what gets copied, whatever
  // happens to the names meanwhile.
  const auto dir = upload_dir(object.bucket, upload_id);
  struct source {
    impl::unique_fd fd;
    std::uint64_t offset = 0;
    std::uint64_t size = 0;
  };
  std::vector<source> sources;
  sources.reserve(chosen.size());
  std::uint64_t total = 0;
  for (const part_info& want : chosen) {
    if (want.number == 0 || want.number > max_part_number) {
      ec = sluice::errc::invalid_part;
      return {};
    }
    source s;
    s.fd = impl::open_fd(dir / impl::part_file_name(want.number), O_RDONLY, ec);
    if (ec == boost::system::errc::no_such_file_or_directory) ec = sluice::errc::invalid_part;
    if (ec) return {};
    const object_info part = impl::read_header(s.fd.get(), s.offset, ec);
    if (ec) return {};
    if (part.attributes.etag != want.etag) {
      ec = sluice::errc::invalid_part;
      return {};
    }
    s.size = part.size;
    if (s.size > config_.max_object_bytes - total) {
      ec = sluice::errc::capacity_exceeded;
      return {};
    }
    total += s.size;
    sources.push_back(std::move(s));
  }

  object_info info{object.key, total, std::chrono::system_clock::now(), attributes};
  const auto header = encode_object_header(info, object_header_alignment, ec);
  if (ec) return {};
  const auto temp = temp_path("object-");
  impl::unique_fd out = impl::open_fd(temp, O_RDWR | O_CREAT | O_EXCL, ec);
  if (ec) return {};
  auto fail = [&](error_code e) {
    ::unlink(temp.c_str());
    ec = e;
    return object_info{};
  };
  if (!impl::write_all(out.get(), header.data(), header.size(), 0, ec)) return fail(ec);
  std::uint64_t at = header.size();
  for (const source& s : sources) {
    if (!impl::copy_range(s.fd.get(), s.offset, out.get(), at, s.size, ec)) return fail(ec);
    at += s.size;
  }
  if (config_.fsync && ::fsync(out.get()) != 0) return fail(impl::last_error());

  const auto path = object_path(object);
  const auto shard = path.parent_path();
  const auto trash = temp_path("trash-");
  bool new_shard = false;
  {
    std::unique_lock lock(mutex_);  // excludes part commits, abort and other completions
    auto b = buckets_.find(object.bucket);
    if (b == buckets_.end()) return fail(sluice::errc::no_such_bucket);
    if (::access((dir / "upload.json").c_str(), F_OK) != 0) {
      return fail(errno == ENOENT ? error_code(sluice::errc::no_such_upload) : impl::last_error());
    }
    if (!precondition.none()) {
      const auto current = b->second.objects.find(object.key);
      if (!precondition.met_by(current == b->second.objects.end() ? nullptr : &current->second->info.attributes.etag)) {
        return fail(sluice::errc::precondition_failed);
      }
    }
    new_shard = ::mkdir(shard.c_str(), 0755) == 0;
    if (!new_shard && errno != EEXIST) return fail(impl::last_error());
    // Publish first, then retire the upload: a crash in between leaves the object published
    // and the upload still there to complete again or abort, never neither.
    if (!impl::rename_path(temp, path, ec)) return fail(ec);
    b->second.objects.insert_or_assign(object.key, make_version(info, header.size()));
    // Should this fail, the object is published but the upload stays: reported as an error.
    if (!impl::rename_path(dir, trash, ec)) return {};
  }
  if (new_shard) sync_directory(shard.parent_path(), ec);
  if (!ec) sync_directory(shard, ec);
  error_code upload_ec;
  sync_directory(dir.parent_path(), upload_ec);
  if (!ec) ec = upload_ec;
  impl::remove_quietly(trash);
  return ec ? object_info{} : info;
}

void fs_store::abort_upload(const object_ref& object, std::string_view upload_id, error_code& ec) {
  if (!has_bucket(object.bucket)) {
    ec = sluice::errc::no_such_bucket;
    return;
  }
  (void)read_upload(object, upload_id, ec);
  if (ec) return;
  const auto dir = upload_dir(object.bucket, upload_id);
  const auto trash = temp_path("trash-");
  {
    std::unique_lock lock(mutex_);  // excludes part commits and completions
    if (buckets_.find(object.bucket) == buckets_.end()) {
      ec = sluice::errc::no_such_bucket;
      return;
    }
    if (!fs_store_impl::rename_path(dir, trash, ec)) {
      if (ec == boost::system::errc::no_such_file_or_directory) ec = sluice::errc::no_such_upload;
      return;
    }
  }
  sync_directory(dir.parent_path(), ec);
  fs_store_impl::remove_quietly(trash);
}

}  // namespace sluice::s3
