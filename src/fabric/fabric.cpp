// SPDX-License-Identifier: Apache-2.0
// Compiled part of sluice::fabric: the error category, provider choice, endpoints and
// memory registration.
#include <sluice/fabric/domain.hpp>
#include <sluice/fabric/endpoint.hpp>
#include <sluice/fabric/error.hpp>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <boost/asio/error.hpp>

#include <poll.h>
#include <sys/prctl.h>

#include <random>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

namespace sluice::fabric {

namespace {

class fabric_category_impl final : public boost::system::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "fabric"; }
  [[nodiscard]] std::string message(int value) const override { return fi_strerror(value); }
  // Every libfabric error is a failure of the data plane (sluice::condition::fabric_failed).
  [[nodiscard]] bool equivalent(int value, const boost::system::error_condition& cond) const noexcept override {
    if (cond.category() == sluice::condition_category()) {
      return cond.value() == static_cast<int>(sluice::condition::fabric_failed);
    }
    return error_category::equivalent(value, cond);
  }
};

constexpr std::uint32_t api_version = FI_VERSION(1, 14);

/// Progress threads that closed their own endpoint (a completion let go of its last owner, or
/// closed it): each ends its loop right after, and is joined by the next thread handed over, or
/// at exit. None is detached.
class thread_reaper {
 public:
  thread_reaper() = default;
  thread_reaper(const thread_reaper&) = delete;
  thread_reaper& operator=(const thread_reaper&) = delete;
  ~thread_reaper() {
    for (std::thread& t : threads_) t.join();
  }
  /// Called on `t` itself; joins the threads handed over before (they have ended or are ending).
  void adopt(std::thread t) {
    std::vector<std::thread> ended;
    {
      const std::lock_guard lock(mutex_);
      ended.swap(threads_);
      threads_.push_back(std::move(t));
    }
    for (std::thread& e : ended) e.join();
  }

 private:
  std::mutex mutex_;
  std::vector<std::thread> threads_;
};

thread_reaper& finished_progress_threads() {
  static thread_reaper reaper;
  return reaper;
}

}  // namespace

const boost::system::error_category& fabric_category() noexcept {
  static const fabric_category_impl category;
  return category;
}

// -- configuration -----------------------------------------------------------------------------

std::optional<config_error> fabric_config::validate() const {
  if (provider.empty()) return config_error{"fabric.provider", "must not be empty"};
  for (const char c : provider) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == ';' || c == '-' || c == ',';
    if (!ok) return config_error{"fabric.provider", "may hold only letters, digits, '_', '-', ';' and ','"};
  }
  if (operation_timeout.count() <= 0) return config_error{"fabric.operation_timeout", "must be positive"};
  if (connect_timeout.count() <= 0) return config_error{"fabric.connect_timeout", "must be positive"};
  return std::nullopt;
}

std::vector<std::string> candidate_providers(std::string_view choice, bool /*peer_local*/) {
  if (choice != "auto") {  // "a,b": each named, in order
    std::vector<std::string> named;
    for (std::size_t at = 0; at <= choice.size();) {
      const std::size_t comma = std::min(choice.find(',', at), choice.size());
      if (comma > at) named.emplace_back(choice.substr(at, comma - at));
      at = comma + 1;
    }
    return named;
  }
  return {"verbs;ofi_rxm", "efa", "tcp;ofi_rxm"};  // never shm: see the declaration
}

// -- memory_region ---------------------------------------------------------------------------

void* memory_region::descriptor() const noexcept { return mr_ ? fi_mr_desc(mr_.native_handle()) : nullptr; }

std::uint64_t memory_region::key() const noexcept { return mr_ ? fi_mr_key(mr_.native_handle()) : 0; }

std::uint64_t memory_region::remote_address(std::uint64_t offset) const noexcept {
  return virtual_addresses_ ? reinterpret_cast<std::uintptr_t>(region_.data) + offset : offset;
}

// -- endpoint --------------------------------------------------------------------------------

/// One posted libfabric operation; its address is the operation context libfabric hands back,
/// so it stays put (heap) until its completion is read.
struct endpoint::operation {
  fi_context2 context{};  // first: providers that ask for FI_CONTEXT use this memory
  completion_function done;
  std::uint64_t bytes = 0;
};

/// Completion of an operation split into pieces: done runs when the last piece completes,
/// with the first error any piece saw.
struct endpoint::split_state {
  std::mutex mutex;
  std::size_t remaining = 0;
  error_code first_error;
  completion_function done;
  void piece_done(error_code ec) {
    completion_function fire;
    error_code result;
    {
      const std::lock_guard lock(mutex);
      if (ec && !first_error) first_error = ec;
      if (--remaining != 0) return;
      fire = std::move(done);
      result = first_error;
    }
    fire(result);
  }
};

namespace {

template <class T>
error_code check(T ret) {
  return make_fabric_error(static_cast<long>(ret));
}

}  // namespace

std::shared_ptr<endpoint> endpoint::open(std::string_view provider, const fabric_config& config, error_code& ec) {
  if (const auto problem = config.validate()) {
    ec = errc::invalid_config;
    return nullptr;
  }
  if (!libfabric_available(ec)) return nullptr;  // loads libfabric.so.1 the first time (SLUICE_DLOPEN_FABRIC)
  std::shared_ptr<endpoint> ep(new endpoint());
  ep->config_ = config;

  // Hints: RDM with RMA both ways; we can handle every MR mode a provider may ask for.
  const auto get_info = [&](bool hmem, error_code& e) -> info_ptr {
    info_ptr hints(fi_allocinfo());
    if (!hints) {
      e = make_fabric_error(-FI_ENOMEM);
      return nullptr;
    }
    hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | (hmem ? FI_HMEM : 0);
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT | (hmem ? FI_MR_HMEM : 0);
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->fabric_attr->prov_name = strdup(std::string(provider).c_str());  // fi_freeinfo frees it
    fi_info* found = nullptr;
    // shm names endpoints after the process unless told otherwise; a node would make every
    // process's first endpoint the same name.
    const char* node = config.node.empty() || provider == "shm" ? nullptr : config.node.c_str();
    e = check(fi_getinfo(api_version, node, nullptr, node != nullptr ? FI_SOURCE : 0, hints.get(), &found));
    return info_ptr(found);
  };
  ep->info_ = get_info(config.hmem, ec);
  // A provider without FI_HMEM (or built without CUDA support) still serves host memory: the
  // endpoint then reports hmem() false and callers stage device memory through host buffers.
  if (ec && config.hmem) ep->info_ = get_info(false, ec);
  if (ec) return nullptr;
  const fi_info& info = *ep->info_;

  provider_traits& t = ep->traits_;
  t.name = info.fabric_attr->prov_name != nullptr ? info.fabric_attr->prov_name : std::string(provider);
  t.mr_mode = static_cast<std::uint64_t>(info.domain_attr->mr_mode);
  t.max_msg_size = info.ep_attr->max_msg_size;
  t.mr_key_size = info.domain_attr->mr_key_size;
  t.hmem = (info.caps & FI_HMEM) != 0;
  t.string_addresses = info.addr_format == FI_ADDR_STR;

  fid_fabric* fab = nullptr;
  if ((ec = check(fi_fabric(info.fabric_attr, &fab, nullptr)))) return nullptr;
  ep->fabric_.reset(fab);
  fid_domain* dom = nullptr;
  if ((ec = check(fi_domain(fab, ep->info_.get(), &dom, nullptr)))) return nullptr;
  ep->domain_.reset(dom);

  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_CONTEXT;
  cq_attr.wait_obj = FI_WAIT_FD;
  fid_cq* cq = nullptr;
  if (fi_cq_open(dom, &cq_attr, &cq, nullptr) == 0) {
    ep->cq_can_wait_ = fi_control(&cq->fid, FI_GETWAIT, &ep->wait_fd_) == 0 && ep->wait_fd_ >= 0;
  } else {
    cq_attr.wait_obj = FI_WAIT_NONE;  // the progress thread then sleeps between polls when idle
    if ((ec = check(fi_cq_open(dom, &cq_attr, &cq, nullptr)))) return nullptr;
  }
  ep->cq_.reset(cq);

  fi_av_attr av_attr{};
  av_attr.type = info.domain_attr->av_type != FI_AV_UNSPEC ? info.domain_attr->av_type : FI_AV_TABLE;
  fid_av* av = nullptr;
  if ((ec = check(fi_av_open(dom, &av_attr, &av, nullptr)))) return nullptr;
  ep->av_.reset(av);

  fid_ep* raw_ep = nullptr;
  if ((ec = check(fi_endpoint(dom, ep->info_.get(), &raw_ep, nullptr)))) return nullptr;
  ep->ep_.reset(raw_ep);
  if ((ec = check(fi_ep_bind(raw_ep, &av->fid, 0)))) return nullptr;
  if ((ec = check(fi_ep_bind(raw_ep, &cq->fid, FI_TRANSMIT | FI_RECV)))) return nullptr;
  if ((ec = check(fi_enable(raw_ep)))) return nullptr;

  std::size_t length = 0;
  static_cast<void>(fi_getname(&raw_ep->fid, nullptr, &length));  // -FI_ETOOSMALL, sets length
  ep->name_.resize(length);
  if ((ec = check(fi_getname(&raw_ep->fid, ep->name_.data(), &length)))) return nullptr;
  ep->name_.resize(length);

  ep->progress_ = std::thread([raw = ep.get()] { raw->progress_loop(); });
  ec = {};
  return ep;
}

endpoint::~endpoint() {
  close();
  av_.reset();
  cq_.reset();
  domain_.reset();
  fabric_.reset();
}

void endpoint::close() noexcept {
  stopping_ = true;  // first: a post retrying FI_EAGAIN gives up and lets go of the lock
  wake();            // and a napping progress thread sees it now
  {
    const std::unique_lock lock(close_mutex_);
    if (closed_) return;
    closed_ = true;
  }
  if (progress_.joinable()) {
    // On the progress thread itself (a completion let go of the endpoint's last owner, or closed
    // it), the thread cannot wait for itself: it ends its loop when finish() returns (progress_loop),
    // and another thread joins it.
    if (progress_.get_id() == std::this_thread::get_id()) {
      finished_progress_threads().adopt(std::move(progress_));
    } else {
      progress_.join();
    }
  }
  ep_.reset();  // no completion is reported and no byte moves after this
  std::vector<operation*> left;
  {
    const std::lock_guard lock(operations_mutex_);
    left.swap(outstanding_);
  }
  for (operation* op : left) {
    op->done(boost::asio::error::operation_aborted);
    delete op;
  }
}

endpoint_statistics endpoint::statistics() const noexcept {
  return {operations_.load(), bytes_.load(), errors_.load(), registrations_.load()};
}

memory_region endpoint::register_memory(const region& memory, access what, error_code& ec) {
  memory_region out;
  out.owner_ = shared_from_this();
  out.region_ = memory;
  out.access_ = what;
  out.virtual_addresses_ = traits_.virtual_addresses();
  if (memory.data == nullptr && memory.size != 0) {
    ec = errc::invalid_argument;
    return {};
  }
  if (memory.kind == memory_kind::cuda_device && !traits_.hmem) {
    ec = errc::unsupported_memory;
    return {};
  }
  if (memory.size == 0) {  // nothing to register; a zero-length transfer names no memory
    ec = {};
    return out;
  }
  std::uint64_t flags = what == access::write_source ? FI_WRITE : FI_READ | FI_WRITE;
  if ((static_cast<unsigned>(what) & static_cast<unsigned>(access::remote_read)) != 0) flags |= FI_REMOTE_READ;
  if ((static_cast<unsigned>(what) & static_cast<unsigned>(access::remote_write)) != 0) flags |= FI_REMOTE_WRITE;

  iovec iov{memory.data, memory.size};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = flags;
  // Keys we choose are random: a token names memory by (address, key), and on providers
  // without FI_MR_VIRT_ADDR the address is an offset, so a counter would make other clients'
  // memory easy to name.
  attr.requested_key = traits_.provider_keys() ? 0 : random_key();
  if (memory.kind == memory_kind::cuda_device) {
    attr.iface = FI_HMEM_CUDA;
    attr.device.cuda = memory.device;
  } else {
    attr.iface = FI_HMEM_SYSTEM;
  }
  fid_mr* mr = nullptr;
  if ((ec = check(fi_mr_regattr(domain_.native_handle(), &attr, 0, &mr)))) return {};
  out.mr_.reset(mr);
  if (traits_.endpoint_bound_mrs()) {
    if ((ec = check(fi_mr_bind(mr, &ep_.native_handle()->fid, 0)))) return {};
    if ((ec = check(fi_mr_enable(mr)))) return {};
  }
  ++registrations_;
  ec = {};
  return out;
}

std::uint64_t endpoint::random_key() {
  const std::lock_guard lock(key_mutex_);
  std::uint64_t key = key_engine_();
  if (traits_.mr_key_size > 0 && traits_.mr_key_size < sizeof key)
    key &= (std::uint64_t{1} << (8 * traits_.mr_key_size)) - 1;
  return key;
}

endpoint::known_peer* endpoint::find_or_insert(std::span<const std::byte> peer_name, std::string& key, error_code& ec) {
  // fi_av_insert takes no length: the name must be exactly what this provider's addresses are
  // (a NUL-terminated string, or as long as our own name), or libfabric reads past it.
  const bool well_formed = traits_.string_addresses ? !peer_name.empty() && peer_name.back() == std::byte{0}
                                                    : peer_name.size() == name_.size();
  if (!well_formed) {
    ec = make_fabric_error(-FI_EINVAL);
    return nullptr;
  }
  key.assign(reinterpret_cast<const char*>(peer_name.data()), peer_name.size());
  if (const auto found = peers_.find(key); found != peers_.end()) {
    ec = {};
    return &found->second;
  }
  fi_addr_t address = FI_ADDR_UNSPEC;
  const int inserted = fi_av_insert(av_.native_handle(), key.data(), 1, &address, 0, nullptr);
  if (inserted != 1) {
    ec = inserted < 0 ? make_fabric_error(inserted) : make_fabric_error(-FI_EADDRNOTAVAIL);
    return nullptr;
  }
  ec = {};
  return &peers_.emplace(key, known_peer{address, 0, false}).first->second;
}

fi_addr_t endpoint::resolve(std::span<const std::byte> peer_name, error_code& ec) {
  std::string key;
  const std::lock_guard lock(peers_mutex_);
  const known_peer* peer = find_or_insert(peer_name, key, ec);
  return peer != nullptr ? peer->address : FI_ADDR_UNSPEC;
}

endpoint::peer_lease endpoint::lease(std::span<const std::byte> peer_name, error_code& ec) {
  std::string key;
  fi_addr_t address = FI_ADDR_UNSPEC;
  {
    const std::lock_guard lock(peers_mutex_);
    known_peer* peer = find_or_insert(peer_name, key, ec);
    if (peer == nullptr) return {};
    ++peer->leases;
    address = peer->address;
  }
  peer_lease out;
  out.hold_ = std::make_shared<const peer_lease::hold>(shared_from_this(), std::move(key), address);
  return out;
}

void endpoint::release(const std::string& name) noexcept {
  const std::lock_guard lock(peers_mutex_);
  const auto found = peers_.find(name);
  if (found == peers_.end()) return;
  if (--found->second.leases == 0 && found->second.stale) remove(found);
}

void endpoint::forget(std::span<const std::byte> peer_name) {
  const std::string key(reinterpret_cast<const char*>(peer_name.data()), peer_name.size());
  const std::lock_guard lock(peers_mutex_);
  const auto found = peers_.find(key);
  if (found == peers_.end()) return;
  if (found->second.leases != 0) {
    found->second.stale = true;  // other transfers still post to it: removed after the last one
    return;
  }
  remove(found);
}

void endpoint::remove(std::map<std::string, known_peer>::iterator at) noexcept {
  fi_addr_t address = at->second.address;
  static_cast<void>(fi_av_remove(av_.native_handle(), &address, 1, 0));
  peers_.erase(at);
}

error_code endpoint::post_write(const memory_region& local, std::uint64_t local_offset, std::uint64_t length,
                                fi_addr_t peer, std::uint64_t remote_address, std::uint64_t key,
                                completion_function done, full_queue when_full) {
  return post(true, local, local_offset, length, peer, remote_address, key, std::move(done), when_full);
}

error_code endpoint::post_read(const memory_region& local, std::uint64_t local_offset, std::uint64_t length,
                               fi_addr_t peer, std::uint64_t remote_address, std::uint64_t key,
                               completion_function done, full_queue when_full) {
  return post(false, local, local_offset, length, peer, remote_address, key, std::move(done), when_full);
}

error_code endpoint::post(bool write, const memory_region& local, std::uint64_t local_offset, std::uint64_t length,
                          fi_addr_t peer, std::uint64_t remote_address, std::uint64_t key, completion_function done,
                          full_queue when_full) {
  if (!local.region().contains(local_offset, length)) return errc::region_too_small;
  if (length == 0) {
    done({});
    return {};
  }
  std::uint64_t piece = std::max<std::uint64_t>(1, traits_.max_msg_size);
  if (config_.max_operation_bytes != 0) piece = std::min(piece, config_.max_operation_bytes);
  const std::uint64_t pieces = length / piece + (length % piece != 0 ? 1 : 0);  // max_msg_size may be 2^64-1
  if (pieces == 1) {
    auto* op = new operation{{}, std::move(done), length};
    return post_one(write, local, local_offset, length, peer, remote_address, key, op, when_full);
  }
  auto state = std::make_shared<split_state>();
  state->remaining = static_cast<std::size_t>(pieces);
  state->done = std::move(done);
  for (std::uint64_t i = 0; i < pieces; ++i) {
    const std::uint64_t offset = i * piece;
    const std::uint64_t n = std::min(piece, length - offset);
    auto* op = new operation{{}, [state](error_code e) { state->piece_done(e); }, n};
    // Only the first piece may report a full queue: after it, pieces are in flight and done must run.
    const full_queue piece_full = i == 0 ? when_full : full_queue::wait;
    if (const error_code e =
            post_one(write, local, local_offset + offset, n, peer, remote_address + offset, key, op, piece_full)) {
      if (i == 0) return e;  // nothing in flight: the caller hears it now, done never runs
      for (std::uint64_t rest = i; rest < pieces; ++rest) state->piece_done(e);
      return {};
    }
  }
  return {};
}

error_code endpoint::post_one(bool write, const memory_region& local, std::uint64_t local_offset, std::uint64_t length,
                              fi_addr_t peer, std::uint64_t remote_address, std::uint64_t key, operation* op,
                              full_queue when_full) {
  const std::shared_lock closing(close_mutex_);
  if (closed_) {
    delete op;
    return boost::asio::error::operation_aborted;
  }
  {
    const std::lock_guard lock(operations_mutex_);
    outstanding_.push_back(op);
  }
  ++in_flight_;
  wake();
  void* buffer = local.region().bytes() + local_offset;
  void* desc = local.descriptor();
  // A transmit queue that stays full this long (a peer that stopped answering) is a failure.
  const auto deadline =
      when_full == full_queue::report
          ? std::chrono::steady_clock::time_point{}  // one try
          : std::chrono::steady_clock::now() + std::min(config_.operation_timeout, config_.connect_timeout);
  ssize_t ret = 0;
  for (;;) {
    iovec iov{buffer, static_cast<std::size_t>(length)};
    fi_rma_iov rma{remote_address, static_cast<std::size_t>(length), key};
    fi_msg_rma msg{};
    msg.msg_iov = &iov;
    msg.desc = &desc;
    msg.iov_count = 1;
    msg.addr = peer;
    msg.rma_iov = &rma;
    msg.rma_iov_count = 1;
    msg.context = &op->context;
    // A write completes only once its bytes are in the peer's memory (not merely sent), so
    // that whoever is told "done" may read them.
    ret = write ? fi_writemsg(ep_.native_handle(), &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE)
                : fi_readmsg(ep_.native_handle(), &msg, FI_COMPLETION);
    if (ret != -FI_EAGAIN || std::chrono::steady_clock::now() >= deadline || stopping_.load()) break;
    std::this_thread::sleep_for(std::chrono::microseconds(20));  // the progress thread drains the queue
  }
  if (ret != 0) {
    --in_flight_;
    {
      const std::lock_guard lock(operations_mutex_);
      std::erase(outstanding_, op);
    }
    delete op;
    if (ret != -FI_EAGAIN || when_full == full_queue::wait) ++errors_;  // a reported full queue is no error yet
    return make_fabric_error(ret);
  }
  ++operations_;
  bytes_ += length;
  return {};
}

void endpoint::finish(operation* op, error_code ec) {
  {
    const std::lock_guard lock(operations_mutex_);
    std::erase(outstanding_, op);
  }
  --in_flight_;
  if (ec) ++errors_;
  op->done(ec);
  delete op;
}

void endpoint::wake() {
  if (cq_can_wait_) return;  // that thread sleeps in poll() on the CQ's descriptor, not in a nap
  {
    const std::lock_guard lock(nap_mutex_);
    woken_ = true;
  }
  nap_.notify_one();
}

void endpoint::progress_loop() {
  // Read the CQ while there is work; otherwise sleep. With a wait object the sleep is on its file
  // descriptor (fi_trywait first, so that no completion is missed), short while operations are
  // outstanding and long when idle. Without one: naps of 50-800 µs while operations are
  // outstanding or a remote_access_window is open (the peer's RMAs need our progress), 1-10 ms
  // when idle; a post or a window that opens ends the nap at once (wake()), so that the first
  // bytes of a request do not wait out an idle nap (measured on an H200 host over shm: a 1 MiB
  // GET took either ~0.9 or ~1.6 ms, by where the client's thread was in its 1 ms nap).
  // Naps as asked: Linux lets a thread's timed sleeps run up to its timer slack (50 µs by
  // default) late, which would double the shortest nap while a peer waits on our progress.
  static_cast<void>(::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL));
  std::array<fi_cq_entry, 32> entries{};
  fid_cq* cq = cq_.native_handle();
  int idle_polls = 0;
  // A completion may let go of the last owner of this endpoint (a transfer's state holding it):
  // the completions are finished holding it here, and when that hold was the last, the endpoint
  // is gone (destroyed on this thread, which close() handed to another to join) and the loop ends at once.
  const std::weak_ptr<endpoint> weak = weak_from_this();
  const auto finish_held = [&](auto&& finish_all) {
    const std::shared_ptr<endpoint> held = weak.lock();
    if (held == nullptr) return false;  // being destroyed on another thread, which waits for this one
    finish_all();
    return true;
  };
  while (!stopping_.load(std::memory_order_relaxed)) {
    const bool busy = in_flight_.load(std::memory_order_relaxed) != 0;
    const bool attentive = busy || remote_access_.load(std::memory_order_relaxed) != 0;
    if (cq_can_wait_ && idle_polls > 64) {
      fid* fids[] = {&cq->fid};
      if (fi_trywait(fabric_.native_handle(), fids, 1) == FI_SUCCESS) {
        pollfd wait{wait_fd_, POLLIN, 0};
        static_cast<void>(::poll(&wait, 1, busy ? 1 : 50));
      }
    } else if (!cq_can_wait_ && idle_polls > 256) {
      // 50 µs after activity, doubling every 256 empty polls up to 800 µs; 1-10 ms when idle.
      const int doublings = std::min(4, (idle_polls - 256) / 256);
      const auto nap = attentive ? std::chrono::microseconds(50) * (1 << doublings)
                                 : std::chrono::microseconds(idle_polls > 4096 ? 10000 : 1000);
      std::unique_lock lock(nap_mutex_);
      if (nap_.wait_for(lock, nap, [this] { return woken_; })) idle_polls = 0;  // poll at once, and keep at it
      woken_ = false;
    }
    const ssize_t n = fi_cq_read(cq, entries.data(), entries.size());
    if (n > 0) {
      idle_polls = 0;
      const bool held = finish_held([&] {
        for (ssize_t i = 0; i < n; ++i) {
          finish(static_cast<operation*>(entries[static_cast<std::size_t>(i)].op_context), {});
        }
      });
      if (!held || weak.expired()) return;  // nothing of `this` is touched after it is gone
      continue;
    }
    if (n == -FI_EAVAIL) {
      idle_polls = 0;
      fi_cq_err_entry error{};
      if (fi_cq_readerr(cq, &error, 0) > 0 && error.op_context != nullptr) {
        const bool held = finish_held([&] {
          finish(static_cast<operation*>(error.op_context), make_fabric_error(-static_cast<long>(error.err)));
        });
        if (!held || weak.expired()) return;
      }
      continue;
    }
    if (idle_polls < 1'000'000) ++idle_polls;
  }
}

}  // namespace sluice::fabric
