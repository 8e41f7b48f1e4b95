// SPDX-License-Identifier: Apache-2.0
// gateway_store: a store that fronts an existing S3 service (the upstream: MinIO, Ceph RGW, AWS
// S3, another sluice) with a local read-through cache, so that the server's token, grant and
// HTTP paths serve the upstream's objects. It models object_store, mappable_store and
// multipart_store. The upstream stays the system of record; the cache only ever holds copies of
// versions the upstream acknowledged.
//
// On disk, under one root directory:
//
//   <root>/cache/        an fs_store (the layout at the top of fs_store.hpp): the cached
//                        objects, each under its own bucket and key, with the upstream's ETag,
//                        size and attributes in its header; also the parts of multipart
//                        uploads being received
//   <root>/spool/        PUT payloads on their way to the upstream; emptied at open
//
// Cached objects are plain fs_store objects, so a GET of one maps the same file as a local GET
// would: the same registration caches (keyed by the file's device and inode), the same RDMA and
// same-host grant paths.
//
// Consistency rules:
// - Read (head, map, read). With an entry in the cache index whose validation is younger than
//   revalidate_after (0, the default: never), the cached copy is served without asking the
//   upstream. Otherwise the upstream is asked (HEAD): the same ETag and size as the cached copy
//   → the copy is served and its validation renewed; another version → it is fetched (ranged
//   GETs of chunk_bytes, fetch_streams of them in flight, each conditional on the ETag of the
//   HEAD, so the copy is one version; smaller first steps when GETs wait on it, fetch_plan)
//   into an fs_store writer, published atomically, then
//   served. map_streaming (the server's GET) serves an object larger than chunk_bytes while it
//   arrives: the fetch runs as a composed operation on the upstream client's executor (no thread
//   of its own), and the mapping (of the file being written) says how much of it is there (ready, async_wait_until);
//   404 → the cached copy is dropped and the answer is NoSuchKey. head() of an uncached object answers the upstream's
//   HEAD and fetches nothing. map_unconfirmed and confirm split a read in two for the server's GET into a token's
//   memory or with If-Match: the copy (cached, or a fetch's under way) moves while the HEAD is asked, and a copy the
//   HEAD does not confirm is read again through map() (or its HTTP answer is cut short). A GET whose If-Match names
//   the copy's version alone, less than if_match_trust after the copy's validation (the sending of the HEAD that
//   named that version: the last revalidation, or the one before the copy's fetch; a write through the gateway:
//   the upstream's acknowledgement), is not asked again (the parts of one parallel download after the first, which
//   asked): confirm() says yes at once.
// - Write (PUT): the payload is spooled to <root>/spool, sent to the upstream, and only after the
//   upstream acknowledged it copied into the cache under the upstream's ETag. A failed upstream
//   PUT leaves the cache without that key (an older copy is dropped, since the upstream state is
//   then unknown). CompleteMultipartUpload concatenates the parts in the cache's upload area,
//   sends the result to the upstream, and keeps the cached copy only when the upstream's ETag is
//   the one the parts gave (else drops it: the next GET fetches the upstream's).
// - DELETE, the listings, the buckets go to the upstream; LIST is never answered from the cache.
//   A delete drops the cached copy after the upstream acknowledged.
// - Crash: the index is rebuilt from the cache at open with no validation, so every copy is
//   revalidated at its first read whatever revalidate_after says; a copy left by a crash between
//   the local concatenation of a multipart upload and the upstream's answer is thus never served
//   unless the upstream has that version.
// - Budget: the index keeps the cached bytes within cache_bytes (lowered at open, and logged, to
//   what the cache's file system holds less 5 %) by evicting the least recently
//   used copies before a fetch (and when the disk fills up: ENOSPC evicts and retries). An
//   evicted copy that a GET still maps stays readable until that GET ends (fs_store's rename and
//   unlink semantics), so the disk may briefly hold more than the budget. An object larger than
//   the budget, or one that cannot be written to a full disk, is passed through from memory when it is
//   at most passthrough_bytes, else the answer is 503 SlowDown.
// - Upstream failures (no connection, timeouts, 5xx after the client's retries): with
//   stale_if_error, reads of cached objects are served from the cache; everything else fails with
//   s3::errc::service_unavailable (503). Garbage from the upstream fails with
//   s3::errc::bad_gateway (502; below). Other upstream answers (403, 404, 412) pass through.
//
// Every upstream request is signed with the one configured upstream credential, whichever
// gateway user (SigV4 against the gateway's own users) asked. The upstream is not trusted: every
// answer is checked before anything of it is cached or passed on (gateway_upstream.hpp). A size
// over max_object_bytes, an ETag that is not a safe header value, a body shorter or longer than
// announced, a GET of another version than the If-Match asked (an upstream that ignores it), a
// Content-Range outside the range asked, bytes that contradict their single-part MD5 ETag (hashed
// as they arrive; a streamed copy's last byte waits for the hash, so a wrong copy ends short),
// a listing that is not XML or out of order: s3::errc::bad_gateway (502), nothing cached. Sizes
// come from the GETs (Content-Range's total, a 200's Content-Length) over the HEAD's: a HEAD that
// misstated the size is fetched again with theirs. Listings: a page with more keys than asked is
// answered truncated, a full page marked the last one is checked with a one-key page after it,
// and empty truncated pages are followed by their token (up to 16).
//
// Calls block on the upstream. The store says so (`remote`), and the server runs its calls on its
// blocking pool, so a slow upstream never holds a network thread. A fetch runs as a composed
// operation on the upstream client's executor (chains of async_get_object, one ranged step each,
// writing the cache file as the steps land; no thread of its own): the calling thread waits for
// it, or, for map_streaming, only for its first step; readers of the rest are called back as it
// lands (async_wait_until), no thread waits for them. async_map_streaming (the server's GET) waits
// for nothing on a thread: a reader of an object another request is fetching is queued on that
// fetch, and the first step completes the fetching GET. Do not call the store from the upstream
// client's threads. Every member may be called from several threads at once. What the client
// sees only as a 502 or 503 is said through gateway_store_config::log.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/config.hpp>
#include <sluice/error.hpp>
#include <sluice/region.hpp>
#include <sluice/request.hpp>
#include <sluice/s3/client.hpp>
#include <sluice/s3/fs_store.hpp>
#include <sluice/s3/gateway_upstream.hpp>
#include <sluice/s3/server.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::s3 {

/// Where a gateway_store keeps its cache, which upstream it fronts and how it trusts the cache.
struct gateway_store_config {
  std::filesystem::path root;  ///< <root>/cache and <root>/spool; created when missing
  /// The upstream: endpoint (http(s)://host[:port]), ca_bundle, creds, region, timeouts.
  client_config upstream;
  std::uint64_t cache_bytes = std::uint64_t{16} << 30;  ///< bytes of cached objects kept at most
  /// How long a validated copy is served without asking the upstream again; 0: ask every time.
  std::chrono::seconds revalidate_after{0};
  /// How long after a copy's validation (when the HEAD that named its version was sent, for a
  /// revalidation or before the copy's fetch) a GET whose If-Match names that version alone is
  /// answered from the copy without asking again: every part of a parallel download but the first
  /// names the version its first part read, so one download of one version asks once. Such a GET
  /// may thus get that version instead of 412 when it was replaced upstream less than this long
  /// before. 0: it asks too.
  std::chrono::milliseconds if_match_trust{1000};
  /// Reads of cached objects are served when the upstream cannot be reached (else 503).
  bool stale_if_error = false;
  /// Bytes fetched per ranged step from the upstream.
  std::uint64_t chunk_bytes = std::uint64_t{16} << 20;
  /// Ranged steps of one fetch in flight at once (each written into the cache file as it arrives,
  /// through the client's buffer of 256 KiB; on a tmpfs with 2 MiB pages received in place
  /// through a mapping). The upstream client gets at least this many io_threads.
  std::uint32_t fetch_streams = 8;
  /// Objects that the cache cannot hold up to this size are served from memory instead.
  std::uint64_t passthrough_bytes = std::uint64_t{256} << 20;
  std::uint64_t max_object_bytes = 5ULL << 40;  ///< larger upstream objects are refused
  bool fsync = true;                            ///< fsync the cache (off: tests only)
  /// Where the store says why an answer failed that the client sees only as a 502 or 503 (the
  /// upstream's failures and garbage, a fetch that could not finish, an invalid config at open),
  /// one line without its newline, from any thread at once; null: said nowhere. `sluice serve`
  /// writes them to stderr. Not read from the config file.
  std::function<void(std::string_view message)> log;

  /// Valid when root is not empty, the upstream config is valid, cache_bytes and chunk_bytes
  /// are at least 1 MiB, fetch_streams is 1..64, if_match_trust at most 60 s and
  /// max_object_bytes is 1..2^62.
  [[nodiscard]] std::optional<config_error> validate() const;
};

/// The "gateway" object of a `sluice serve --config` document, over `base` (docs/gateway.md):
/// "upstream", "upstream_access_key_id", "upstream_secret_access_key", "upstream_region",
/// "upstream_ca_bundle", "upstream_timeout_s", "cache_bytes" (a number or a size such as
/// "2 TiB"), "revalidate_after_s", "if_match_trust_ms", "stale_if_error", "chunk_bytes",
/// "fetch_streams". nullopt
/// without an error when the document has no such object; nullopt with errc::invalid_config and
/// the field in `error` for malformed JSON, an unknown field or a value of the wrong type. The
/// result is not validated (the caller adds the root, then gateway_store::open validates).
[[nodiscard]] std::optional<gateway_store_config> parse_gateway_config(std::string_view json, gateway_store_config base,
                                                                       error_code& ec, config_error& error);

namespace detail {

/// The gateway's index of cached objects: a byte budget kept by least-recently-used eviction.
/// Names are "bucket/key" (bucket names hold no '/'). Not thread-safe: its owner locks.
class cache_index {
 public:
  using clock = std::chrono::steady_clock;
  struct entry {
    std::uint64_t size = 0;
    std::string etag;  ///< the upstream's ETag of the cached copy
    /// When the upstream last confirmed that ETag; nullopt: never (rebuilt at open).
    std::optional<clock::time_point> validated;
    /// The upstream's Last-Modified of that version; nullopt: unknown (written through, or
    /// rebuilt at open), and the copy's own time is served until a HEAD tells it.
    std::optional<std::chrono::system_clock::time_point> last_modified;
  };

  explicit cache_index(std::uint64_t budget) : budget_(budget) {}

  /// Adds or replaces `name` as the most recently used entry.
  void insert(const std::string& name, entry e);
  /// The entry, or null; does not change the order.
  [[nodiscard]] const entry* find(const std::string& name) const;
  /// Marks `name` most recently used and (when `validated`) renews its validation and the
  /// upstream's Last-Modified (when given); false when absent.
  bool touch(const std::string& name, std::optional<clock::time_point> validated = std::nullopt,
             std::optional<std::chrono::system_clock::time_point> last_modified = std::nullopt);
  /// Removes `name`; false when absent.
  bool erase(const std::string& name);
  /// Least recently used names to evict so that `incoming` more bytes fit the budget, never
  /// `except`; all of them (and the caller decides) when even an empty index could not hold it.
  [[nodiscard]] std::vector<std::string> victims(std::uint64_t incoming, std::string_view except = {}) const;
  /// The least recently used name other than `except`, or nullopt.
  [[nodiscard]] std::optional<std::string> oldest(std::string_view except = {}) const;
  /// Whether `incoming` more bytes fit without evicting anything.
  [[nodiscard]] bool fits(std::uint64_t incoming) const noexcept {
    return incoming <= budget_ && used_ + reserved_ <= budget_ - incoming;
  }
  /// Counts `bytes` of a copy being written against the budget until release (so that
  /// concurrent fetches do not each count on the same free space).
  void reserve(std::uint64_t bytes) noexcept { reserved_ += bytes; }
  void release(std::uint64_t bytes) noexcept { reserved_ -= std::min(bytes, reserved_); }
  [[nodiscard]] std::uint64_t used() const noexcept { return used_; }
  [[nodiscard]] std::uint64_t reserved() const noexcept { return reserved_; }
  [[nodiscard]] std::uint64_t budget() const noexcept { return budget_; }
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  /// Names from least to most recently used (tests, metrics).
  [[nodiscard]] std::vector<std::string> order() const { return {lru_.begin(), lru_.end()}; }

  /// "bucket/key".
  [[nodiscard]] static std::string name_of(const object_ref& object) { return object.bucket + "/" + object.key; }
  /// The inverse of name_of.
  [[nodiscard]] static object_ref object_of(std::string_view name);

 private:
  struct slot {
    entry value;
    std::list<std::string>::iterator position;
  };
  std::uint64_t budget_;
  std::uint64_t used_ = 0;
  std::uint64_t reserved_ = 0;
  std::list<std::string> lru_;  // front: least recently used
  std::map<std::string, slot, std::less<>> entries_;
};

/// The ranged steps of one fetch, in the order the fetch streams take them. Plain: steps of
/// `chunk`. Ramped (a fetch that readers wait on): `streams` steps of chunk/16 (at least 1 MiB),
/// then `streams` of twice that, doubling up to `chunk`. The streams start side by side, so the
/// object's first step arrives at one stream's pace; small first steps let the first bytes come
/// at once instead of one whole chunk later (a 1 GiB object: 89 steps instead of 64).
class fetch_plan {
 public:
  fetch_plan(std::uint64_t size, std::uint64_t chunk, std::size_t streams, bool ramp) noexcept;
  [[nodiscard]] std::uint64_t steps() const noexcept { return steps_; }
  /// Where step `step` (< steps()) begins, and how many bytes it holds.
  [[nodiscard]] std::uint64_t offset(std::uint64_t step) const noexcept;
  [[nodiscard]] std::uint64_t length(std::uint64_t step) const noexcept;
  /// The longest step (the buffer a stream needs when it cannot receive in place).
  [[nodiscard]] std::uint64_t longest() const noexcept { return chunk_; }

 private:
  std::uint64_t size_;
  std::uint64_t chunk_;
  std::uint64_t first_ = 0;       // the first ramp step's length; 0: no ramp
  std::uint64_t per_round_ = 1;   // steps of each ramp length
  std::uint64_t ramp_steps_ = 0;  // steps before the first one of `chunk`
  std::uint64_t ramp_bytes_ = 0;  // bytes of the ramp steps (even beyond the object's end)
  std::uint64_t steps_ = 0;
};

/// How much of a copy being fetched is written: readers of a streaming mapping ask here to be
/// told when the bytes they need are there (no thread of theirs waits). The fetch calls advance()
/// as it writes and finish() or fail() once.
class fill_progress {
 public:
  /// Called once with the outcome of a wait; it may run on the fetch's thread, so it must not block.
  using waiter = std::function<void(error_code)>;

  fill_progress() = default;
  fill_progress(const fill_progress&) = delete;
  fill_progress& operator=(const fill_progress&) = delete;
  /// Waiters the fetch never answered get operation_aborted.
  ~fill_progress();

  /// Whether bytes [0, end) are written.
  [[nodiscard]] bool ready(std::uint64_t end) const noexcept { return end <= ready_.load(std::memory_order_acquire); }
  /// Calls `done` once: with no error once bytes [0, end) are written; with the fetch's error when
  /// it failed first, errc::protocol_violation when it finished short of `end`. At once, on this
  /// thread, when that is known already; else on the thread of the advance(), finish() or fail()
  /// that decides it. Never under the lock.
  void async_wait_until(std::uint64_t end, waiter done);
  /// Bytes [0, ready) are written (never backwards; ignored once the fetch ended).
  void advance(std::uint64_t ready);
  /// The copy is whole at `size` bytes: waiters for more get errc::protocol_violation.
  void finish(std::uint64_t size);
  /// The fetch failed with `ec` (errc::protocol_violation when empty): waiters for bytes not
  /// written get it; the bytes written before stay readable.
  void fail(error_code ec);

 private:
  // Ends the fill: bytes [0, size) written (or as many as were), `error` the answer for more;
  // answers every waiter.
  void settle(std::uint64_t size, error_code error);

  std::mutex mutex_;
  std::atomic<std::uint64_t> ready_{0};
  bool ended_ = false;                            // finish() or fail() was called
  error_code error_;                              // once ended_: the answer past ready_
  std::multimap<std::uint64_t, waiter> waiters_;  // by the end they wait for
};

/// A read-only mapping of a cache file while it is written (the fs_store writer's temporary
/// file, extended to its final size first): its own descriptor, so it outlives the writer, the
/// rename at publish and any eviction.
class growing_file {
 public:
  /// Maps `size` bytes from `data_offset` of a duplicate of `fd`. Null with `ec` on error.
  static std::shared_ptr<growing_file> open(int fd, std::uint64_t data_offset, std::uint64_t size, error_code& ec);
  growing_file(const growing_file&) = delete;
  growing_file& operator=(const growing_file&) = delete;
  ~growing_file();
  [[nodiscard]] sluice::region region() const noexcept { return {data_, size_, memory_kind::host_pageable, -1}; }
  [[nodiscard]] int native_handle() const noexcept { return fd_; }
  [[nodiscard]] std::uint64_t data_offset() const noexcept { return data_offset_; }

 private:
  growing_file() = default;
  int fd_ = -1;
  void* base_ = nullptr;
  std::size_t length_ = 0;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::uint64_t data_offset_ = 0;
};

}  // namespace detail

/// Counters since the store opened (see the top of this header for what each path does).
struct gateway_statistics {
  std::uint64_t hits = 0;            ///< reads served from a cached copy
  std::uint64_t misses = 0;          ///< reads that fetched from the upstream
  std::uint64_t revalidations = 0;   ///< upstream HEADs that confirmed a cached copy
  std::uint64_t trusted = 0;         ///< If-Match GETs answered within if_match_trust, not asked
  std::uint64_t stale_served = 0;    ///< cached copies served while the upstream failed
  std::uint64_t upstream_bytes = 0;  ///< object bytes fetched from the upstream
  std::uint64_t evictions = 0;       ///< cached copies evicted for the budget or a full disk
  std::uint64_t passthroughs = 0;    ///< reads served from memory, not cached
  std::uint64_t range_fetches = 0;   ///< ranged GETs of uncached objects that fetched their range only
  std::uint64_t cached_bytes = 0;    ///< bytes in the cache index now
  std::uint64_t cached_objects = 0;  ///< copies in the cache index now
};

/// A read-through, write-through cache of an upstream S3 service (see the top of this header).
/// The store must outlive its writers and mappings. Only one store may have a root open.
class gateway_store {
 public:
  /// Spools one PUT payload; commit sends it to the upstream, then caches it.
  class writer {
   public:
    writer() = default;
    writer(writer&& other) noexcept;
    writer& operator=(writer&& other) noexcept;
    writer(const writer&) = delete;
    writer& operator=(const writer&) = delete;
    ~writer();

    /// Appends `data` to the spool file. errc::capacity_exceeded past max_object_bytes, an I/O
    /// error as its errno; on error nothing of `data` counts.
    void write(std::span<const std::byte> data, error_code& ec);
    /// Makes the upstream's publish conditional: sent with the upstream PUT (If-None-Match: *,
    /// If-Match), which answers precondition_failed when it does not hold, atomically with its
    /// own write.
    void require(const write_precondition& precondition) { precondition_ = precondition; }
    /// Sends the spooled bytes to the upstream (its ETag, not the one in `attributes`, is the
    /// object's), then caches them. Upstream failures as described at the top; afterwards the
    /// writer is empty.
    object_info commit(const object_attributes& attributes, error_code& ec);

   private:
    friend class gateway_store;
    void reset() noexcept;
    gateway_store* store_ = nullptr;
    int fd_ = -1;
    std::filesystem::path path_;
    object_ref object_;
    std::uint64_t written_ = 0;
    write_precondition precondition_;
  };

  /// One object version, cached (an fs_store mapping: same file, same registration caches) or
  /// passed through (memory of the mapping's own). Move-only.
  class mapping {
   public:
    mapping() = default;
    [[nodiscard]] sluice::const_region region() const noexcept {
      if (memory_) return {memory_.get(), size_, memory_kind::host_pageable, -1};
      return growing_ ? growing_->region() : cached_.region();
    }
    /// The version's info (the upstream's ETag). Pre: the mapping is not empty.
    [[nodiscard]] const object_info& info() const noexcept { return info_; }
    /// The cached file's descriptor; -1 when passed through or empty.
    [[nodiscard]] int native_handle() const noexcept {
      if (memory_) return -1;
      return growing_ ? growing_->native_handle() : cached_.native_handle();
    }
    /// Where the object's first byte lies in native_handle()'s file.
    [[nodiscard]] std::uint64_t data_offset() const noexcept {
      if (memory_) return 0;
      return growing_ ? growing_->data_offset() : cached_.data_offset();
    }
    /// Where region() starts in the object: 0, but for a part fetched by map_range.
    [[nodiscard]] std::uint64_t base() const noexcept { return base_; }
    /// Whether bytes [0, end) of region() are there: always, but for a copy still being fetched
    /// (map_streaming).
    [[nodiscard]] bool ready(std::uint64_t end) const noexcept { return !fill_ || fill_->ready(end); }
    /// Calls `done` once: with no error when bytes [0, end) of region() are there, else with the
    /// fetch's error (detail::fill_progress::async_wait_until). At once when they are; else on an
    /// upstream client thread, so `done` must not block.
    void async_wait_until(std::uint64_t end, std::function<void(error_code)> done) const {
      if (fill_) {
        fill_->async_wait_until(end, std::move(done));
      } else {
        done({});
      }
    }

   private:
    friend class gateway_store;
    fs_store::mapping cached_;
    std::shared_ptr<detail::growing_file> growing_;  // a copy being fetched (map_streaming)
    std::shared_ptr<detail::fill_progress> fill_;    // how much of growing_ is written
    std::unique_ptr<std::byte[]> memory_;
    std::size_t size_ = 0;
    std::uint64_t base_ = 0;
    object_info info_;
    bool trusted_ = false;  // lent by map_unconfirmed within if_match_trust: confirm() asks nobody
  };

  /// Reads may wait for the upstream: the server calls this store off its network threads.
  static constexpr bool remote = true;

  using writer_type = writer;
  using part_writer_type = fs_store::writer;
  using mapping_type = mapping;

  /// Opens the cache (creating the root when missing), empties the spool, indexes the cached
  /// copies (unvalidated) and starts the upstream client. Null with `ec` on error
  /// (errc::invalid_config for an invalid config, with the reason to config.log; EWOULDBLOCK when another store
  /// has the root open).
  static std::unique_ptr<gateway_store> open(gateway_store_config config, error_code& ec);
  gateway_store(const gateway_store&) = delete;
  gateway_store& operator=(const gateway_store&) = delete;
  ~gateway_store();

  [[nodiscard]] const gateway_store_config& config() const noexcept { return config_; }
  [[nodiscard]] gateway_statistics statistics() const;

  /// Creates the bucket on the upstream (and in the cache).
  void create_bucket(std::string_view name, error_code& ec);
  /// Removes the bucket on the upstream, then its cached copies.
  void remove_bucket(std::string_view name, error_code& ec);
  /// The upstream's buckets.
  std::vector<bucket_info> list_buckets(error_code& ec) const;

  /// The version the upstream holds (from the cache when still valid). Errors: no_such_bucket,
  /// no_such_object, s3 errors of the upstream, service_unavailable.
  object_info head(const object_ref& object, error_code& ec);
  /// Copies bytes of the current version from `offset` (fetching it into the cache first).
  std::size_t read(const object_ref& object, std::uint64_t offset, std::span<std::byte> out, error_code& ec);
  /// The current version, cached first when it was not (see the top of this header).
  mapping map(const object_ref& object, error_code& ec);
  /// As map(), but a miss of an object larger than chunk_bytes answers as soon as the fetch has
  /// started: the mapping's ready()/async_wait_until() say which bytes are there. The server's GET.
  mapping map_streaming(const object_ref& object, error_code& ec);
  /// map_streaming as an asynchronous operation (async_mapping_store): `done` gets its error and
  /// mapping once, on any thread (a thread of `run`, or an upstream client thread), so it must not
  /// block. Its calls to the upstream run as jobs given to `run` (the server's blocking pool);
  /// while another request's fetch of the object is under way (or the first bytes of its own)
  /// no thread waits: the operation is queued on that fetch and goes on when it publishes or fails.
  void async_map_streaming(const object_ref& object, blocking_runner run,
                           std::function<void(error_code, mapping)> done);
  /// describe() as an asynchronous operation, as async_map_streaming (the server's HEAD).
  void async_describe(const object_ref& object, blocking_runner run, std::function<void(error_code, mapping)> done);
  /// For a transfer that runs while the upstream is asked (the server's GET into an RDMA or grant
  /// token's memory, or with If-Match, the header given as `if_match`, empty when none): the copy
  /// a streaming fetch is writing (as map_streaming would join it), else the cached copy the index
  /// names, without asking the upstream. nullopt when there is neither, another fetch of it is
  /// under way, or it is within revalidate_after (map() asks nobody then either). The caller must
  /// confirm() it before it answers. When `if_match` names the copy's ETag alone (quoted, as
  /// clients send it, or not) and an upstream request that named that version was sent less than
  /// if_match_trust ago, confirm() will say yes without asking.
  std::optional<mapping> map_unconfirmed(const object_ref& object, std::string_view if_match);
  /// Whether the upstream's HEAD still names `m`'s version (the same ETag and size): then its
  /// validation is renewed and the read counts as a hit. True without asking for a copy that
  /// map_unconfirmed lent within if_match_trust. With stale_if_error, also when the
  /// upstream cannot be reached and `m` is the cached copy (served stale, as map() would). False
  /// on any other answer: the caller then reads through map(), which decides.
  bool confirm(const object_ref& object, const mapping& m);
  /// For a GET with `range_header` (Range: bytes=...), streaming as map_streaming: the cached copy
  /// when it is valid, or the copy another reader's fetch is writing; for an
  /// uncached object larger than chunk_bytes of which at most a quarter (and at most
  /// passthrough_bytes) is asked, from any byte but the first, only that range, fetched into
  /// memory and not cached (base() is its offset); else as map(). A sparse reader (a file
  /// format's footer) fetches what it reads; a parallel download's first part caches the object.
  mapping map_range(const object_ref& object, std::string_view range_header, error_code& ec);
  /// As head(), as a mapping: the cached copy when it is valid, else one with the info only
  /// (an empty region); nothing is fetched. The server answers a HEAD with it.
  mapping describe(const object_ref& object, error_code& ec);
  /// Starts a write-through PUT. Errors: no_such_bucket (the upstream is asked when the cache
  /// does not have the bucket yet), invalid_name, upstream failures, I/O errors of the spool.
  writer begin_put(const object_ref& object, error_code& ec);
  /// Deletes on the upstream, then the cached copy. Deleting a missing key succeeds as in S3.
  void remove(const object_ref& object, error_code& ec);
  /// One page of the upstream's listing.
  list_result list(const list_request& request, error_code& ec) const;

  /// Multipart uploads are received into the cache's upload area (parts stay local until
  /// completion) and sent to the upstream as one object when completed.
  std::string create_upload(const object_ref& object, const object_attributes& attributes, error_code& ec);
  part_writer_type begin_part(const object_ref& object, std::string_view upload_id, std::uint32_t part_number,
                              error_code& ec);
  std::vector<part_info> list_parts(const object_ref& object, std::string_view upload_id, error_code& ec) const;
  std::vector<upload_info> list_uploads(std::string_view bucket, std::string_view prefix, error_code& ec) const;
  /// Concatenates the parts locally, sends the object to the upstream (with `precondition`, which
  /// the upstream checks atomically with its publish), then keeps it cached when the upstream's
  /// ETag matches `attributes.etag`.
  object_info complete_upload(const object_ref& object, std::string_view upload_id, std::span<const part_info> chosen,
                              const object_attributes& attributes, error_code& ec,
                              const write_precondition& precondition = {});
  void abort_upload(const object_ref& object, std::string_view upload_id, error_code& ec);

 private:
  struct unopened {};
  gateway_store(unopened, gateway_store_config config);
  // Whether `ec` from the upstream means it could not be reached (connection, timeout, 5xx).
  static bool upstream_failed(const error_code& ec) noexcept;
  // Upstream errors as the store reports them (no_such_key → no_such_object, failures → 503).
  static error_code from_upstream(const error_code& ec) noexcept;
  // Says through config_.log why the upstream failed, when that made the answer 503 or 502.
  void log_upstream_failure(const char* what, const object_ref& object, const error_code& upstream,
                            const error_code& answered) const;
  // Whether the upstream has `bucket` (a one-key listing): ec clear, else its answer as the store
  // reports it (no_such_bucket, service_unavailable, ...).
  void probe_bucket(std::string_view bucket, error_code& ec) const;
  // Makes sure the cache has `bucket`, which the upstream said it has.
  void ensure_cache_bucket(std::string_view bucket, error_code& ec);
  // Drops the cached copy of `object` (index and file).
  void drop(const object_ref& object);
  // Evicts least recently used copies until `incoming` bytes fit; false when they cannot.
  bool make_room(std::uint64_t incoming, const std::string& except);
  // Budget counted for a copy while it is written (cache_index::reserve): given back when it goes
  // out of scope, unless claim() moved it into the index entry first.
  class reserved_room {
   public:
    reserved_room() = default;
    reserved_room(const reserved_room&) = delete;
    reserved_room& operator=(const reserved_room&) = delete;
    ~reserved_room();
    // With mutex_ held: the copy is indexed now, which counts its bytes instead.
    void claim() noexcept;

   private:
    friend class gateway_store;
    gateway_store* store_ = nullptr;
    std::uint64_t bytes_ = 0;
  };
  // make_room, then reserves `incoming` in `room`; false when it cannot fit. Locks mutex_.
  bool reserve_room(std::uint64_t incoming, const std::string& except, reserved_room& room);
  // The cached copy when valid (validated within revalidate_after, or confirmed by a HEAD now);
  // else fetches the current version. `need_bytes`: head() asks for info only.
  // `stream`: a miss may answer a mapping still being fetched (fetch_streaming).
  mapping resolve(const object_ref& object, bool need_bytes, error_code& ec, bool stream = false);
  // A resolve's answer, and where it stands between its steps.
  struct resolved {
    mapping mapped;
    error_code ec;
  };
  struct resolve_state {
    object_ref object;
    std::string name;
    bool need_bytes = true;
    bool stream = false;
    int attempt = 0;  // fetches begun (again: a version replaced, a misstated size)
    // The size the upstream's GETs gave a version whose HEAD said another: theirs wins.
    std::optional<std::pair<std::string, std::uint64_t>> sized;
  };
  // Called once when a step could not answer at once: with the answer, or nullopt to take the next
  // step (another request's fetch of the name ended); on any thread, never under mutex_.
  using resolve_next = std::function<void(std::optional<resolved>)>;
  // resolve up to its answer, or up to a wait: then nullopt, after giving `later` to what it waits
  // for (the fetch of the name under way, or the first bytes of its own streaming fetch).
  std::optional<resolved> resolve_step(const std::shared_ptr<resolve_state>& state, const resolve_next& later);
  // resolve as an asynchronous operation: its steps are jobs given to `run`, `done` gets its answer.
  void async_resolve(const object_ref& object, bool need_bytes, bool stream, blocking_runner run,
                     std::function<void(error_code, mapping)> done);
  // A copy being fetched: the file being written and how much of it is there.
  struct streaming_copy {
    std::shared_ptr<detail::growing_file> file;
    std::shared_ptr<detail::fill_progress> fill;
    object_info info;
    // When the HEAD that named this version was sent (what if_match_trust counts from).
    detail::cache_index::clock::time_point confirmed{};
  };
  // The cached copy if its file is still the version with `etag`, with `last_modified` (the
  // upstream's, when known) in its info.
  std::optional<mapping> cached_copy(const object_ref& object, const std::string& etag,
                                     const std::optional<std::chrono::system_clock::time_point>& last_modified) const;
  // The copy another reader's fetch of `object` is writing, when the upstream (asked now) still
  // names its version; else nullopt.
  std::optional<mapping> join_stream(const object_ref& object, const std::string& name);
  // At open: lowers the budget to what the cache's file system holds, and says so.
  void fit_budget_to_disk();
  // A reader's mapping of a copy being fetched.
  static mapping reader_of(const streaming_copy& copy);
  // One fetch of a version into the cache: the state its steps share (src/s3/gateway_fetch.cpp).
  class fetch_operation;
  // Sets up the fetch of `info`'s version into the cache: the budget reserved and a staged cache
  // file (the operation says `cacheable() == false` when the cache cannot take it: pass it
  // through). With `fill`, the bytes written are reported to it, and `started` is called (on a
  // client thread) with the copy being written once its first step matched the HEAD. Errors: an
  // I/O error of the cache.
  // `confirmed`: when the HEAD that named `info`'s version was sent (the copy's validation).
  std::shared_ptr<fetch_operation> prepare_fetch(const object_ref& object, const object_info& info,
                                                 detail::cache_index::clock::time_point confirmed,
                                                 std::shared_ptr<detail::fill_progress> fill,
                                                 std::function<void(const streaming_copy&)> started, error_code& ec);
  // The fetch's steps, posted on the upstream client's executor: fetch_streams chains of
  // async_get_object, each taking the next ranged step when its last one ended (the step's
  // bytes written into the cache file as they arrive, or received in place; the MD5 of the
  // prefix advanced). Calls `done` once, on a client thread, with the first error, when every
  // chain has ended.
  static void start_fetch(const std::shared_ptr<fetch_operation>& op, std::function<void(error_code)> done);
  // After start_fetch's `done`: checks the MD5 of the whole copy (a mismatch fails with
  // s3::errc::bad_gateway: nothing is published, a streamed copy ends short), then, without an
  // error, publishes and indexes the copy and answers its mapping.
  mapping finish_fetch(fetch_operation& op, error_code& ec);
  // Fetches `info`'s version whole into memory (the cache cannot take it), at most
  // passthrough_bytes (else s3::errc::slow_down); its MD5 ETag checked as a fetch's.
  mapping pass_through(fetch_operation& op, error_code& ec);
  // Fetches `info`'s version into the cache (or memory), waiting for it; errors as map.
  // A single-part MD5 ETag is checked against the bytes (hashed while they arrive; a streamed
  // copy's last byte is held back from `fill` until they match): a mismatch publishes nothing and
  // fails with s3::errc::bad_gateway. When the upstream's GETs say another size than `info`'s
  // (the HEAD's), `other_size` (when given) gets theirs and the fetch fails: fetch again with it.
  mapping fetch(const object_ref& object, const object_info& info, detail::cache_index::clock::time_point confirmed,
                error_code& ec, std::optional<std::uint64_t>* other_size = nullptr);
  // Starts the fetch and calls `answered` once with the mapping of the copy being written as soon
  // as its first step arrived (or the fetch's result, when it ended first; then also the GETs'
  // size when they said another than `info`'s): on an upstream client thread, or on this one
  // before it returns. The rest of the fetch goes on on the client's executor. Ends the fetch of
  // `object` (fetching_) when done. Pre: `object` is in fetching_.
  using streaming_answer = std::function<void(mapping, error_code, std::optional<std::uint64_t> other_size)>;
  void fetch_streaming(const object_ref& object, const object_info& info,
                       detail::cache_index::clock::time_point confirmed, streaming_answer answered);
  // The ETag that an If-Match header names alone ("E" or E), else empty (none, `*`, a list).
  static std::string_view pinned_etag(std::string_view if_match) noexcept;
  // Says `message` through config_.log, when set.
  void log(const std::string& message) const;
  // Ends the fetch of `name`: readers queued on it (waiters_) look again.
  void fetch_done(const std::string& name);
  // Evicts the least recently used copy other than `except`; false when there is none.
  bool evict_oldest(const std::string& except);
  // Whether the cache's file system has room for every fetch under way (index_.reserved(), this
  // one's included), after evicting least recently used copies other than `name` while it has not.
  bool disk_has_room(const std::string& name);
  // Runs `attempt` (which writes or backs cache bytes); on a full disk evicts the least recently
  // used copy other than `name` and tries again, until none is left (then ENOSPC).
  void evicting(const std::string& name, error_code& ec, const std::function<void(error_code&)>& attempt);
  // Reads [offset, offset + out.size()) of `info`'s version (its ETag, its size) into `out`
  // with one async_get_object, waiting for it. Every answer is checked first
  // (detail::check_upstream_get): another version, range or size fails it with
  // s3::errc::bad_gateway, and `answer` (when given) says what the last answer said.
  void fetch_range(const object_ref& object, const object_info& info, std::uint64_t offset, std::span<std::byte> out,
                   error_code& ec, detail::upstream_get_answer* answer = nullptr);
  // The options of a GET of [offset, offset + length) of `info`'s version: If-Match its ETag, and
  // each answer checked (detail::check_upstream_get) into `*seen` before its body is read.
  [[nodiscard]] get_options upstream_get(const object_info& info, std::uint64_t offset, std::uint64_t length,
                                         std::shared_ptr<detail::upstream_get_answer> seen) const;
  // Checks an upstream answer's info (size bound, ETag characters).
  [[nodiscard]] bool sane(const object_info& info) const noexcept;
  // Copies the file at `path` (size bytes) into the cache as `object` with `attributes`.
  void cache_file(const object_ref& object, int fd, std::uint64_t size, const object_attributes& attributes);
  object_info commit_put(writer& w, const object_attributes& attributes, error_code& ec);

  gateway_store_config config_;
  std::unique_ptr<fs_store> cache_;
  std::unique_ptr<client> upstream_;
  std::filesystem::path spool_;
  mutable std::mutex mutex_;  // guards index_, fetching_, stats_
  detail::cache_index index_;
  std::set<std::string, std::less<>> fetching_;  // names being fetched
  // Readers of a name being fetched, called (outside the lock) once its fetch ended: no thread
  // waits for it (a synchronous reader's own waits on its future).
  std::map<std::string, std::vector<std::function<void()>>, std::less<>> waiters_;
  // The copies being fetched by fetch_streaming, by name: readers of the same version join them.
  std::map<std::string, streaming_copy, std::less<>> streams_;
  std::size_t streaming_ = 0;                  // fetch_streaming's fetches under way; the destructor waits for them
  std::optional<std::promise<void>> drained_;  // set by the destructor: told when streaming_ is 0
  mutable gateway_statistics stats_;
  std::uint64_t spool_counter_ = 0;
  // Fetches receive their steps in place through a mapping of the cache file (a tmpfs with 2 MiB
  // pages) instead of writing them as they arrive; set at open.
  bool receive_in_place_ = false;
};

static_assert(object_store<gateway_store>);
static_assert(mappable_store<gateway_store>);
static_assert(multipart_store<gateway_store>);
static_assert(servable_store<gateway_store>);

}  // namespace sluice::s3
