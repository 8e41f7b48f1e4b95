// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/gateway_store.hpp: the configuration, opening the store,
// the upstream's errors, and the reads (head, map, map_streaming, map_range, confirm) that decide
// between the cached copy and a fetch (src/s3/gateway_fetch.cpp); the cache's index and budget
// are in src/s3/gateway_cache.cpp, the writes in src/s3/gateway_write.cpp. A translation unit of
// its own.
#include "gateway_internal.hpp"
#include "server/support.hpp"  // parse_range: a ranged GET's Range header, as the server reads it

#include <sluice/names.hpp>
#include <sluice/s3/error.hpp>
#include <sluice/s3/gateway_store.hpp>

#include "common/json_fields.hpp"

#include <simdjson.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace sluice::s3 {

// -- config -------------------------------------------------------------------------------------

std::optional<config_error> gateway_store_config::validate() const {
  if (root.empty()) return config_error{"root", "must not be empty"};
  if (auto e = upstream.validate()) return config_error{"upstream." + e->field, e->reason};
  if (cache_bytes < mib) return config_error{"cache_bytes", "must be at least 1 MiB"};
  if (chunk_bytes < mib || chunk_bytes > (std::uint64_t{1} << 32)) {
    return config_error{"chunk_bytes", "must be 1 MiB..4 GiB"};
  }
  if (fetch_streams == 0 || fetch_streams > 64) return config_error{"fetch_streams", "must be 1..64"};
  if (if_match_trust.count() < 0 || if_match_trust > std::chrono::seconds(60)) {
    return config_error{"if_match_trust", "must be 0..60 s"};
  }
  if (max_object_bytes == 0 || max_object_bytes > (std::uint64_t{1} << 62)) {
    return config_error{"max_object_bytes", "must be 1..2^62"};
  }
  return std::nullopt;
}

std::optional<gateway_store_config> parse_gateway_config(std::string_view json, gateway_store_config base,
                                                         error_code& ec, config_error& error) {
  ec = {};
  simdjson::dom::parser parser;
  sluice::detail::json::element root;
  if (auto e = sluice::detail::json::parse(parser, json, root)) {
    error = std::move(*e);
    ec = sluice::errc::invalid_config;
    return std::nullopt;
  }
  if (!root.is_object()) return std::nullopt;  // parse_server_config says what is wrong with it
  // Beside the server's settings, or among them when those are under "server".
  simdjson::dom::element section;
  if (root["gateway"].get(section) != simdjson::SUCCESS &&
      root["server"]["gateway"].get(section) != simdjson::SUCCESS) {
    return std::nullopt;
  }
  using namespace sluice::detail::json;
  gateway_store_config config = std::move(base);
  auto if_match_trust_ms = static_cast<std::uint32_t>(config.if_match_trust.count());
  const field_table fields{
      {"upstream", string_field(config.upstream.endpoint)},
      {"upstream_access_key_id", string_field(config.upstream.creds.access_key_id)},
      {"upstream_secret_access_key", string_field(config.upstream.creds.secret_access_key)},
      {"upstream_region", string_field(config.upstream.region)},
      {"upstream_ca_bundle", text_field([&](std::string_view path) -> std::optional<std::string> {
         config.upstream.ca_bundle = std::string(path);
         return std::nullopt;
       })},
      {"upstream_timeout_s", seconds_field(config.upstream.request_timeout, 1)},
      {"cache_bytes", size_field(config.cache_bytes)},
      {"chunk_bytes", size_field(config.chunk_bytes)},
      {"revalidate_after_s", seconds_field(config.revalidate_after)},
      {"if_match_trust_ms", count_field(if_match_trust_ms, 0, 60000)},
      {"stale_if_error", flag_field(config.stale_if_error)},
      {"fetch_streams", count_field(config.fetch_streams, 1, 64)},
  };
  if (auto e = read_fields(section, "gateway.", fields)) {
    error = std::move(*e);
    ec = sluice::errc::invalid_config;
    return std::nullopt;
  }
  config.if_match_trust = std::chrono::milliseconds(if_match_trust_ms);
  return config;
}

// -- the store ----------------------------------------------------------------------------------

gateway_store::gateway_store(unopened, gateway_store_config config)
    : config_(std::move(config)), index_(config_.cache_bytes) {}

gateway_store::~gateway_store() {
  // A streaming fetch, still running on the upstream client's executor, uses the cache and the
  // client: it ends first (it is bounded by the upstream timeout), and says so through drained_.
  std::future<void> drained;
  {
    const std::lock_guard lock(mutex_);
    if (streaming_ == 0) return;
    drained = drained_.emplace().get_future();
  }
  drained.wait();
  const std::lock_guard settled(mutex_);  // the fetch's end has let go of the lock
}

std::unique_ptr<gateway_store> gateway_store::open(gateway_store_config config, error_code& ec) {
  ec = {};
  if (auto error = config.validate()) {
    if (config.log) config.log("gateway_store: " + error->message());
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
  store->receive_in_place_ = gateway_impl::huge_page_cache(root / "cache");
  store->fit_budget_to_disk();
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
    store->log(std::string("gateway_store: upstream: ") + e.what());
    ec = sluice::errc::invalid_config;
    return nullptr;
  }
  return store;
}

void gateway_store::fit_budget_to_disk() {
  // A budget the cache's file system cannot hold (a tmpfs smaller than cache_bytes) would make
  // every large miss find the disk full and pass through, uncached: the budget is what the file
  // system holds, less 5 % (at least 4 MiB) for the copies' headers and its own blocks. Other
  // files on it still count when a fetch starts (disk_has_room).
  std::error_code fs_error;
  const std::filesystem::space_info space = std::filesystem::space(config_.root / "cache", fs_error);
  if (fs_error || space.capacity == 0) return;
  const std::uint64_t slack = std::max<std::uint64_t>(std::uint64_t{4} << 20, space.capacity / 20);
  const std::uint64_t holds = space.capacity > slack ? space.capacity - slack : 0;
  if (config_.cache_bytes <= holds) return;
  log("gateway_store: cache_bytes " + std::to_string(config_.cache_bytes) + " is more than " +
      (config_.root / "cache").string() + "'s file system holds (" + std::to_string(space.capacity) +
      " bytes): the cache's budget is " + std::to_string(holds) + " bytes");
  config_.cache_bytes = holds;
  index_ = detail::cache_index(holds);  // nothing is indexed yet
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
  log("gateway_store: " + std::string(what) + " " + object.bucket + "/" + object.key + ": upstream " +
      config_.upstream.endpoint + (answered == s3::errc::bad_gateway ? " answered garbage: " : " failed: ") +
      upstream.message());
}

void gateway_store::log(const std::string& message) const {
  if (config_.log) config_.log(message);
}

bool gateway_store::sane(const object_info& info) const noexcept {
  return info.size <= config_.max_object_bytes && gateway_impl::is_sane_etag(info.attributes.etag);
}

std::string_view gateway_store::pinned_etag(std::string_view if_match) noexcept {
  if (if_match.size() >= 2 && if_match.front() == '"' && if_match.back() == '"') {
    if_match = if_match.substr(1, if_match.size() - 2);
  }
  // `*` and lists name more than one version; a sane ETag has no quotes, commas or spaces.
  if (if_match == "*" || !gateway_impl::is_sane_etag(if_match) || if_match.find(',') != std::string_view::npos) {
    return {};
  }
  return if_match;
}

std::optional<gateway_store::mapping> gateway_store::map_unconfirmed(const object_ref& object,
                                                                     std::string_view if_match) {
  if (!is_valid_bucket_name(object.bucket) || !is_valid_object_key(object.key)) return std::nullopt;
  const std::string name = detail::cache_index::name_of(object);
  using clock = detail::cache_index::clock;
  const std::string_view pinned = pinned_etag(if_match);
  // Whether an upstream request that named `etag` was sent less than if_match_trust ago, and
  // this GET names that version alone.
  const auto trusted = [&, now = clock::now()](const std::string& etag, std::optional<clock::time_point> confirmed) {
    return config_.if_match_trust.count() > 0 && !pinned.empty() && pinned == etag && confirmed &&
           now - *confirmed < config_.if_match_trust;
  };
  std::string etag;
  std::optional<std::chrono::system_clock::time_point> last_modified;
  bool trust = false;
  {
    std::lock_guard lock(mutex_);
    // A fetch under way (the rest of a parallel download of a miss): its version, confirmed as a
    // cached copy's is, and read while it arrives.
    if (const auto s = streams_.find(name); s != streams_.end()) {
      mapping m = reader_of(s->second);
      m.trusted_ = trusted(s->second.info.attributes.etag, s->second.confirmed);
      return m;
    }
    const auto* e = index_.find(name);
    if (e == nullptr || fetching_.contains(name)) return std::nullopt;
    if (config_.revalidate_after.count() > 0 && e->validated &&
        clock::now() - *e->validated < config_.revalidate_after) {
      return std::nullopt;  // trusted: map() asks nobody either
    }
    etag = e->etag;
    last_modified = e->last_modified;
    trust = trusted(e->etag, e->validated);
  }
  std::optional<mapping> m = cached_copy(object, etag, last_modified);
  if (m) m->trusted_ = trust;
  return m;
}

bool gateway_store::confirm(const object_ref& object, const mapping& m) {
  const std::string name = detail::cache_index::name_of(object);
  if (m.trusted_) {
    // Named by the GET's If-Match, and confirmed by the upstream less than if_match_trust ago.
    std::lock_guard lock(mutex_);
    index_.touch(name);
    ++stats_.trusted;
    ++stats_.hits;
    return true;
  }
  error_code ec;
  const auto asked = detail::cache_index::clock::now();  // the answer is no older than this
  const object_info current = upstream_->head_object(object.bucket, object.key, ec);
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
    index_.touch(name, asked, gateway_impl::known_time(current.last_modified));
  }
  ++stats_.revalidations;
  ++stats_.hits;
  return true;
}

gateway_store::mapping gateway_store::resolve(const object_ref& object, bool need_bytes, error_code& ec, bool stream) {
  auto state = std::make_shared<resolve_state>(
      resolve_state{object, detail::cache_index::name_of(object), need_bytes, stream, 0, std::nullopt});
  for (;;) {
    // This thread waits for what the step waits for (a caller of the blocking interface).
    auto next = std::make_shared<std::promise<std::optional<resolved>>>();
    std::future<std::optional<resolved>> woken = next->get_future();
    std::optional<resolved> answer =
        resolve_step(state, [next](std::optional<resolved> later) { next->set_value(std::move(later)); });
    if (!answer) answer = woken.get();
    if (answer) {
      ec = answer->ec;
      return std::move(answer->mapped);
    }
  }
}

void gateway_store::async_map_streaming(const object_ref& object, blocking_runner run,
                                        std::function<void(error_code, mapping)> done) {
  async_resolve(object, true, true, std::move(run), std::move(done));
}

void gateway_store::async_describe(const object_ref& object, blocking_runner run,
                                   std::function<void(error_code, mapping)> done) {
  async_resolve(object, false, false, std::move(run), std::move(done));
}

void gateway_store::async_resolve(const object_ref& object, bool need_bytes, bool stream, blocking_runner run,
                                  std::function<void(error_code, mapping)> done) {
  // The operation's state, shared by the jobs it runs and the fetch it waits for.
  struct map_operation : std::enable_shared_from_this<map_operation> {
    gateway_store* store = nullptr;
    std::shared_ptr<resolve_state> state;
    blocking_runner run;
    std::function<void(error_code, mapping)> done;
    void step() {
      std::optional<resolved> answer;
      try {
        answer = store->resolve_step(state, [self = shared_from_this()](std::optional<resolved> later) {
          if (later) return self->complete(std::move(*later));
          self->run([self] { self->step(); });  // the next step may ask the upstream: a job of run's
        });
      } catch (const std::exception& e) {  // bad_alloc
        store->log("gateway_store: " + std::string(state->need_bytes ? "GET " : "HEAD ") + state->name + ": " +
                   e.what());
        answer = resolved{{}, s3::errc::service_unavailable};
      }
      if (answer) complete(std::move(*answer));
    }
    void complete(resolved answer) { done(answer.ec, std::move(answer.mapped)); }
  };
  auto op = std::make_shared<map_operation>();
  op->store = this;
  op->state = std::make_shared<resolve_state>(
      resolve_state{object, detail::cache_index::name_of(object), need_bytes, stream, 0, std::nullopt});
  op->run = std::move(run);
  op->done = std::move(done);
  op->run([op] { op->step(); });
}

std::optional<gateway_store::mapping> gateway_store::join_stream(const object_ref& object, const std::string& name) {
  std::optional<streaming_copy> joining;
  {
    std::lock_guard lock(mutex_);
    if (const auto s = streams_.find(name); s != streams_.end()) joining = s->second;
  }
  if (!joining) return std::nullopt;
  error_code head_error;
  const object_info current = upstream_->head_object(object.bucket, object.key, head_error);
  if (head_error || current.attributes.etag != joining->info.attributes.etag || current.size != joining->info.size) {
    return std::nullopt;
  }
  std::lock_guard lock(mutex_);
  ++stats_.hits;
  return reader_of(*joining);
}

std::optional<gateway_store::resolved> gateway_store::resolve_step(const std::shared_ptr<resolve_state>& state,
                                                                   const resolve_next& later) {
  const object_ref& object = state->object;
  const std::string& name = state->name;
  const bool stream = state->stream;
  const auto fail = [](error_code e) { return resolved{{}, e}; };
  if (!is_valid_bucket_name(object.bucket)) return fail(sluice::errc::no_such_bucket);
  if (!is_valid_object_key(object.key)) return fail(sluice::errc::no_such_object);
  using clock = detail::cache_index::clock;
  // The upstream's Last-Modified of the indexed copy, when known.
  std::optional<std::chrono::system_clock::time_point> held_modified;
  // The cached copy if the file is still the version the index names, with the upstream's
  // Last-Modified when known (else the copy's own).
  const auto from_cache = [&](const std::string& etag) { return cached_copy(object, etag, held_modified); };
  const auto answer = [](mapping m) { return resolved{std::move(m), {}}; };
  for (;; ++state->attempt) {
    // Another reader's fetch is under way: read from it while it arrives, when the upstream
    // still names its version (else wait for it to end, below, and look again).
    if (stream) {
      if (auto joined = join_stream(object, name)) return answer(std::move(*joined));
    }
    std::optional<std::string> trusted;  // the ETag of a copy still within revalidate_after
    std::optional<std::string> held;     // the ETag of any indexed copy
    {
      std::lock_guard lock(mutex_);
      if (fetching_.contains(name)) {
        // Another request fetches it: this one is queued on that fetch and looks again once it
        // ended (fetch_done), no thread waiting meanwhile.
        waiters_[name].emplace_back([later] { later(std::nullopt); });
        return std::nullopt;
      }
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
        return answer(std::move(*m));
      }
    }
    error_code upstream_error;
    const clock::time_point asked = clock::now();  // the HEAD's answer is no older than this
    object_info info = upstream_->head_object(object.bucket, object.key, upstream_error);
    if (upstream_error == s3::errc::no_such_key) {
      if (held) drop(object);
      return fail(sluice::errc::no_such_object);
    }
    if (upstream_error) {
      const error_code ec = from_upstream(upstream_error);
      if (ec == s3::errc::service_unavailable && config_.stale_if_error && held) {
        if (auto m = from_cache(*held)) {
          std::lock_guard lock(mutex_);
          index_.touch(name);
          ++stats_.stale_served;
          return answer(std::move(*m));
        }
      }
      log_upstream_failure("HEAD", object, upstream_error, ec);
      return fail(ec);
    }
    if (!sane(info)) {
      log_upstream_failure("HEAD", object, error_code(sluice::errc::protocol_violation), s3::errc::bad_gateway);
      return fail(s3::errc::bad_gateway);
    }
    info.key = object.key;
    if (state->sized && state->sized->first == info.attributes.etag) info.size = state->sized->second;
    if (held && *held == info.attributes.etag) {
      if (auto m = from_cache(*held)) {
        if (m->info_.size == info.size) {
          if (gateway_impl::known_time(info.last_modified)) m->info_.last_modified = info.last_modified;
          std::lock_guard lock(mutex_);
          index_.touch(name, asked, gateway_impl::known_time(info.last_modified));
          ++stats_.revalidations;
          ++stats_.hits;
          return answer(std::move(*m));
        }
      }
    }
    if (!state->need_bytes) {
      mapping m;
      m.info_ = std::move(info);
      return answer(std::move(m));
    }
    {
      std::lock_guard lock(mutex_);
      if (fetching_.contains(name)) continue;  // another request fetches it: wait and look again
      fetching_.insert(name);
    }
    if (held) drop(object);  // another version: the old copy goes before the new one comes
    if (stream && info.size > config_.chunk_bytes) {
      // Answered when the fetch's first step arrived; a size the HEAD misstated is fetched again.
      fetch_streaming(object, info, asked,
                      [this, state, later, etag = info.attributes.etag](mapping m, error_code e,
                                                                        std::optional<std::uint64_t> other_size) {
                        if (e && other_size) {
                          log_upstream_failure("GET", state->object, error_code(sluice::errc::protocol_violation), e);
                          if (state->attempt < 2) {
                            state->sized.emplace(etag, *other_size);
                            ++state->attempt;
                            return later(std::nullopt);
                          }
                          return later(resolved{{}, e});
                        }
                        later(resolved{std::move(m), e});
                      });
      return std::nullopt;
    }
    std::optional<std::uint64_t> other_size;
    error_code ec;
    mapping m = fetch(object, info, asked, ec, &other_size);
    fetch_done(name);
    if (ec && other_size) {
      // The HEAD misstated the size (a half object would have been cached as whole): fetched
      // again with the GET's size, which the next HEAD of the same version gets too.
      log_upstream_failure("GET", object, error_code(sluice::errc::protocol_violation), ec);
      if (state->attempt < 2) {
        state->sized.emplace(info.attributes.etag, *other_size);
        continue;
      }
      return fail(ec);
    }
    // Replaced on the upstream while it was fetched: the next HEAD names the newer version.
    if (ec == sluice::errc::precondition_failed && state->attempt < 2) continue;
    if (ec == sluice::errc::precondition_failed) {
      // The client asked for no condition: an object that changes at every fetch is the
      // upstream's trouble, not a 412 of the client's.
      log("gateway_store: GET " + name + ": the upstream's version changed during each of 3 fetches");
      ec = s3::errc::service_unavailable;
    }
    return resolved{std::move(m), ec};
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

}  // namespace sluice::s3
