// SPDX-License-Identifier: Apache-2.0
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
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <span>
#include <string_view>

#include <boost/asio/system_executor.hpp>

#include "server_path.hpp"
#include "server_put.hpp"

namespace sluice::fabric {

/// One provider's path parts: the server's side of the token protocol is a path too. Its
/// negotiator is the token (the request that carries it); `sources` registers the store's mapping
/// of a GET for RMA writes, `staging` the buffers of the PUT's pool for RMA reads; the RMA engine
/// (detail::token_transport) moves the bytes of both (src/fabric/server_path.hpp builds a GET's
/// path from them, src/fabric/server_put.hpp runs a PUT).
struct server_plane::provider_state {
  provider_state(std::shared_ptr<endpoint> e, const server_plane_config& config)
      : ep(std::move(e)),
        sources(ep, access::write_source, 0),
        staging(ep, access::local, 0),
        cache(config.registration_cache_bytes, config.registration_cache_entries, config.pinned) {}
  std::shared_ptr<endpoint> ep;
  /// Capacity 0: no MR outlives the mapping it names (a cached MR of an unmapped file would name
  /// whatever is mapped there next); registrations kept past their request are kept in `cache`,
  /// with the mapping they name.
  registrar sources;
  registrar staging;
  detail::mapping_cache cache;
  std::shared_ptr<detail::staging_pool> pool;
  std::atomic<std::size_t> active{0};  // write_from/read calls using it now (retired: closed at 0)
  std::atomic<bool> replacing{false};  // reopen() is opening its successor: later calls wait for that one
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
  state->pool = detail::staging_pool::open(state->staging, config_.staging_buffers, config_.staging_buffer_bytes, ec);
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
    server_plane_statistics one{name, p->ep->statistics(), p->pool->size(), p->pool->free_count(), 0};
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
  error_code ec;
  detail::token_memory remote = detail::granted_memory(*provider->ep, token, length, ec);
  if (ec) return finish_now(ec);
  // The bytes go by the RMA engine into staging buffers, buffer by buffer, and from there to the
  // sink (the store's writer).
  detail::staged_read::start(
      {provider->ep, provider->pool, config_.staging_buffer_bytes, config_.buffers_per_transfer, executor,
       std::move(remote), token.endpoint, &sink, length, [this, provider] { reopen(provider); }, std::move(use)},
      std::move(done));
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
