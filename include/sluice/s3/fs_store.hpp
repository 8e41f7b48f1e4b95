// SPDX-License-Identifier: Apache-2.0
// fs_store: the crash-safe directory store the S3 server embeds by default. It models
// object_store, mappable_store and multipart_store over one directory tree:
//
//   <root>/lock                                   flock()ed while a store has the root open
//   <root>/tmp/                                   writers' temporary files; emptied at open
//   <root>/buckets/<bucket>/bucket.json           {"v":1,"created":<ns since epoch>[,"owner":S]
//                                                 [,"location":S][,"tags":[[S,S],...]]}
//                                                 (owner: the creating user's access key id, when
//                                                 the server gave one; a file without it still reads;
//                                                 location and tags: bucket_settings, when set)
//   <root>/buckets/<bucket>/objects/<h0h1>/<h>    one file per object; h = hex SHA-256 of the key
//   <root>/buckets/<bucket>/uploads/<id>/upload.json        key and attributes of an upload
//   <root>/buckets/<bucket>/uploads/<id>/part-NNNNN         one file per uploaded part
//
// Keys never become paths: a file is named by the SHA-256 of its key, and the key itself
// lives in the file's header. Bucket names pass is_valid_bucket_name (safe as directory
// names) and upload ids must be 32 lower-case hex digits before they touch a path.
//
// Object file format (parts use the same one):
//
//   offset 0   "SLUICEO1"                    magic, 8 bytes
//   offset 8   u32 little-endian             header length: where the data starts, a multiple
//                                            of 4096 (so that the data can be read with O_DIRECT)
//   offset 12  u32 little-endian             length of the JSON metadata
//   offset 16  JSON metadata                 see below
//   ...        zero bytes up to the header length
//   header     the object's bytes
//
// The JSON metadata is one object with exactly these members:
//   {"v":1,"key_hex":"<key as lower-case hex>","size":N,"last_modified":<ns since epoch>,
//    "etag":S,"content_type":S,"content_encoding":S,"content_disposition":S,"cache_control":S,
//    "metadata":[[S,S],...],"checksums":[[S,S],...]}
// followed by these, each only when set (so that headers written before they existed still read):
//    "content_language":S,"expires":S,"upload_id":S,"tags":[[S,S],...],"part_sizes":[N,...],
//    "part_checksums":[S,...]
// where S is a byte string spelled as a JSON string, or as {"hex":"..."} when it is not valid
// UTF-8 (or when hex is shorter), since keys and header values may hold any bytes. It is
// written by a small escaping writer, always in its shortest spelling, and read back strictly
// with simdjson by parse_object_header, a sans-I/O function fuzzed by fuzz/object_metadata.cpp.
//
// Crash safety: every file is written under a temporary name (objects in <root>/tmp, parts in
// their upload directory), fsync()ed, renamed onto its final name, and the directory fsync()ed
// (fsync can be turned off for tests). A crash therefore leaves the old version or the new one,
// never part of either, plus temporary files that the next open removes. Buckets are created
// in <root>/tmp and renamed into place; removed buckets and uploads are renamed into <root>/tmp
// before they are deleted. At open, the store rebuilds an in-memory sorted index of every
// bucket (key -> size, info) from the object headers; head and list never touch the disk.
//
// Readers: read() opens the current version and preads it; map() mmaps its data. Since a new
// version replaces the file by rename(), a reader that holds an open file or a mapping keeps
// the version it opened, whatever happens to the key afterwards.
//
// Errors are sluice::errc values (not the S3 codes of sluice::s3::errc, which the server maps
// them to); I/O failures (ENOSPC, EIO, ...) are their errno in the generic category.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/config.hpp>
#include <sluice/detail/sharded_shared_mutex.hpp>
#include <sluice/error.hpp>
#include <sluice/names.hpp>
#include <sluice/region.hpp>
#include <sluice/request.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::s3 {

/// Where an fs_store keeps its files and how large an object may grow.
struct fs_store_config {
  std::filesystem::path root;                   ///< created when missing
  std::uint64_t max_object_bytes = 5ULL << 40;  ///< one object or part (S3: 5 TiB)
  bool fsync = true;                            ///< fsync files and directories at publish (off: tests only)
  /// Memory for the bytes of small objects (at most fs_store::small_object_bytes each): read by
  /// the first GET of a version and kept while that version is current (or a mapping holds it),
  /// so that later GETs open and read no file. Past it, small objects are read at each GET.
  std::uint64_t small_object_cache_bytes = std::uint64_t{64} << 20;

  /// Valid when root is not empty and max_object_bytes is 1..2^62.
  [[nodiscard]] std::optional<config_error> validate() const;
};

/// Data of an object file starts at a multiple of this many bytes.
inline constexpr std::uint64_t object_header_alignment = 4096;
/// Object data reaches the file in whole pieces of this size at offsets that are multiples of it
/// (writes gather up to the next boundary): Linux then keeps it in the page cache as large
/// folios, which cudaHostRegister pins about three times faster than 4 KiB pages (same-host
/// grants register the page cache of a GET's object). Measured in docs/history/performance-2026-11.md.
inline constexpr std::uint64_t store_write_unit = std::uint64_t{2} << 20;
/// Largest header (magic, lengths, JSON, padding) of an object file.
inline constexpr std::uint64_t max_object_header_bytes = std::uint64_t{1} << 20;

/// Parses the header of an object or part file from its first bytes (at least the magic, the
/// lengths and the JSON; padding present in `bytes` must be zero). Returns the object's info
/// and sets `data_offset` to where its data starts. Anything malformed, truncated or oversize
/// is sluice::errc::protocol_violation (with `data_offset` 0 and an empty info); never reads outside
/// `bytes`.
[[nodiscard]] object_info parse_object_header(std::span<const std::byte> bytes, std::uint64_t& data_offset,
                                              error_code& ec);

/// Encodes the header of an object file for `info`: magic, lengths, JSON and zero padding, in
/// all the returned size bytes, a multiple of object_header_alignment and at least
/// `min_header_bytes`. sluice::errc::invalid_argument when the key is not a valid object key or the
/// header would exceed max_object_header_bytes.
[[nodiscard]] std::vector<std::byte> encode_object_header(const object_info& info, std::uint64_t min_header_bytes,
                                                          error_code& ec);

/// A crash-safe object store in a directory (see the top of this header). All members may be
/// called from several threads at once; a single writer or mapping is not meant to be shared.
/// Writers and mappings refer to their store, which must outlive them. Only one store (in any
/// process) may have a root open at a time.
class fs_store {
 public:
  /// Stages one object (or one part of a multipart upload) in a temporary file; commit
  /// publishes it atomically, destruction without commit removes the file.
  class writer {
   public:
    writer() = default;
    writer(writer&& other) noexcept;
    writer& operator=(writer&& other) noexcept;
    writer(const writer&) = delete;
    writer& operator=(const writer&) = delete;
    ~writer();

    /// Appends `data`. errc::capacity_exceeded when the object would outgrow
    /// max_object_bytes; an I/O error (ENOSPC, EIO) as its errno in the generic category.
    /// On error nothing of `data` counts and the writer stays usable.
    void write(std::span<const std::byte> data, error_code& ec);

    /// Writes the header, fsyncs, and renames the file onto the object (or part) it replaces.
    /// Returns the published info. errc::no_such_bucket when the bucket went away meanwhile,
    /// errc::no_such_upload for a part of an upload completed or aborted meanwhile,
    /// errc::invalid_argument on an empty writer or when the attributes do not fit in a
    /// header; nothing is published on error. Afterwards the writer is empty.
    object_info commit(const object_attributes& attributes, error_code& ec);

    /// Makes commit conditional: it publishes only when the object it would replace meets
    /// `precondition` at that moment, else fails with errc::precondition_failed. Object writers only.
    void require(write_precondition precondition) { precondition_ = std::move(precondition); }

    /// The temporary file's descriptor; -1 for an empty writer.
    [[nodiscard]] int native_handle() const noexcept { return fd_; }
    /// Counts `n` bytes the caller wrote itself through native_handle() from data_offset() plus
    /// the bytes so far (a writer filled in parallel with pwrite). errc::invalid_argument when
    /// bytes are pending from write(), errc::capacity_exceeded as write().
    void wrote(std::uint64_t n, error_code& ec);
    /// Where the data's first byte lies in native_handle()'s file (until commit).
    [[nodiscard]] std::uint64_t data_offset() const noexcept { return data_offset_; }
    /// How many of the accepted bytes are in the file already (the rest wait for a unit boundary
    /// or commit): a reader of native_handle() may read that many from data_offset().
    [[nodiscard]] std::uint64_t bytes_in_file() const noexcept { return written_ - pending_.size(); }

   private:
    friend class fs_store;
    void reset() noexcept;
    bool flush(error_code& ec);  // writes pending_ out

    fs_store* store_ = nullptr;
    int fd_ = -1;
    std::filesystem::path temp_;
    object_ref object_;
    std::uint64_t data_offset_ = 0;    // where the data goes in the temporary file
    std::uint64_t written_ = 0;        // accepted bytes, pending_ included
    std::vector<std::byte> pending_;   // the last bytes accepted, up to the next unit boundary
    std::string upload_id_;            // part writers only
    std::uint32_t part_number_ = 0;    // 0: an object writer
    write_precondition precondition_;  // checked when the object is published
  };

  /// Keeps one published version of an object open and mapped read-only (PROT_READ): its
  /// bytes stay valid whatever later happens to the key. Move-only. An object of at most
  /// small_object_bytes is read into memory of the mapping's own instead: mapping and unmapping
  /// a few pages per GET costs more than the copy (mmap_lock and a TLB shootdown on every core
  /// the process runs on, measured at ~60% of a 4 KiB GET's server CPU).
  static constexpr std::uint64_t small_object_bytes = std::uint64_t{64} * 1024;

 private:
  /// One published version of an object, shared by the index and every mapping made of it (a
  /// mapping keeps it when the key is replaced or deleted). Nothing in it changes but `cached`:
  /// a small object's bytes, set once by the first map() or read() that finds them missing while
  /// small_object_cache_bytes has room, freed with the version.
  struct version {
    version(object_info object, std::uint64_t offset, std::atomic<std::uint64_t>* cache_budget)
        : info(std::move(object)), data_offset(offset), budget(cache_budget) {}
    version(const version&) = delete;
    version& operator=(const version&) = delete;
    ~version();
    object_info info;
    std::uint64_t data_offset = 0;
    std::atomic<std::uint64_t>* budget;  // the store's count of cached bytes
    mutable std::atomic<const std::byte*> cached{nullptr};
  };
  using entry = std::shared_ptr<const version>;

 public:
  class mapping {
   public:
    mapping() = default;
    mapping(mapping&& other) noexcept;
    mapping& operator=(mapping&& other) noexcept;
    mapping(const mapping&) = delete;
    mapping& operator=(const mapping&) = delete;
    ~mapping();

    /// The object's bytes (host pageable memory; writing them faults). Empty for an empty
    /// mapping or an empty object.
    [[nodiscard]] sluice::const_region region() const noexcept {
      return {data_, size_, memory_kind::host_pageable, -1};
    }
    /// The mapped version's info. Pre: the mapping is not empty.
    [[nodiscard]] const object_info& info() const noexcept { return version_->info; }
    /// The open file's descriptor; -1 for an empty mapping, or for a small object whose bytes
    /// the store holds in memory (small_object_cache_bytes): no file was opened.
    [[nodiscard]] int native_handle() const noexcept { return fd_; }
    /// Where the object's first byte lies in that file (pread(native_handle(), …, data_offset() + i)
    /// reads byte i without touching the mapping).
    [[nodiscard]] std::uint64_t data_offset() const noexcept { return data_offset_; }

   private:
    friend class fs_store;
    void reset() noexcept;

    int fd_ = -1;
    void* base_ = nullptr;               // what mmap returned
    std::size_t length_ = 0;             // what was mapped
    std::unique_ptr<std::byte[]> copy_;  // a small object's bytes, read (not cached) instead of mapped
    const std::byte* data_ = nullptr;
    std::size_t size_ = 0;
    std::uint64_t data_offset_ = 0;
    entry version_;  // the mapped version (its info, its cached bytes)
  };

  using writer_type = writer;
  using part_writer_type = writer;
  using mapping_type = mapping;

  /// Highest part number of a multipart upload (S3: 10000).
  static constexpr std::uint32_t max_part_number = 10000;

  /// Opens (creating when missing) the store at config.root: takes the root's lock, empties
  /// <root>/tmp, removes stray files in upload directories and indexes every bucket.
  /// Throws std::invalid_argument for an invalid config and system_error when the root
  /// cannot be opened (EWOULDBLOCK: another store has it open).
  explicit fs_store(fs_store_config config);
  /// The same, reporting errors in `ec` (errc::invalid_config for an invalid config); null on error.
  static std::unique_ptr<fs_store> open(fs_store_config config, error_code& ec);

  fs_store(const fs_store&) = delete;
  fs_store& operator=(const fs_store&) = delete;
  ~fs_store();

  /// The configuration the store runs with.
  [[nodiscard]] const fs_store_config& config() const noexcept { return config_; }

  /// Files and directories under buckets/ that the last open could not make sense of (an
  /// unreadable header, a name that is not the hash of its key, a file shorter than its
  /// header says). They are left in place for inspection and never served.
  [[nodiscard]] std::size_t skipped_files() const noexcept { return skipped_; }

  /// Bytes of small objects held in memory now (at most config().small_object_cache_bytes).
  [[nodiscard]] std::uint64_t cached_small_bytes() const noexcept {
    return cached_bytes_.load(std::memory_order_relaxed);
  }

  /// Creates an empty bucket. Errors: errc::invalid_name, errc::bucket_exists, I/O errors.
  void create_bucket(std::string_view name, error_code& ec);
  /// As above, recording `owner` (an S3 access key id) in bucket.json with the bucket, in the
  /// same rename: the server's bucket-ownership capability, read back by bucket_owner().
  void create_bucket(std::string_view name, std::string_view owner, error_code& ec);
  /// The owner recorded when the bucket was created; nullopt for a bucket made without one, or
  /// none of that name.
  [[nodiscard]] std::optional<std::string> bucket_owner(std::string_view name) const;
  /// The bucket's settings (its LocationConstraint and tags), kept in bucket.json: the
  /// settings_keeping_store capability. Errors: errc::no_such_bucket.
  [[nodiscard]] bucket_settings bucket_settings_of(std::string_view name, error_code& ec) const;
  /// Replaces the bucket's settings: bucket.json is written anew (under a temporary name,
  /// fsync()ed, renamed over the old one). Errors: errc::no_such_bucket, errc::capacity_exceeded
  /// (bucket.json over max_bucket_json_bytes), I/O errors; on error the old settings stay.
  void set_bucket_settings(std::string_view name, const bucket_settings& settings, error_code& ec);
  /// The largest bucket.json written or read.
  static constexpr std::size_t max_bucket_json_bytes = std::size_t{64} * 1024;
  /// Removes an empty bucket: no object and no upload in progress. Errors:
  /// errc::no_such_bucket, errc::bucket_not_empty, I/O errors.
  void remove_bucket(std::string_view name, error_code& ec);
  /// All buckets in name order.
  std::vector<bucket_info> list_buckets(error_code& ec) const;

  /// The published object's info (from the index). Errors: no_such_bucket, no_such_object.
  object_info head(const object_ref& object, error_code& ec) const;
  /// Copies up to out.size() bytes from `offset` with pread; returns how many (0 at or past
  /// the end). Errors: no_such_bucket, no_such_object, I/O errors.
  std::size_t read(const object_ref& object, std::uint64_t offset, std::span<std::byte> out, error_code& ec) const;
  /// Opens and maps the current version. Errors: no_such_bucket, no_such_object, I/O errors.
  mapping map(const object_ref& object, error_code& ec) const;
  /// The current version without its bytes (an empty region, no file open): what a HEAD needs.
  /// Errors: no_such_bucket, no_such_object.
  mapping describe(const object_ref& object, error_code& ec) const;
  /// Starts a put in a new temporary file. Errors: invalid_name (key), no_such_bucket, I/O errors.
  writer begin_put(const object_ref& object, error_code& ec);
  /// Unlinks the object; open readers and mappings keep their version. Errors:
  /// no_such_bucket, no_such_object, I/O errors.
  void remove(const object_ref& object, error_code& ec);
  /// At most max_keys objects in key order with the prefix, after start_after (from the index).
  list_result list(const list_request& request, error_code& ec) const;

  /// Starts a multipart upload and returns its id (32 random hex characters). `attributes`
  /// are kept for list_uploads. Errors: invalid_name (key), no_such_bucket, I/O errors.
  std::string create_upload(const object_ref& object, const object_attributes& attributes, error_code& ec);
  /// Starts writing part `part_number` (1..max_part_number); its commit replaces an earlier
  /// part of that number atomically. Errors: invalid_name, invalid_argument (part number),
  /// no_such_bucket, no_such_upload (also for an upload of another key), I/O errors.
  writer begin_part(const object_ref& object, std::string_view upload_id, std::uint32_t part_number, error_code& ec);
  /// The uploaded parts, by number. Errors: no_such_bucket, no_such_upload, I/O errors.
  std::vector<part_info> list_parts(const object_ref& object, std::string_view upload_id, error_code& ec) const;
  /// Uploads in progress in `bucket` whose keys start with `prefix`, by key, initiation time
  /// and id. Errors: no_such_bucket, I/O errors.
  std::vector<upload_info> list_uploads(std::string_view bucket, std::string_view prefix, error_code& ec) const;
  /// Concatenates the `chosen` parts (numbers strictly ascending, ETags as uploaded, quotes
  /// stripped) into a new object file published atomically with `attributes` (the caller
  /// computes the multipart ETag), then removes the upload. Errors: invalid_part_order,
  /// no_such_bucket, no_such_upload, invalid_part (missing part, ETag mismatch, or no part),
  /// capacity_exceeded (over max_object_bytes), I/O errors; on error nothing is published and
  /// the upload stays.
  /// With `precondition`, publishes only when the object it would replace meets it at that
  /// moment (else precondition_failed, and the upload stays).
  object_info complete_upload(const object_ref& object, std::string_view upload_id, std::span<const part_info> chosen,
                              const object_attributes& attributes, error_code& ec,
                              const write_precondition& precondition = {});
  /// Removes the upload and its parts; part writers still open for it fail at commit with
  /// no_such_upload. Errors: no_such_bucket, no_such_upload, I/O errors.
  void abort_upload(const object_ref& object, std::string_view upload_id, error_code& ec);

 private:
  struct bucket_state {
    bucket_info info;
    std::optional<std::string> owner;  // from bucket.json
    bucket_settings settings;          // from bucket.json
    std::map<std::string, entry, std::less<>> objects;
  };
  struct opened;  // an open version of an object, for read and map
  struct unopened {};

  fs_store(unopened, fs_store_config config);
  void open_root(error_code& ec);
  void scan_bucket(const std::filesystem::path& dir, std::string_view name, error_code& ec);
  void clean_uploads(const std::filesystem::path& dir);
  // The current version of `object`, its file open; with `cached_suffices`, a small version whose
  // bytes are cached is not opened (fd -1).
  [[nodiscard]] opened open_object(const object_ref& object, error_code& ec, bool cached_suffices = false) const;
  [[nodiscard]] entry make_version(object_info info, std::uint64_t data_offset) const;
  // The index's current version of `object`, or null with no_such_bucket / no_such_object in ec.
  // The caller holds mutex_.
  [[nodiscard]] const entry* find_version(const object_ref& object, error_code& ec) const;
  // A small version's bytes: the cached ones, else read from `fd` and cached when the budget has
  // room, else read into `own`. Null on a read error (in ec).
  const std::byte* small_bytes(const version& v, int fd, std::unique_ptr<std::byte[]>& own, error_code& ec) const;
  [[nodiscard]] std::filesystem::path bucket_dir(std::string_view bucket) const;
  [[nodiscard]] std::filesystem::path object_path(const object_ref& object) const;
  // object_path()'s text into `out` (a GET spells it into a reused buffer).
  void spell_object_path(std::string& out, const object_ref& object) const;
  [[nodiscard]] std::filesystem::path upload_dir(std::string_view bucket, std::string_view upload_id) const;
  [[nodiscard]] std::filesystem::path temp_path(std::string_view prefix);
  [[nodiscard]] std::string random_hex(std::size_t digits);
  [[nodiscard]] bool has_bucket(std::string_view name) const;
  // The upload's key and attributes (upload.json); no_such_upload when absent or of another key.
  [[nodiscard]] upload_info read_upload(const object_ref& object, std::string_view upload_id, error_code& ec) const;
  void sync_directory(const std::filesystem::path& dir, error_code& ec) const;
  writer make_writer(const object_ref& object, const std::filesystem::path& temp, error_code& ec);
  object_info publish(writer& w, const object_attributes& attributes, error_code& ec);

  fs_store_config config_;
  int lock_fd_ = -1;
  std::size_t skipped_ = 0;
  std::mutex random_mutex_;
  std::random_device random_;
  mutable std::atomic<std::uint64_t> cached_bytes_{0};  // small objects' bytes held by versions
  // Guards buckets_ and the renames that publish or remove; every GET reads under it.
  mutable sluice::detail::sharded_shared_mutex mutex_;
  std::map<std::string, bucket_state, std::less<>> buckets_;
};

static_assert(object_store<fs_store>);
static_assert(mappable_store<fs_store>);
static_assert(multipart_store<fs_store>);

}  // namespace sluice::s3
