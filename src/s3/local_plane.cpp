// SPDX-License-Identifier: Apache-2.0
// Same-host grants, the server's side (include/sluice/s3/local_plane.hpp): the sessions on the
// Unix-domain SOCK_SEQPACKET socket (their packets: src/s3/grant_codec.hpp; the socket and the
// handshake's proofs: src/s3/grant_socket.hpp), the grant table, and the transfers (a memfd
// grant's copy: src/s3/grant_copy.hpp, posted on the server's RDMA pool). The client's side is
// src/s3/local_client_plane.cpp.
#include <sluice/s3/local_plane.hpp>

#include <sluice/s3/error.hpp>

#include "grant_codec.hpp"
#include "grant_copy.hpp"
#include "grant_socket.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/system_executor.hpp>

#include <openssl/crypto.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace sluice::s3 {

namespace {

using steady = std::chrono::steady_clock;
using namespace grant_wire;
using detail::grant_message;
using message_type = detail::grant_message_type;

}  // namespace

// -- server ----------------------------------------------------------------------------------

namespace {

/// The memfd bytes mapped at once, all together and per local uid. Grants hold it: a transfer
/// in flight may outlive the plane's state, and its grant gives its bytes back when it ends.
struct mapped_budget {
  std::mutex mutex;
  std::uint64_t total = 0;
  std::map<uid_t, std::uint64_t> per_user;

  /// Reserves `n` bytes for `uid` when both budgets allow it.
  bool take(uid_t uid, std::uint64_t n, std::uint64_t max_total, std::uint64_t max_user) {
    const std::lock_guard lock(mutex);
    std::uint64_t& mine = per_user[uid];
    if (n > max_total - std::min(total, max_total) || n > max_user - std::min(mine, max_user)) {
      if (mine == 0) per_user.erase(uid);
      return false;
    }
    total += n;
    mine += n;
    return true;
  }
  void give_back(uid_t uid, std::uint64_t n) {
    const std::lock_guard lock(mutex);
    total -= n;
    const auto it = per_user.find(uid);
    if (it != per_user.end() && (it->second -= n) == 0) per_user.erase(it);
  }
};

/// One granted buffer.
struct grant_entry {
  enum class kind { memfd, device } what = kind::memfd;
  std::string user;
  std::uint64_t session = 0;
  std::uint64_t size = 0;
  std::byte* map = nullptr;  // memfd: the server's own mapping of the client's file
  std::shared_ptr<device_grant> device;
  std::shared_ptr<mapped_budget> budget;  // memfd: charged `size` for `uid`
  uid_t uid = 0;
  grant_entry() = default;
  grant_entry(const grant_entry&) = delete;
  grant_entry& operator=(const grant_entry&) = delete;
  ~grant_entry() {
    if (map != nullptr) ::munmap(map, size);
    if (budget) budget->give_back(uid, size);
  }
};

/// A connection: a handshake until the client proved its key, then a session.
struct session {
  explicit session(boost::asio::posix::stream_descriptor s) : socket(std::move(s)) {}
  std::uint64_t id = 0;
  boost::asio::posix::stream_descriptor socket;  // owns the connection's descriptor
  uid_t uid = 0;                                 // the peer's, from SO_PEERCRED
  steady::time_point accepted;                   // handshakes: the oldest is evicted first
  steady::time_point deadline;                   // of the handshake
  steady::time_point last_active;                // sessions: the last message
  bool authenticated = false;
  const credentials* user = nullptr;  // set by the hello
  nonce client_nonce{};
  nonce server_nonce{};
  std::size_t grants = 0;
};

/// Connections of one local uid.
struct uid_slots {
  std::size_t handshakes = 0;
  std::size_t sessions = 0;
};

}  // namespace

/// The sessions run on an io_context of the plane's own, run by one thread (the plane's io
/// thread): readiness waits on the listener and on each connection, one timer for the earliest
/// handshake or idle deadline. Only that thread changes `sessions`; other threads read the
/// grants and the counts under `mutex`.
struct local_server_plane::state {
  local_server_plane_config config;
  boost::asio::io_context io{1};
  boost::asio::posix::stream_descriptor listener{io};
  boost::asio::steady_timer deadlines{io};
  std::optional<steady::time_point> armed;  // the deadline `deadlines` waits for
  std::thread loop;
  std::atomic<bool> closed{false};
  std::shared_ptr<mapped_budget> budget = std::make_shared<mapped_budget>();
  mutable std::mutex mutex;  // grants; sessions and the counts below (the io thread changes them)
  std::map<grant_id, std::shared_ptr<const grant_entry>> grants;
  std::map<std::uint64_t, session> sessions;  // by id (a descriptor's number comes back); handshakes too
  std::map<uid_t, uid_slots> slots;
  std::size_t handshakes = 0, authenticated = 0;
  std::uint64_t next_session = 1;

  void wait_for_connections();
  void wait_for_message(std::uint64_t id);
  void arm_deadlines();
  void drop_late();
  void stop();
  void accept_all();
  void make_handshake_room(uid_t uid);
  void evict_handshake_of(uid_t uid);
  bool serve(session& s);  // false: the session was dropped
  void drop(std::uint64_t id);
  [[nodiscard]] bool late(const session& s, steady::time_point now) const;
  std::vector<std::byte> handle(session& s, std::span<const std::byte> packet, unique_fd& fd);
  std::vector<std::byte> register_memfd(session& s, std::uint64_t size, unique_fd fd);
  std::vector<std::byte> register_device(session& s, std::span<const std::byte> description);
  std::vector<std::byte> granted(session& s, std::shared_ptr<grant_entry> entry);

  /// The grant a token names, if `who` may use it for `kind`; nullptr otherwise.
  std::shared_ptr<const grant_entry> find(const rdma_requester& who, const rdma_token& token, grant_entry::kind kind,
                                          std::uint64_t length) const;
};

std::optional<config_error> local_server_plane_config::validate() const {
  if (socket_path.empty()) return config_error{"grant_socket", "must be set"};
  if (socket_path.native().size() >= sizeof(sockaddr_un::sun_path)) {
    return config_error{"grant_socket", "longer than a Unix socket path may be (107 bytes)"};
  }
  if (private_directory && !socket_path.has_parent_path()) {
    return config_error{"grant_socket", "a private directory needs a path with a directory"};
  }
  if (max_sessions == 0 || max_sessions_per_user == 0 || max_handshakes == 0 || max_handshakes_per_user == 0 ||
      max_grants_per_session == 0 || copy_threads == 0 || copy_threads > 64) {
    return config_error{"grants",
                        "max_sessions, max_handshakes (and per user), max_grants_per_session and copy_threads (1..64) "
                        "must be positive"};
  }
  if (handshake_timeout.count() <= 0 || idle_timeout.count() <= 0) {
    return config_error{"grants", "handshake_timeout and idle_timeout must be positive"};
  }
  return std::nullopt;
}

std::filesystem::path default_grant_socket(std::uint16_t port, const std::filesystem::path& runtime_dir) {
  const std::filesystem::path dir = runtime_dir.empty()
                                        ? std::filesystem::path("/tmp") / ("sluice-" + std::to_string(::geteuid()))
                                        : runtime_dir / "sluice";
  return dir /
         (port != 0 ? "sluice-" + std::to_string(port) + ".sock" : "sluice-pid" + std::to_string(::getpid()) + ".sock");
}

namespace {

/// Makes `dir` this user's private directory, or says why it is not: created 0700 when missing;
/// otherwise it must be a directory (not a symlink to one) of the effective uid, mode 0700. A
/// directory another local user made first (its name is predictable) is refused, never used.
error_code private_directory(const std::filesystem::path& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return last_errno();
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return last_errno();
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 07777) != 0700) {
    return {EPERM, boost::system::generic_category()};
  }
  return {};
}

}  // namespace

std::shared_ptr<local_server_plane> local_server_plane::open(local_server_plane_config config, error_code& ec) {
  if (config.validate()) {
    ec = sluice::errc::invalid_config;
    return nullptr;
  }
  if (config.private_directory) {
    if ((ec = private_directory(config.socket_path.parent_path()))) return nullptr;
  }
  auto st = std::make_shared<state>();
  st->config = std::move(config);
  unique_fd listener(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (listener.get() < 0) {
    ec = last_errno();
    return nullptr;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string& path = st->config.socket_path.native();
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  // A socket left by a server that died is replaced; a live one (it accepts) is not.
  struct stat existing {};
  if (::lstat(path.c_str(), &existing) == 0 && S_ISSOCK(existing.st_mode)) {
    const unique_fd probe(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      ec = error_code(EADDRINUSE, boost::system::generic_category());
      return nullptr;
    }
    ::unlink(path.c_str());
  }
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::chmod(path.c_str(), 0666) != 0 || ::listen(listener.get(), 128) != 0) {
    ec = last_errno();
    return nullptr;
  }
  st->listener.assign(listener.release());
  st->wait_for_connections();
  st->loop = std::thread([raw = st.get()] { raw->io.run(); });
  std::shared_ptr<local_server_plane> plane(new local_server_plane());
  plane->state_ = std::move(st);
  ec = {};
  return plane;
}

local_server_plane::~local_server_plane() {
  close();
  if (state_->loop.joinable()) state_->loop.join();
}

const std::filesystem::path& local_server_plane::socket_path() const noexcept { return state_->config.socket_path; }

bool local_server_plane::serves(std::string_view provider) const {
  if (state_->closed) return false;
  return provider == memfd_grant_provider || (provider == cuda_ipc_grant_provider && state_->config.device);
}

void local_server_plane::close() noexcept {
  if (state_->closed.exchange(true)) return;
  // The io thread drops every session (and their grants) and runs out of work.
  boost::asio::post(state_->io, [raw = state_.get()] { raw->stop(); });
  if (state_->loop.joinable() && state_->loop.get_id() != std::this_thread::get_id()) state_->loop.join();
  ::unlink(state_->config.socket_path.c_str());
  const std::lock_guard lock(state_->mutex);
  state_->grants.clear();  // transfers in flight hold their entry until they end
}

std::uint64_t local_server_plane::published_min_bytes() const noexcept {
  if (state_->closed || !state_->config.device) return std::numeric_limits<std::uint64_t>::max();
  return state_->config.device->published_min_bytes();
}

void local_server_plane::published(const rdma_source& source) {
  if (!state_->closed && state_->config.device) state_->config.device->published(source);
}

std::size_t local_server_plane::grant_count() const {
  const std::lock_guard lock(state_->mutex);
  return state_->grants.size();
}

std::size_t local_server_plane::session_count() const {
  const std::lock_guard lock(state_->mutex);
  return state_->authenticated;
}

std::size_t local_server_plane::handshake_count() const {
  const std::lock_guard lock(state_->mutex);
  return state_->handshakes;
}

void local_server_plane::state::wait_for_connections() {
  listener.async_wait(boost::asio::posix::descriptor_base::wait_read, [this](const error_code& ec) {
    if (ec || closed) return;
    accept_all();
    arm_deadlines();
    wait_for_connections();
  });
}

void local_server_plane::state::wait_for_message(std::uint64_t id) {
  const auto it = sessions.find(id);
  if (it == sessions.end()) return;
  it->second.socket.async_wait(boost::asio::posix::descriptor_base::wait_read, [this, id](const error_code& ec) {
    // A dropped session's wait ends aborted (its descriptor closed), or finds no session: ids
    // are never reused.
    if (ec || closed) return;
    const auto s = sessions.find(id);
    if (s == sessions.end()) return;
    if (serve(s->second)) wait_for_message(id);
    arm_deadlines();
  });
}

bool local_server_plane::state::late(const session& s, steady::time_point now) const {
  return (!s.authenticated && now >= s.deadline) ||
         (s.authenticated && s.grants == 0 && now >= s.last_active + config.idle_timeout);
}

void local_server_plane::state::arm_deadlines() {
  // Handshakes that do not finish in time, and sessions that hold nothing and say nothing for
  // idle_timeout, are closed: one timer waits for the earliest of them. A deadline that moved
  // later (a session spoke) is found when the timer fires early and looks again.
  auto next = steady::time_point::max();
  for (const auto& [id, s] : sessions) {
    if (!s.authenticated) next = std::min(next, s.deadline);
    if (s.authenticated && s.grants == 0) next = std::min(next, s.last_active + config.idle_timeout);
  }
  if (next == steady::time_point::max() || (armed && *armed <= next)) return;
  armed = next;
  deadlines.expires_at(next);  // aborts the wait for a later deadline
  deadlines.async_wait([this](const error_code& ec) {
    if (ec || closed) return;
    armed.reset();
    drop_late();
    arm_deadlines();
  });
}

void local_server_plane::state::drop_late() {
  const auto now = steady::now();
  std::vector<std::uint64_t> ids;
  for (const auto& [id, s] : sessions) {
    if (late(s, now)) ids.push_back(id);
  }
  for (const std::uint64_t id : ids) {
    const auto it = sessions.find(id);
    if (it == sessions.end()) continue;
    // A message that came in time but is not read yet is served first: a handshake that spoke
    // before its deadline is not timed out for the order in which the io thread saw the two.
    pollfd p{it->second.socket.native_handle(), POLLIN, 0};
    if (::poll(&p, 1, 0) == 1 && !serve(it->second)) continue;
    const auto again = sessions.find(id);
    if (again != sessions.end() && late(again->second, now)) drop(id);
  }
}

void local_server_plane::state::stop() {
  error_code ignored;
  listener.close(ignored);
  deadlines.cancel();
  std::vector<std::uint64_t> all;
  for (const auto& [id, s] : sessions) all.push_back(id);
  for (const std::uint64_t id : all) drop(id);
}

void local_server_plane::state::accept_all() {
  // A bounded batch per turn, so that a flood of connects cannot keep the io thread from the
  // sessions' messages; the rest wait in the listen backlog for the next turn.
  for (int i = 0; i < 64; ++i) {
    unique_fd fd(::accept4(listener.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (fd.get() < 0) return;
    ucred peer{};
    socklen_t length = sizeof peer;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 || length != sizeof peer) continue;
    make_handshake_room(peer.uid);
    session s(boost::asio::posix::stream_descriptor(io, fd.release()));
    s.id = next_session++;
    s.uid = peer.uid;
    s.accepted = steady::now();
    s.deadline = s.accepted + config.handshake_timeout;
    s.last_active = s.accepted;
    const std::uint64_t id = s.id;
    session* added = nullptr;
    {
      const std::lock_guard lock(mutex);
      added = &sessions.emplace(id, std::move(s)).first->second;
      ++handshakes;
      ++slots[peer.uid].handshakes;
    }
    // A client sends its hello right after connect: read it now, so that the connections
    // accepted after it in this batch find it speaking, not silent (silent ones go first).
    if (serve(*added)) wait_for_message(id);
  }
}

void local_server_plane::state::make_handshake_room(uid_t uid) {
  // A local user past its handshake slots loses its own oldest: connections that never speak
  // cost their owner only. A full table loses one of the user that holds the most.
  if (const auto it = slots.find(uid); it != slots.end() && it->second.handshakes >= config.max_handshakes_per_user) {
    evict_handshake_of(uid);
  }
  if (handshakes >= config.max_handshakes) {
    const auto most = std::max_element(slots.begin(), slots.end(), [](const auto& a, const auto& b) {
      return a.second.handshakes < b.second.handshakes;
    });
    if (most != slots.end()) evict_handshake_of(most->first);
  }
}

void local_server_plane::state::evict_handshake_of(uid_t uid) {
  // The oldest that has not said hello, else the oldest: a client that answers at once keeps
  // its place against a flood of silent connections of its own uid.
  const auto is_silent = [](session& s) {
    if (s.user != nullptr) return false;
    pollfd p{s.socket.native_handle(), POLLIN, 0};  // a hello waiting to be read counts as speaking
    return ::poll(&p, 1, 0) == 0;
  };
  session* victim = nullptr;
  bool victim_silent = false;
  for (auto& [id, s] : sessions) {
    if (s.authenticated || s.uid != uid) continue;
    const bool silent = is_silent(s);
    if (victim == nullptr || (silent && !victim_silent) || (silent == victim_silent && s.accepted < victim->accepted)) {
      victim = &s;
      victim_silent = silent;
    }
  }
  if (victim != nullptr) drop(victim->id);
}

void local_server_plane::state::drop(std::uint64_t id) {
  const std::lock_guard lock(mutex);
  const auto it = sessions.find(id);
  if (it == sessions.end()) return;
  const session& s = it->second;
  // The session's grants end with it: a client that exited (or was killed) leaves nothing mapped
  // once its transfers in flight finish.
  std::erase_if(grants, [id](const auto& g) { return g.second->session == id; });
  const auto owner = slots.find(s.uid);
  if (s.authenticated) {
    --authenticated;
    if (owner != slots.end()) --owner->second.sessions;
  } else {
    --handshakes;
    if (owner != slots.end()) --owner->second.handshakes;
  }
  if (owner != slots.end() && owner->second.handshakes == 0 && owner->second.sessions == 0) slots.erase(owner);
  sessions.erase(it);  // closes the descriptor; its pending wait ends aborted
}

bool local_server_plane::state::serve(session& s) {
  std::vector<std::byte> packet;
  unique_fd fd;
  const int socket = s.socket.native_handle();
  const error_code ec = receive_packet(socket, packet, fd);
  if (ec.value() == EAGAIN || ec.value() == EINTR) return true;
  if (ec || packet.empty() || packet.size() > max_message) {
    if (!packet.empty() && !ec) {
      [[maybe_unused]] auto sent = send_packet(socket, error_message(EMSGSIZE, "message too long"));
    }
    drop(s.id);
    return false;
  }
  s.last_active = steady::now();
  const bool was_authenticated = s.authenticated;
  const std::vector<std::byte> answer = handle(s, packet, fd);
  if (answer.empty()) return true;  // release: no answer
  // A handshake's refusal ends the connection (its slot goes to the next client).
  const bool fatal = static_cast<message_type>(std::to_integer<std::uint8_t>(answer.front())) == message_type::error &&
                     !was_authenticated;
  if (send_packet(socket, answer) || fatal) {
    drop(s.id);
    return false;
  }
  return true;
}

std::vector<std::byte> local_server_plane::state::handle(session& s, std::span<const std::byte> packet, unique_fd& fd) {
  const std::optional<grant_message> m = detail::decode_grant_message(packet);
  if (!m) return error_message(EPROTO, "malformed message");
  if (fd.get() >= 0 && (m->type != message_type::memfd || !s.authenticated)) {
    return error_message(EPROTO, "unexpected descriptor");
  }
  if (!s.authenticated) {
    if (m->type == message_type::hello && s.user == nullptr) {
      if (m->version != protocol_version) return error_message(EPROTO, "unknown protocol version");
      const auto user = std::find_if(config.users.begin(), config.users.end(),
                                     [&](const credentials& c) { return c.access_key_id == m->access_key_id; });
      if (user == config.users.end()) return error_message(EACCES, "unknown access key");
      s.user = &*user;
      s.client_nonce = m->nonce;
      s.server_nonce = random_bytes<32>();
      grant_message challenge;
      challenge.type = message_type::challenge;
      challenge.nonce = s.server_nonce;
      challenge.proof = proof(server_label, *s.user, s.client_nonce, s.server_nonce);
      return detail::encode_grant_message(challenge);
    }
    if (m->type == message_type::auth && s.user != nullptr) {
      const nonce want = proof(client_label, *s.user, s.client_nonce, s.server_nonce);
      if (CRYPTO_memcmp(m->proof.data(), want.data(), want.size()) != 0) return error_message(EACCES, "wrong proof");
      // Only now, with the key proven, does the connection take a session slot.
      const std::lock_guard lock(mutex);
      uid_slots& mine = slots[s.uid];
      if (authenticated >= config.max_sessions) return error_message(EUSERS, "too many grant sessions on this server");
      if (mine.sessions >= config.max_sessions_per_user) {
        return error_message(EUSERS, "too many grant sessions of this local user");
      }
      --handshakes;
      --mine.handshakes;
      ++authenticated;
      ++mine.sessions;
      s.authenticated = true;
      grant_message welcome;
      welcome.type = message_type::welcome;
      return detail::encode_grant_message(welcome);
    }
    return error_message(EPROTO, "handshake first");
  }
  switch (m->type) {
    case message_type::memfd:
      if (fd.get() < 0) return error_message(EPROTO, "a memfd registration without a descriptor");
      return register_memfd(s, m->size, std::move(fd));
    case message_type::device: return register_device(s, m->description);
    case message_type::release: {
      const std::lock_guard lock(mutex);
      const auto it = grants.find(m->grant);
      if (it != grants.end() && it->second->session == s.id) {
        grants.erase(it);
        --s.grants;
      }
      return {};
    }
    default: return error_message(EPROTO, "unexpected message");
  }
}

std::vector<std::byte> local_server_plane::state::register_memfd(session& s, std::uint64_t size, unique_fd fd) {
  if (s.grants >= config.max_grants_per_session) return error_message(EMFILE, "too many grants in this session");
  // Only a memfd sealed against shrinking: the server writes into its mapping, and a file the
  // client could truncate would fault (SIGBUS) in the server.
  const int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) return error_message(EINVAL, "not a memfd sealed against shrinking");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return error_message(EINVAL, "not a regular memory file");
  if (size == 0 || static_cast<std::uint64_t>(st.st_size) < size) return error_message(EINVAL, "size beyond the file");
  if (size > std::numeric_limits<std::size_t>::max() / 2) return error_message(EINVAL, "size too large");
  // The mapped size is charged whether or not the client wrote its pages: a transfer may touch
  // any of them.
  if (!budget->take(s.uid, size, config.max_mapped_bytes, config.max_mapped_bytes_per_user)) {
    return error_message(ENOMEM, "the server maps too much of this user's or all users' memory already");
  }
  // No MAP_POPULATE: that would allocate every page of a sparse file in the server (4 GiB the
  // client never wrote) and hold this thread, which serves every session, while it does. A
  // transfer faults in the pages it moves, and only those.
  void* p = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) {
    const auto err = static_cast<std::uint32_t>(errno);
    budget->give_back(s.uid, size);
    return error_message(err, "mmap failed");
  }
  auto entry = std::make_shared<grant_entry>();
  entry->what = grant_entry::kind::memfd;
  entry->map = static_cast<std::byte*>(p);
  entry->size = size;
  entry->budget = budget;
  entry->uid = s.uid;
  return granted(s, std::move(entry));
}

std::vector<std::byte> local_server_plane::state::register_device(session& s, std::span<const std::byte> description) {
  if (s.grants >= config.max_grants_per_session) return error_message(EMFILE, "too many grants in this session");
  if (!config.device) return error_message(ENOTSUP, "this server opens no device memory");
  error_code ec;
  std::shared_ptr<device_grant> opened;
  try {
    opened = config.device->open(description, ec);
  } catch (const std::exception&) {
    ec = sluice::errc::invalid_argument;
  }
  if (ec || !opened) return error_message(ENOTSUP, ec ? ec.message() : "not opened");
  auto entry = std::make_shared<grant_entry>();
  entry->what = grant_entry::kind::device;
  entry->size = opened->size();
  entry->device = std::move(opened);
  return granted(s, std::move(entry));
}

std::vector<std::byte> local_server_plane::state::granted(session& s, std::shared_ptr<grant_entry> entry) {
  entry->user = s.user->access_key_id;
  entry->session = s.id;
  grant_message answer;
  answer.type = message_type::granted;
  answer.grant = random_bytes<16>();
  answer.size = entry->size;
  {
    const std::lock_guard lock(mutex);
    grants.emplace(answer.grant, std::move(entry));
    ++s.grants;
  }
  return detail::encode_grant_message(answer);
}

std::shared_ptr<const grant_entry> local_server_plane::state::find(const rdma_requester& who, const rdma_token& token,
                                                                   grant_entry::kind kind, std::uint64_t length) const {
  if (token.endpoint.size() != sizeof(grant_id) || token.virtual_addresses) return nullptr;
  grant_id id{};
  std::copy(token.endpoint.begin(), token.endpoint.end(), id.begin());
  std::shared_ptr<const grant_entry> entry;
  {
    const std::lock_guard lock(mutex);
    const auto it = grants.find(id);
    if (it == grants.end()) return nullptr;
    entry = it->second;
  }
  // Another user's grant is refused as if it did not exist (the id is as secret as the memory).
  if (entry->what != kind || entry->user != who.access_key_id) return nullptr;
  std::uint64_t covered = 0;
  for (const auto& seg : token.segments) {
    if (seg.address > entry->size || seg.length > entry->size - seg.address) return nullptr;
    covered += seg.length;
    if (covered >= length) break;
  }
  return covered >= length ? entry : nullptr;
}

error_code local_server_plane::write_from(const rdma_requester& who, const rdma_token& token,
                                          const rdma_source& source) {
  // The copy's workers run on Asio's system pool here (the server passes its RDMA pool).
  std::promise<error_code> result;
  auto moved = result.get_future();
  async_write_from(who, token, source, boost::asio::system_executor(),
                   [&result](error_code ec) { result.set_value(ec); });
  return moved.get();
}

namespace {

/// A device grant's write, one token segment after the other (each an async_write of the grant).
struct device_write : std::enable_shared_from_this<device_write> {
  std::shared_ptr<const grant_entry> entry;
  std::vector<rdma_segment> segments;
  rdma_source source;
  boost::asio::any_io_executor executor;
  std::function<void(error_code)> done;
  std::size_t next = 0;
  std::uint64_t written = 0;

  void step() {
    if (written == source.length || next == segments.size()) return done({});
    const rdma_segment& seg = segments[next++];
    rdma_source piece = source;
    piece.offset = source.offset + written;
    piece.length = std::min(seg.length, source.length - written);
    entry->device->async_write(
        seg.address, piece, executor, [self = shared_from_this(), n = piece.length](error_code ec) {
          if (ec) {
            return self->done(
                self->written == 0 && ec == errc::rdma_not_supported ? ec : error_code(errc::rdma_transfer_failed));
          }
          self->written += n;
          self->step();
        });
  }
};

}  // namespace

void local_server_plane::async_write_from(const rdma_requester& who, const rdma_token& token, const rdma_source& source,
                                          const boost::asio::any_io_executor& executor,
                                          std::function<void(error_code)> done) {
  const auto finish_now = [&](error_code ec) {
    boost::asio::post(executor, [done = std::move(done), ec] { done(ec); });
  };
  if (state_->closed) return finish_now(errc::rdma_not_supported);
  if (token.provider == cuda_ipc_grant_provider) {
    // The opener's transfer goes on from its chunks' registrations and its streams' callbacks:
    // no thread waits for it (src/cuda/grant.cpp).
    auto op = std::make_shared<device_write>();
    op->entry = state_->find(who, token, grant_entry::kind::device, source.length);
    if (!op->entry) return finish_now(errc::invalid_rdma_token);
    op->segments = token.segments;
    op->source = source;
    op->executor = executor;
    op->done = std::move(done);
    op->step();
    return;
  }
  auto entry = state_->find(who, token, grant_entry::kind::memfd, source.length);
  if (!entry) return finish_now(errc::invalid_rdma_token);
  // Each segment in up to copy_threads pieces of at least 4 MiB, copied by up to copy_threads
  // workers posted on `executor`; the transfer holds the grant's mapping until its last piece.
  const std::size_t workers = state_->config.copy_threads;
  std::vector<grant_copy::piece> pieces;
  std::uint64_t planned = 0;
  for (const auto& seg : token.segments) {
    if (planned == source.length) break;
    const std::uint64_t n = std::min(seg.length, source.length - planned);
    grant_copy::split(pieces, entry->map + seg.address, source.offset + planned, static_cast<std::size_t>(n), workers);
    planned += n;
  }
  grant_copy::async_copy(
      source, std::move(pieces), workers, executor, std::move(entry),
      [done = std::move(done)](bool ok) mutable { done(ok ? error_code{} : error_code(errc::rdma_transfer_failed)); });
}

error_code local_server_plane::read(const rdma_requester& who, const rdma_token& token, std::uint64_t length,
                                    const rdma_sink& sink) {
  if (state_->closed) return errc::rdma_not_supported;
  const bool device = token.provider == cuda_ipc_grant_provider;
  const auto entry = state_->find(who, token, device ? grant_entry::kind::device : grant_entry::kind::memfd, length);
  if (!entry) return errc::invalid_rdma_token;
  // The client's mapping is shared: the client may change it at any moment. Each piece is read
  // from it once, into memory of the server's own, and the sink (which hashes, then writes) sees
  // only that copy: what is stored is exactly what was hashed. (A device grant's read copies
  // into the opener's own staging buffers already.)
  constexpr std::uint64_t piece = 4 << 20;
  std::unique_ptr<std::byte[]> copy;
  if (!device && length > 0) copy.reset(new std::byte[static_cast<std::size_t>(std::min(piece, length))]);
  std::uint64_t done = 0;
  for (const auto& seg : token.segments) {
    if (done == length) break;
    const std::uint64_t n = std::min(seg.length, length - done);
    if (device) {
      if (const error_code ec = entry->device->read(seg.address, n, sink)) return ec;
    } else {
      for (std::uint64_t at = 0; at < n; at += piece) {
        const auto chunk = static_cast<std::size_t>(std::min(piece, n - at));
        std::memcpy(copy.get(), entry->map + seg.address + at, chunk);
        if (const error_code ec = sink(std::span<const std::byte>(copy.get(), chunk))) return ec;
      }
    }
    done += n;
  }
  return {};
}

}  // namespace sluice::s3
