// Compiled part of sluice::fabric that serves the S3 tier: the token protocol's data plane.
#include <sluice/fabric/s3_plane.hpp>

#include <sluice/path.hpp>
#include <sluice/s3/error.hpp>

#include <malloc.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <new>
#include <span>
#include <string_view>

#include <boost/asio/system_executor.hpp>

#include "server_path.hpp"

namespace sluice::fabric {

namespace {

using steady = std::chrono::steady_clock;

/// Page-aligned host memory for one staging buffer.
struct aligned_bytes {
  struct deleter {
    void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{4096}); }
  };
  std::unique_ptr<std::byte[], deleter> bytes;
  std::size_t size = 0;
  explicit aligned_bytes(std::size_t n)
      : bytes(static_cast<std::byte*>(::operator new[](n, std::align_val_t{4096}))), size(n) {}
};

/// Whether a post failed because the endpoint's transmit queue was full (FI_EAGAIN). A PUT's
/// reads post with full_queue::report and try again after short waits; a queue that stays full
/// for min(operation_timeout, connect_timeout) means the endpoint completes
/// nothing, whoever's operations fill it (libfabric 1.17's shm with writes to a dead peer
/// outstanding, an earlier request's). Nothing of this request may be outstanding, so no
/// deadline of its own runs out: the failed post is the only sign that the endpoint needs
/// replacing.
bool queue_stayed_full(const error_code& ec) { return ec == make_fabric_error(-FI_EAGAIN); }

}  // namespace

/// One provider's path parts and its pool of registered staging buffers: the server's side of
/// the token protocol is a path too. Its negotiator is the token (the request that carries it);
/// `sources` registers the store's mapping of a GET for RMA writes, `staging` the PUT pool's
/// buffers for RMA reads (src/fabric/server_path.hpp builds a GET's path from them).
struct server_plane::provider_state {
  provider_state(std::shared_ptr<endpoint> e, const server_plane_config& config)
      : ep(std::move(e)),
        sources(ep, access::write_source, 0),
        staging(ep, access::local, 0),
        cache(config.registration_cache_bytes, config.registration_cache_entries) {}
  std::shared_ptr<endpoint> ep;
  /// Capacity 0: no MR outlives the mapping it names (a cached MR of an unmapped file would name
  /// whatever is mapped there next); registrations kept past their request are kept in `cache`,
  /// with the mapping they name.
  registrar sources;
  registrar staging;
  detail::mapping_cache cache;
  std::atomic<std::size_t> active{0};  // write_from/read calls using it now (retired: closed at 0)
  std::atomic<bool> replacing{false};  // reopen() is opening its successor: later calls wait for that one
  std::vector<aligned_bytes> memory;
  std::vector<registration> regions;
  std::mutex mutex;
  std::vector<std::size_t> free;
  std::deque<std::function<void(std::size_t)>> waiting;  // first come, first served

  /// Hands a free buffer to `got`: at once (on this thread) when one is free, else when one is
  /// released (on the releasing thread). `got` must be short and must not block; it owns the slot.
  void async_acquire(std::function<void(std::size_t)> got) {
    std::unique_lock lock(mutex);
    if (free.empty()) {
      waiting.push_back(std::move(got));
      return;
    }
    const std::size_t slot = free.back();
    free.pop_back();
    lock.unlock();
    got(slot);
  }
  void release(std::size_t slot) {
    std::unique_lock lock(mutex);
    if (waiting.empty()) {
      free.push_back(slot);
      return;
    }
    auto next = std::move(waiting.front());
    waiting.pop_front();
    lock.unlock();
    next(slot);
  }
};

std::optional<config_error> server_plane_config::validate() const {
  if (auto problem = fabric.validate()) return problem;
  if (staging_buffer_bytes == 0) return config_error{"rdma.staging_buffer_bytes", "must be positive"};
  if (staging_buffers == 0) return config_error{"rdma.staging_buffers", "must be positive"};
  if (buffers_per_transfer == 0 || buffers_per_transfer > staging_buffers) {
    return config_error{"rdma.buffers_per_transfer", "must be between 1 and staging_buffers"};
  }
  if (registration_cache_entries > 65536) return config_error{"rdma.registration_cache_entries", "must be 0..65536"};
  return std::nullopt;
}

namespace {

/// libfabric's shm names its shared regions /dev/shm/<pid>:<name>… after the process that made
/// them and removes them when the endpoint closes; a process that was killed leaves them behind.
/// Removes those of processes that are gone, and only those this user owns.
void remove_stale_shm_regions() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    const auto colon = name.find(':');
    if (colon == 0 || colon == std::string::npos || colon > 10) continue;
    if (!std::all_of(name.begin(), name.begin() + static_cast<std::ptrdiff_t>(colon),
                     [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    const auto pid = static_cast<pid_t>(std::stol(name.substr(0, colon)));
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::filesystem::remove(entry.path(), ec);
  }
}

/// Whether a token's shm peer is an endpoint that exists now: libfabric's shm names an endpoint
/// "fi_shm://NAME" and keeps its region in /dev/shm/NAME, NAME starting with the owner's pid.
/// A name whose region is missing or whose process is gone would be inserted into the address
/// vector and every post to it would find the queue full until its deadline: the transfer is
/// declined before it reaches the provider. (It does not make shm safe among users who do not
/// trust each other: a live process's endpoint can still be named; see docs/security.md.)
bool shm_peer_exists(std::span<const std::byte> peer_name) {
  constexpr std::string_view prefix = "fi_shm://";
  if (peer_name.empty() || peer_name.back() != std::byte{0}) return false;
  const std::string_view name(reinterpret_cast<const char*>(peer_name.data()), peer_name.size() - 1);
  if (!name.starts_with(prefix)) return true;  // another form of address: the provider judges it
  const std::string_view region = name.substr(prefix.size());
  if (region.empty() || region.find('/') != std::string_view::npos || region.starts_with(".")) return false;
  const auto colon = region.find(':');
  const std::string_view pid_text = region.substr(0, colon);
  if (pid_text.empty() || pid_text.size() > 10 ||
      !std::all_of(pid_text.begin(), pid_text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  struct stat st {};
  if (::lstat(("/dev/shm/" + std::string(region)).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const auto pid = static_cast<pid_t>(std::stol(std::string(pid_text)));
  return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM);
}

/// Whether a token names a peer that may exist (see shm_peer_exists).
bool peer_may_exist(const endpoint& ep, const s3::rdma_token& token) {
  return ep.traits().name != "shm" || shm_peer_exists(token.endpoint);
}

}  // namespace

std::shared_ptr<server_plane::provider_state> server_plane::open_provider(const std::string& name,
                                                                          error_code& ec) const {
  if (name == "shm") remove_stale_shm_regions();
  auto ep = endpoint::open(name, config_.fabric, ec);
  if (ec) return nullptr;
  auto state = std::make_shared<provider_state>(ep, config_);
  for (std::size_t i = 0; i < config_.staging_buffers && !ec; ++i) {
    state->memory.emplace_back(config_.staging_buffer_bytes);
    const region mem{state->memory.back().bytes.get(), config_.staging_buffer_bytes, memory_kind::host_pageable, -1};
    state->regions.push_back(state->staging.register_region(mem, ec));
    state->free.push_back(i);
  }
  if (ec) return nullptr;
  return state;
}

std::shared_ptr<server_plane> server_plane::open(const server_plane_config& config, error_code& ec) {
  if (config.validate()) {
    ec = errc::invalid_config;
    return nullptr;
  }
  std::shared_ptr<server_plane> plane(new server_plane());
  plane->config_ = config;
  error_code last = make_fabric_error(-FI_ENODATA);
  for (const std::string& name : candidate_providers(config.fabric.provider, true)) {
    error_code e;
    if (auto state = plane->open_provider(name, e)) {
      plane->providers_.push_back(std::move(state));
    } else {
      last = e;
    }
  }
  if (plane->providers_.empty()) {
    ec = last;
    return nullptr;
  }
  ec = {};
  return plane;
}

server_plane::~server_plane() = default;

void server_plane::close() noexcept {
  const std::lock_guard lock(providers_mutex_);
  closed_ = true;
  for (const auto& p : providers_) {
    p->ep->close();
    p->cache.clear();  // the mappings kept go (their files may be deleted already)
  }
  for (const auto& p : retired_) p->ep->close();
  retired_.clear();
}

std::uint64_t server_plane::reopened() const noexcept { return reopened_.load(); }

void server_plane::reopen(const std::shared_ptr<provider_state>& wedged) {
  const std::string name = wedged->ep->traits().name;
  {
    const std::lock_guard lock(providers_mutex_);
    if (closed_ || std::find(providers_.begin(), providers_.end(), wedged) == providers_.end()) return;  // done
  }
  // Transfers that give up together (several requests naming one dead peer) replace it once.
  if (wedged->replacing.exchange(true)) return;
  error_code ec;
  auto fresh = open_provider(name, ec);  // outside the lock: registering the staging buffers takes a while
  const std::lock_guard lock(providers_mutex_);
  const auto at = std::find(providers_.begin(), providers_.end(), wedged);
  if (!fresh || closed_ || at == providers_.end()) {
    if (fresh) fresh->ep->close();
    wedged->replacing = false;  // not reopened (the old endpoint stays): a later failure tries again
    return;
  }
  *at = std::move(fresh);
  retired_.push_back(wedged);
  ++reopened_;
}

void server_plane::reap(const boost::asio::any_io_executor& executor) {
  std::vector<std::shared_ptr<provider_state>> idle;
  {
    const std::lock_guard lock(providers_mutex_);
    for (auto it = retired_.begin(); it != retired_.end();) {
      if ((*it)->active.load() == 0) {
        auto& total = closed_totals_[(*it)->ep->traits().name];
        const endpoint_statistics e = (*it)->ep->statistics();
        total.endpoint.operations += e.operations;
        total.endpoint.bytes += e.bytes;
        total.endpoint.errors += e.errors;
        total.endpoint.registrations += e.registrations;
        ++total.reopened;
        idle.push_back(std::move(*it));
        it = retired_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Closing aborts what it still holds (writes to a vanished peer): their completion functions
  // release the MRs, mappings and staging buffers they kept.
  if (idle.empty()) return;
  boost::asio::post(executor, [idle = std::move(idle)]() mutable {
    for (const auto& p : idle) p->ep->close();
    // The endpoints, their MRs and staging buffers go (once nothing else holds them).
    idle.clear();
    // libfabric's pools of a closed endpoint (tcp;ofi_rxm: tens of MiB, touched) go back to
    // malloc, which keeps them in the arenas of the threads that freed them: measured, a server
    // replacing its endpoint every few seconds grew by ~45 MiB per replacement, never returned.
    // Trimming gives the free pages of every arena back to the kernel.
#ifdef __GLIBC__
    static_cast<void>(::malloc_trim(0));
#endif
  });
}

std::vector<std::string> server_plane::providers() const {
  const std::lock_guard lock(providers_mutex_);
  std::vector<std::string> out;
  for (const auto& p : providers_) out.push_back(p->ep->traits().name);
  return out;
}

std::shared_ptr<endpoint> server_plane::endpoint_for(std::string_view provider) const {
  const std::lock_guard lock(providers_mutex_);
  for (const auto& p : providers_) {
    if (p->ep->traits().name == provider) return p->ep;
  }
  return nullptr;
}

std::vector<server_plane_statistics> server_plane::statistics() const {
  const std::lock_guard lock(providers_mutex_);
  std::vector<server_plane_statistics> out;
  out.reserve(providers_.size());
  for (const auto& p : providers_) {
    const std::string& name = p->ep->traits().name;
    server_plane_statistics one{name, p->ep->statistics(), p->regions.size(), 0, 0};
    {
      const std::lock_guard pool(p->mutex);
      one.staging_buffers_free = p->free.size();
    }
    const detail::mapping_cache::statistics kept = p->cache.stats();
    one.registration_cache_hits = kept.hits;
    one.registration_cache_misses = kept.misses;
    one.registration_cache_entries = kept.entries;
    one.registration_cache_bytes = kept.bytes;
    // Replaced endpoints of the provider: counters keep counting up across a reopen.
    const auto add = [&](const endpoint_statistics& e) {
      one.endpoint.operations += e.operations;
      one.endpoint.bytes += e.bytes;
      one.endpoint.errors += e.errors;
      one.endpoint.registrations += e.registrations;
    };
    for (const auto& r : retired_) {
      if (r->ep->traits().name == name) add(r->ep->statistics());
    }
    if (const auto it = closed_totals_.find(name); it != closed_totals_.end()) {
      add(it->second.endpoint);
      one.reopened = it->second.reopened;
    }
    for (const auto& r : retired_) one.reopened += r->ep->traits().name == name ? 1 : 0;
    out.push_back(std::move(one));
  }
  return out;
}

bool server_plane::serves(std::string_view provider) const { return endpoint_for(provider) != nullptr; }

namespace {

/// A write_from/read call's hold on its provider, counted in `active` (by find_provider, under
/// the plane's lock), so that a retired endpoint closes only once no call uses it.
class provider_use {
 public:
  /// Takes over the count find_provider made.
  explicit provider_use(std::shared_ptr<server_plane::provider_state> counted) : p_(std::move(counted)) {}
  provider_use(const provider_use&) = delete;
  provider_use& operator=(const provider_use&) = delete;
  ~provider_use() {
    if (p_) --p_->active;
  }
  [[nodiscard]] const std::shared_ptr<server_plane::provider_state>& get() const noexcept { return p_; }

 private:
  std::shared_ptr<server_plane::provider_state> p_;
};

}  // namespace

std::shared_ptr<server_plane::provider_state> server_plane::find_provider(
    const s3::rdma_token& token, const boost::asio::any_io_executor& executor) {
  reap(executor);
  const std::lock_guard lock(providers_mutex_);
  for (const auto& p : providers_) {
    if (p->ep->traits().name == token.provider && p->ep->traits().virtual_addresses() == token.virtual_addresses) {
      ++p->active;  // the caller's provider_use gives it back (counted under the lock: reap sees it)
      return p;
    }
  }
  return nullptr;
}

error_code server_plane::write_from(const s3::rdma_requester& who, const s3::rdma_token& token,
                                    const s3::rdma_source& source) {
  std::promise<error_code> result;
  auto moved = result.get_future();
  async_write_from(who, token, source, boost::asio::system_executor(),
                   [&result](error_code ec) { result.set_value(ec); });
  return moved.get();
}

void server_plane::async_write_from(const s3::rdma_requester& /*who*/, const s3::rdma_token& token,
                                    const s3::rdma_source& source, const boost::asio::any_io_executor& executor,
                                    std::function<void(error_code)> done) {
  auto use = std::make_shared<provider_use>(find_provider(token, executor));
  const std::shared_ptr<provider_state>& provider = use->get();
  const const_region memory = source.bytes();
  if (!provider || memory.size == 0 || !peer_may_exist(*provider->ep, token)) {
    const error_code ec = provider && memory.size == 0 ? error_code{} : error_code(s3::errc::rdma_not_supported);
    boost::asio::post(executor, [done = std::move(done), ec] { done(ec); });
    return;
  }
  // Built per request: a negotiator for this token, a registrar that keeps this mapping's owner
  // with its MR (the provider's registration cache answers a version it holds, and keeps a new
  // one). The bytes go from where they are (a page-cache mapping, say) into the client's memory,
  // one copy in all; access::write_source lets the read-only mapping be handed over as is.
  using get_path = path<detail::token_negotiator, detail::mapping_registrar, detail::token_transport>;
  auto get = std::make_shared<get_path>(
      executor, detail::token_negotiator{provider->ep, token, [this, provider] { reopen(provider); }},
      detail::mapping_registrar{provider->sources, source, &provider->cache},
      detail::token_transport{provider->ep, executor, config_.staging_buffer_bytes, config_.buffers_per_transfer});
  get->async_put(
      object_ref{}, memory, [get, use, done = std::move(done)](error_code ec, const transfer_result& result) mutable {
        if (ec && ec != s3::errc::invalid_rdma_token) {
          // After the first byte a failure; before it a decline (the server answers by HTTP).
          ec = result.bytes > 0 ? error_code(s3::errc::rdma_transfer_failed) : error_code(s3::errc::rdma_not_supported);
        }
        done(ec);
      });
}

error_code server_plane::read(const s3::rdma_requester& who, const s3::rdma_token& token, std::uint64_t length,
                              const s3::rdma_sink& sink) {
  std::promise<error_code> result;
  auto moved = result.get_future();
  async_read(who, token, length, sink, boost::asio::system_executor(),
             [&result](error_code ec) { result.set_value(ec); });
  return moved.get();
}

/// One PUT by RDMA: a window of at most buffers_per_transfer staging buffers being read, each
/// handed to the sink once it and every buffer before it arrived. Buffers come from the
/// provider's pool as they are released (async_acquire), reads are posted and the sink runs on
/// the executor, read completions come on the progress thread: no thread waits. Shared with the
/// completion functions: a buffer whose reads are still outstanding when the transfer ends goes
/// back to the pool when they complete.
struct server_plane::put_operation : std::enable_shared_from_this<put_operation> {
  struct chunk {
    std::uint64_t index = 0;  // the transfer's index-th buffer's worth of bytes
    std::uint64_t length = 0;
    std::optional<std::size_t> slot;  // the staging buffer, once acquired
    std::uint64_t issued = 0;         // bytes of its reads posted so far
    bool posted = false;              // all its reads were posted
    std::size_t pending = 0;          // reads outstanding
    error_code failure;
  };

  server_plane* plane = nullptr;
  std::shared_ptr<provider_use> use;
  std::shared_ptr<provider_state> provider;
  boost::asio::any_io_executor executor;
  endpoint::peer_lease lease;  // held until the last read completes (or the endpoint closes)
  fi_addr_t peer = FI_ADDR_UNSPEC;
  std::vector<remote_segment> segments;  // the token's, copied: the operation may outlive it
  std::vector<std::byte> peer_name;
  const s3::rdma_sink* sink = nullptr;  // valid until `done` runs
  std::uint64_t length = 0;
  std::uint64_t buffer_bytes = 0;
  std::size_t window_limit = 0;
  std::function<void(error_code)> done;

  std::mutex mutex;  // the rest
  std::unique_ptr<boost::asio::steady_timer> timer;
  std::unique_ptr<boost::asio::steady_timer> retry;  // posts again after a full transmit queue
  std::optional<steady::time_point> full_since;      // the queue has been full since (unset: not full)
  std::deque<chunk> window;                          // in order; front is the next for the sink
  std::uint64_t planned = 0;                         // bytes assigned to chunks
  detail::segment_cursor cursor;                     // the reads' position in `segments`
  bool pumping = false;
  bool delivering = false;
  bool expired = false;  // the deadline passed while the sink ran
  bool finished = false;
  bool reached = false;  // a buffer reached the sink
  bool wedged = false;
  bool post_failed = false;  // no more posts: the transfer fails when that chunk's turn comes
  steady::time_point connect_deadline;
  steady::time_point last_progress;

  using lock_type = std::unique_lock<std::mutex>;

  // Under the lock: asks the pool for buffers for the next chunks, up to the window.
  void plan(lock_type& lock) {
    std::size_t asked = 0;
    while (!finished && planned < length && window.size() < window_limit) {
      const std::uint64_t n = std::min(buffer_bytes, length - planned);
      window.push_back(chunk{planned / buffer_bytes, n, std::nullopt, 0, false, 0, {}});
      planned += n;
      ++asked;
    }
    if (asked == 0) return;
    lock.unlock();
    for (std::size_t k = 0; k < asked; ++k) {
      provider->async_acquire([self = shared_from_this()](std::size_t slot) { self->got(slot); });
    }
    lock.lock();
  }

  // A buffer from the pool (any thread, short): the first chunk without one takes it.
  void got(std::size_t slot) {
    lock_type lock(mutex);
    if (finished) {
      lock.unlock();
      provider->release(slot);
      return;
    }
    for (auto& c : window) {
      if (!c.slot) {
        c.slot = slot;
        break;
      }
    }
    if (pumping) return;  // the running pump finds it
    pumping = true;
    boost::asio::post(executor, [self = shared_from_this()] { self->pump(); });
  }

  // On the executor, one pump at a time: posts the reads of every chunk that has its buffer, in
  // order (the cursor over the segments moves in order). A full transmit queue never holds the
  // thread (it serves every transfer): the pump comes back after a short wait.
  void pump() {
    lock_type lock(mutex);
    while (!finished && !post_failed) {
      chunk* next = nullptr;
      for (auto& c : window) {
        if (!c.posted) {
          if (c.slot) next = &c;
          break;
        }
      }
      if (next == nullptr) break;
      if (!post_chunk(lock, *next)) {  // `next` stays valid: a chunk is not removed before it is posted
        if (finished) break;           // the deadline passed meanwhile: the timers are gone
        retry->expires_after(std::chrono::microseconds(200));
        retry->async_wait([self = shared_from_this()](error_code e) {
          if (!e) self->pump();
        });
        return;  // still pumping
      }
    }
    pumping = false;
    if (!finished && !window.empty() && window.front().posted && window.front().pending == 0) {
      schedule_delivery(lock);
    }
  }

  // Posts the chunk's reads not posted yet; false when the transmit queue is full (again later,
  // from where it stopped).
  bool post_chunk(lock_type& lock, chunk& c) {
    const std::uint64_t index = c.index;
    const registration& buffer = provider->regions[*c.slot];
    while (c.issued < c.length && !c.failure && !finished) {
      const std::uint64_t local = c.issued;
      const detail::segment_cursor before = cursor;
      const remote_segment piece = cursor.next(segments, c.length - local);
      const std::uint64_t n = piece.length;
      const std::uint64_t address = piece.address;
      const std::uint64_t key = piece.key;
      ++c.pending;
      lock.unlock();
      const error_code e = provider->ep->post_read(
          buffer.mr(), buffer.offset_in_mr() + local, n, peer, address, key,
          [self = shared_from_this(), index](error_code ec) { self->arrived(index, ec); }, full_queue::report);
      lock.lock();
      if (!e) {
        full_since.reset();
        c.issued += n;
        continue;
      }
      --c.pending;
      if (queue_stayed_full(e)) {
        cursor = before;  // not posted
        const steady::time_point now = steady::now();
        if (!full_since) full_since = now;
        const auto limit = std::min(provider->ep->config().operation_timeout, provider->ep->config().connect_timeout);
        if (now - *full_since < limit) return false;
        wedged = true;  // the queue stayed full for the whole deadline
      }
      c.failure = e;
      post_failed = true;
    }
    c.posted = true;
    if (finished && c.pending == 0 && c.slot) {  // ended while posting: nothing reads into it
      const std::size_t slot = *c.slot;
      c.slot.reset();
      lock.unlock();
      provider->release(slot);
      lock.lock();
    }
    return true;
  }

  chunk* find(std::uint64_t index) {
    for (auto& c : window) {
      if (c.index == index) return &c;
    }
    return nullptr;
  }

  // A read completed (progress thread, or the thread that closes the endpoint).
  void arrived(std::uint64_t index, error_code ec) {
    lock_type lock(mutex);
    chunk* c = find(index);
    if (c == nullptr) return;  // not possible: a chunk with reads outstanding stays
    --c->pending;
    if (ec && !c->failure) c->failure = ec;
    if (!ec) last_progress = steady::now();
    if (c->pending != 0) return;
    if (finished) {  // abandoned: its buffer goes back now
      const std::size_t slot = *c->slot;
      c->slot.reset();
      lock.unlock();
      provider->release(slot);
      return;
    }
    if (&window.front() == c) schedule_delivery(lock);
  }

  void schedule_delivery(lock_type&) {
    if (delivering) return;
    delivering = true;
    boost::asio::post(executor, [self = shared_from_this()] { self->deliver(); });
  }

  // On the executor: hands the buffers that arrived to the sink, in order.
  void deliver() {
    lock_type lock(mutex);
    while (!finished && !window.empty() && window.front().posted && window.front().pending == 0) {
      chunk& head = window.front();
      if (head.failure) {
        end(lock, reached ? error_code(s3::errc::rdma_transfer_failed) : error_code(s3::errc::rdma_not_supported));
        return;
      }
      const std::size_t slot = *head.slot;
      const std::uint64_t n = head.length;
      lock.unlock();
      const registration& buffer = provider->regions[slot];
      const error_code e = (*sink)(std::span<const std::byte>(buffer.region().bytes(), static_cast<std::size_t>(n)));
      provider->release(slot);
      lock.lock();
      window.pop_front();
      reached = true;
      last_progress = steady::now();
      if (e) {
        end(lock, e);
        return;
      }
      if (expired && !(window.empty() && planned == length)) {
        end(lock, error_code(s3::errc::rdma_transfer_failed));
        return;
      }
      plan(lock);
    }
    delivering = false;
    if (!finished && window.empty() && planned == length) end(lock, {});
  }

  // On the executor, when the timer fires.
  void check_deadline() {
    lock_type lock(mutex);
    if (finished) return;
    const steady::time_point deadline =
        reached ? last_progress + provider->ep->config().operation_timeout : connect_deadline;
    if (steady::now() < deadline) {
      arm(deadline);
      return;
    }
    if (delivering) {
      expired = true;  // the sink is running: deliver() ends the transfer when it returns
      return;
    }
    // Reads the queue never took in all that time (a peer that vanished, whose queue nobody
    // drains): on libfabric 1.17's shm the endpoint then completes nothing else.
    wedged = wedged || full_since.has_value();
    end(lock, reached ? error_code(s3::errc::rdma_transfer_failed) : error_code(s3::errc::rdma_not_supported));
  }

  void arm(steady::time_point deadline) {
    timer->expires_at(deadline);
    timer->async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->check_deadline();
    });
  }

  // Under the lock, once: gives back the buffers nothing reads into, releases what a failure
  // leaves behind (the peer, a wedged endpoint) and completes.
  void end(lock_type& lock, error_code ec) {
    finished = true;
    timer.reset();
    retry.reset();  // a pump waiting on it is done (it finds `finished`)
    std::vector<std::size_t> idle;
    bool quiet = true;
    for (auto& c : window) {
      if (c.pending != 0) {
        quiet = false;
      } else if (c.slot) {
        idle.push_back(*c.slot);
        c.slot.reset();
      }
    }
    const bool failed = ec == s3::errc::rdma_transfer_failed || ec == s3::errc::rdma_not_supported;
    const bool replace = (failed && !quiet) || wedged;  // reads that never completed, a full queue
    auto complete = std::move(done);
    lock.unlock();
    for (const std::size_t slot : idle) provider->release(slot);
    if (failed) provider->ep->forget(peer_name);  // removed once no operation to it is outstanding
    if (replace) plane->reopen(provider);
    use.reset();
    complete(ec);
  }
};

void server_plane::async_read(const s3::rdma_requester& /*who*/, const s3::rdma_token& token, std::uint64_t length,
                              const s3::rdma_sink& sink, const boost::asio::any_io_executor& executor,
                              std::function<void(error_code)> done) {
  const auto finish_now = [&](error_code ec) {
    boost::asio::post(executor, [done = std::move(done), ec] { done(ec); });
  };
  auto use = std::make_shared<provider_use>(find_provider(token, executor));
  const std::shared_ptr<provider_state> provider = use->get();
  if (!provider) return finish_now(s3::errc::rdma_not_supported);
  if (length == 0) return finish_now({});
  if (!peer_may_exist(*provider->ep, token)) return finish_now(s3::errc::rdma_not_supported);
  if (token.total_length() < length) return finish_now(s3::errc::invalid_rdma_token);
  error_code ec;
  endpoint::peer_lease lease = provider->ep->lease(token.endpoint, ec);
  if (ec) return finish_now(s3::errc::rdma_not_supported);

  auto op = std::make_shared<put_operation>();
  op->plane = this;
  op->use = std::move(use);
  op->provider = provider;
  op->executor = executor;
  op->peer = lease.address();
  op->lease = std::move(lease);
  for (const auto& seg : token.segments) op->segments.push_back({seg.address, seg.length, seg.key});
  op->peer_name = token.endpoint;
  op->sink = &sink;
  op->length = length;
  op->buffer_bytes = config_.staging_buffer_bytes;
  op->window_limit = config_.buffers_per_transfer;
  op->done = std::move(done);
  op->connect_deadline = steady::now() + provider->ep->config().connect_timeout;
  put_operation::lock_type lock(op->mutex);
  op->timer = std::make_unique<boost::asio::steady_timer>(executor);
  op->retry = std::make_unique<boost::asio::steady_timer>(executor);
  op->arm(op->connect_deadline);
  op->plan(lock);
}

// -- client ----------------------------------------------------------------------------------

namespace {

class fabric_grant final : public s3::rdma_client_plane::grant {
 public:
  fabric_grant(registration reg, std::shared_ptr<endpoint> ep, std::string token)
      : registration_(std::move(reg)), window_(std::move(ep)), token_(std::move(token)) {}
  [[nodiscard]] const std::string& token() const noexcept override { return token_; }

 private:
  registration registration_;
  endpoint::remote_access_window window_;
  std::string token_;
};

}  // namespace

std::shared_ptr<client_plane> client_plane::open(const client_plane_config& config, bool peer_local, error_code& ec) {
  if (config.validate()) {
    ec = errc::invalid_config;
    return nullptr;
  }
  error_code last = make_fabric_error(-FI_ENODATA);
  for (const std::string& name : candidate_providers(config.fabric.provider, peer_local)) {
    std::shared_ptr<client_plane> plane(new client_plane());
    error_code e;
    for (std::size_t i = 0; i < config.endpoints && !e; ++i) {
      auto ep = endpoint::open(name, config.fabric, e);
      if (!e) plane->lanes_.push_back(std::make_unique<lane>(ep, config.cached_registrations));
    }
    if (e) {
      last = e;
      continue;
    }
    ec = {};
    return plane;
  }
  ec = last;
  return nullptr;
}

std::string_view client_plane::provider() const noexcept { return lanes_.front()->ep->traits().name; }

void client_plane::invalidate(const region& memory) {
  for (const auto& l : lanes_) {
    l->write_cache.invalidate(memory);
    l->read_cache.invalidate(memory);
  }
}

std::unique_ptr<s3::rdma_client_plane::grant> client_plane::grant_access(const region& memory, s3::rdma_op op,
                                                                         std::chrono::system_clock::time_point expires,
                                                                         error_code& ec) {
  lane& l = *lanes_[next_++ % lanes_.size()];
  const std::shared_ptr<endpoint>& ep = l.ep;
  registration reg = (op == s3::rdma_op::write ? l.write_cache : l.read_cache).register_region(memory, ec);
  if (ec) return nullptr;
  s3::rdma_token token;
  token.op = op;
  token.virtual_addresses = ep->traits().virtual_addresses();
  token.provider = ep->traits().name;
  const auto name = ep->name();
  token.endpoint.assign(name.begin(), name.end());
  token.expires = static_cast<std::uint64_t>(
      std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::seconds>(expires.time_since_epoch()).count()));
  if (memory.size > 0) {
    const remote_segment seg = reg.remote(0, memory.size);
    token.segments.push_back({seg.address, seg.length, seg.key});
  }
  std::string text;
  try {
    text = s3::encode_rdma_token(token);
  } catch (const std::invalid_argument&) {
    ec = errc::invalid_argument;  // a provider name or address longer than the token allows
    return nullptr;
  }
  ec = {};
  return std::make_unique<fabric_grant>(std::move(reg), ep, std::move(text));
}

}  // namespace sluice::fabric
