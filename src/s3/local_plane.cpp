// Same-host grants (include/sluice/s3/local_plane.hpp): the session protocol over a Unix-domain
// SOCK_SEQPACKET socket, the server's grant table and copies, and the client's registrations.
//
// Messages: detail::grant_message_type in the header, one per packet, encoded and decoded by
// detail::encode_grant_message / decode_grant_message (sans-I/O; fuzz/grant_packet.cpp drives them).
// proof = HMAC-SHA256(secret access key, label | u16 n | access key id | client nonce | server
// nonce), label "sluice-grant/1 server" or "sluice-grant/1 client": each end shows it holds the
// secret without sending it, and the nonces make every session's proofs fresh.
#include <sluice/s3/local_plane.hpp>

#include <sluice/s3/error.hpp>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace sluice::s3 {

namespace {

using steady = std::chrono::steady_clock;
using grant_id = std::array<std::byte, 16>;
using nonce = std::array<std::byte, 32>;

using detail::grant_message;
using message_type = detail::grant_message_type;
constexpr std::uint8_t protocol_version = 1;
constexpr std::size_t max_message = detail::max_grant_packet;

error_code last_errno() { return {errno, boost::system::generic_category()}; }

/// A file descriptor, closed on destruction.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_ = -1;
};

/// Appends and reads the little-endian fields of a message.
struct writer {
  std::vector<std::byte> out;
  void u8(std::uint8_t v) { out.push_back(static_cast<std::byte>(v)); }
  void le(std::uint64_t v, unsigned n) {
    for (unsigned i = 0; i < n; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFFu));
  }
  void bytes(std::span<const std::byte> b) { out.insert(out.end(), b.begin(), b.end()); }
  void text(std::string_view s) { bytes(std::as_bytes(std::span(s.data(), s.size()))); }
};

struct reader {
  std::span<const std::byte> in;
  std::size_t at = 0;
  bool u8(std::uint8_t& v) {
    if (at + 1 > in.size()) return false;
    v = std::to_integer<std::uint8_t>(in[at++]);
    return true;
  }
  bool le(std::uint64_t& v, unsigned n) {
    if (n > in.size() - at) return false;
    v = 0;
    for (unsigned i = 0; i < n; ++i) v |= std::to_integer<std::uint64_t>(in[at + i]) << (8 * i);
    at += n;
    return true;
  }
  bool bytes(std::size_t n, std::span<const std::byte>& v) {
    if (n > in.size() - at) return false;
    v = in.subspan(at, n);
    at += n;
    return true;
  }
  template <std::size_t N>
  bool array(std::array<std::byte, N>& v) {
    std::span<const std::byte> b;
    if (!bytes(N, b)) return false;
    std::copy(b.begin(), b.end(), v.begin());
    return true;
  }
  [[nodiscard]] bool done() const { return at == in.size(); }
};

template <std::size_t N>
std::array<std::byte, N> random_bytes() {
  std::array<std::byte, N> out{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(N)) != 1) {
    throw std::runtime_error("sluice: RAND_bytes failed");  // no entropy: nothing safe to hand out
  }
  return out;
}

nonce proof(std::string_view label, const credentials& user, const nonce& client, const nonce& server) {
  writer w;
  w.text(label);
  w.le(user.access_key_id.size(), 2);
  w.text(user.access_key_id);
  w.bytes(client);
  w.bytes(server);
  nonce out{};
  unsigned int n = 0;
  HMAC(EVP_sha256(), user.secret_access_key.data(), static_cast<int>(user.secret_access_key.size()),
       reinterpret_cast<const unsigned char*>(w.out.data()), w.out.size(), reinterpret_cast<unsigned char*>(out.data()),
       &n);
  return out;
}

constexpr std::string_view server_label = "sluice-grant/1 server";
constexpr std::string_view client_label = "sluice-grant/1 client";

/// Sends one packet, with `fd` attached when it is not -1.
error_code send_packet(int socket, std::span<const std::byte> data, int fd = -1) {
  iovec iov{const_cast<std::byte*>(data.data()), data.size()};  // sendmsg's iovec is not const
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> control{};
  if (fd >= 0) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  const ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
  if (n < 0) return last_errno();
  if (static_cast<std::size_t>(n) != data.size()) return sluice::errc::protocol_violation;
  return {};
}

/// Receives one packet into `buffer` (resized to its length) and at most one descriptor, which
/// it owns in `fd`. Any other control data, or more descriptors, is a protocol violation (the
/// descriptors that came are closed). 0 bytes: the peer closed.
error_code receive_packet(int socket, std::vector<std::byte>& buffer, unique_fd& fd) {
  buffer.resize(max_message + 1);
  iovec iov{buffer.data(), buffer.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * 4)> control{};
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  const ssize_t n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n < 0) return last_errno();
  error_code problem;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int received = -1;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof received);
        if (fd.get() < 0 && i == 0) {
          fd = unique_fd(received);
        } else {
          ::close(received);
          problem = sluice::errc::protocol_violation;
        }
      }
    } else {
      problem = sluice::errc::protocol_violation;
    }
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) problem = sluice::errc::protocol_violation;
  buffer.resize(static_cast<std::size_t>(n));
  return problem;
}

std::vector<std::byte> error_message(std::uint32_t code, std::string_view text) {
  grant_message m;
  m.type = message_type::error;
  m.code = code;
  m.text = std::string(text.substr(0, 200));
  return detail::encode_grant_message(m);
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

/// Fills the page tables of [to, to + n) of a granted mapping before a copy writes all of it:
/// one call instead of a write fault per 4 KiB page. Only the pages the transfer writes anyway
/// (registration maps a grant without populating any). Best effort: older kernels say EINVAL.
void prepare_for_write(std::byte* to, std::size_t n) {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  // The page that holds `to` (a mapping starts on a page) up to the last whole page of the range.
  std::byte* const begin = to - (reinterpret_cast<std::uintptr_t>(to) & (page - 1));
  std::byte* const end = (to + n) - (reinterpret_cast<std::uintptr_t>(to + n) & (page - 1));
  if (end > begin) ::madvise(begin, static_cast<std::size_t>(end - begin), MADV_POPULATE_WRITE);
}

/// memcpy from a mapping the server has just made (the store maps the object per request): its
/// page tables are filled in one call first, which costs far less than a fault per 4 KiB page.
void copy_from_mapping(std::byte* to, const std::byte* from, std::size_t n) {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t lead = reinterpret_cast<std::uintptr_t>(from) & (page - 1);
  // Best effort: older kernels say EINVAL and the copy faults the pages in as before.
  ::madvise(const_cast<std::byte*>(from - lead), n + lead, MADV_POPULATE_READ);  // madvise takes void*
  std::memcpy(to, from, n);
}

/// Reads `n` bytes of `file` at `offset` into `to` (the kernel copies from its page cache: no page
/// table of ours is filled for the source). False on a read error or a short file.
bool read_file(int file, std::uint64_t offset, std::byte* to, std::size_t n) {
  while (n > 0) {
    const ssize_t got = ::pread(file, to, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    to += got;
    n -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
  return true;
}

/// Copies `n` bytes of `source` from `at` (its range's offset) to `to`, with up to `threads`
/// threads (pieces of at least 4 MiB): pread from the store's file when it has one, else memcpy
/// from the mapping. False when a read failed.
bool parallel_copy(std::byte* to, const rdma_source& source, std::uint64_t at, std::size_t n, std::size_t threads) {
  const auto piece = [&source, at, to](std::size_t from, std::size_t len) {
    prepare_for_write(to + from, len);
    if (source.file >= 0) return read_file(source.file, source.file_offset + at + from, to + from, len);
    copy_from_mapping(to + from, source.mapping.bytes() + at + from, len);
    return true;
  };
  constexpr std::size_t min_piece = 4 << 20;
  const std::size_t pieces = std::clamp<std::size_t>(n / min_piece, 1, std::max<std::size_t>(threads, 1));
  if (pieces == 1) return piece(0, n);
  const std::size_t step = (n / pieces + 4095) & ~std::size_t{4095};
  std::atomic<bool> ok{true};
  {
    std::vector<std::jthread> workers;
    for (std::size_t from = step; from < n; from += step) {
      workers.emplace_back([&, from] {
        if (!piece(from, std::min(step, n - from))) ok = false;
      });
    }
    if (!piece(0, std::min(step, n))) ok = false;
  }
  return ok;
}

}  // namespace

// -- the session protocol's packets (sans-I/O) ----------------------------------------------

namespace detail {

std::optional<grant_message> decode_grant_message(std::span<const std::byte> packet) {
  if (packet.empty() || packet.size() > max_grant_packet) return std::nullopt;
  reader r{packet};
  std::uint8_t type = 0;
  r.u8(type);
  grant_message m;
  m.type = static_cast<grant_message_type>(type);
  bool ok = false;
  switch (m.type) {
    case grant_message_type::hello: {
      std::uint64_t n = 0;
      std::span<const std::byte> key;
      ok = r.u8(m.version) && r.le(n, 2) && n <= max_grant_key_id && r.bytes(static_cast<std::size_t>(n), key) &&
           r.array(m.nonce);
      if (ok) m.access_key_id.assign(reinterpret_cast<const char*>(key.data()), key.size());
      break;
    }
    case grant_message_type::challenge: ok = r.array(m.nonce) && r.array(m.proof); break;
    case grant_message_type::auth: ok = r.array(m.proof); break;
    case grant_message_type::welcome: ok = true; break;
    case grant_message_type::memfd: ok = r.le(m.size, 8); break;
    case grant_message_type::device: {
      std::uint64_t n = 0;
      std::span<const std::byte> description;
      ok = r.le(n, 2) && n <= max_grant_description && r.bytes(static_cast<std::size_t>(n), description);
      if (ok) m.description.assign(description.begin(), description.end());
      break;
    }
    case grant_message_type::granted: ok = r.array(m.grant) && r.le(m.size, 8); break;
    case grant_message_type::release: ok = r.array(m.grant); break;
    case grant_message_type::error: {
      std::uint64_t code = 0;
      std::span<const std::byte> text;
      ok = r.le(code, 4) && r.bytes(packet.size() - r.at, text);
      m.code = static_cast<std::uint32_t>(code);
      if (ok) m.text.assign(reinterpret_cast<const char*>(text.data()), text.size());
      break;
    }
    default: return std::nullopt;
  }
  if (!ok || !r.done()) return std::nullopt;
  return m;
}

std::vector<std::byte> encode_grant_message(const grant_message& m) {
  writer w;
  w.u8(static_cast<std::uint8_t>(m.type));
  switch (m.type) {
    case grant_message_type::hello:
      w.u8(m.version);
      w.le(m.access_key_id.size(), 2);
      w.text(m.access_key_id);
      w.bytes(m.nonce);
      break;
    case grant_message_type::challenge:
      w.bytes(m.nonce);
      w.bytes(m.proof);
      break;
    case grant_message_type::auth: w.bytes(m.proof); break;
    case grant_message_type::welcome: break;
    case grant_message_type::memfd: w.le(m.size, 8); break;
    case grant_message_type::device:
      w.le(m.description.size(), 2);
      w.bytes(m.description);
      break;
    case grant_message_type::granted:
      w.bytes(m.grant);
      w.le(m.size, 8);
      break;
    case grant_message_type::release: w.bytes(m.grant); break;
    case grant_message_type::error:
      w.le(m.code, 4);
      w.text(m.text);
      break;
  }
  return std::move(w.out);
}

}  // namespace detail

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
  std::uint64_t id = 0;
  unique_fd fd;
  uid_t uid = 0;                   // the peer's, from SO_PEERCRED
  steady::time_point accepted;     // handshakes: the oldest is evicted first
  steady::time_point deadline;     // of the handshake
  steady::time_point last_active;  // sessions: the last message
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

struct local_server_plane::state {
  local_server_plane_config config;
  unique_fd listener;
  unique_fd wake_read, wake_write;
  std::thread loop;
  std::atomic<bool> closed{false};
  std::shared_ptr<mapped_budget> budget = std::make_shared<mapped_budget>();
  mutable std::mutex mutex;  // grants; sessions and the counts below (the loop thread changes them)
  std::map<grant_id, std::shared_ptr<const grant_entry>> grants;
  std::map<int, session> sessions;  // by descriptor; handshakes too
  std::map<uid_t, uid_slots> slots;
  std::size_t handshakes = 0, authenticated = 0;
  std::uint64_t next_session = 1;

  void run();
  void accept_all();
  void make_handshake_room(uid_t uid);
  void evict_handshake_of(uid_t uid);
  void serve(session& s);
  void drop(int fd);
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
  st->listener = unique_fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (st->listener.get() < 0) {
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
  if (::bind(st->listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::chmod(path.c_str(), 0666) != 0 || ::listen(st->listener.get(), 128) != 0) {
    ec = last_errno();
    return nullptr;
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    ec = last_errno();
    ::unlink(path.c_str());
    return nullptr;
  }
  st->wake_read = unique_fd(pipe_fds[0]);
  st->wake_write = unique_fd(pipe_fds[1]);
  st->loop = std::thread([raw = st.get()] { raw->run(); });
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
  const char byte = 1;
  [[maybe_unused]] const auto n = ::write(state_->wake_write.get(), &byte, 1);
  if (state_->loop.joinable() && state_->loop.get_id() != std::this_thread::get_id()) state_->loop.join();
  ::unlink(state_->config.socket_path.c_str());
  const std::lock_guard lock(state_->mutex);
  state_->grants.clear();  // transfers in flight hold their entry until they end
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

void local_server_plane::state::run() {
  std::vector<pollfd> fds;
  const auto idle = config.idle_timeout;
  while (!closed) {
    fds.clear();
    fds.push_back({wake_read.get(), POLLIN, 0});
    fds.push_back({listener.get(), POLLIN, 0});
    // Only this thread changes `sessions`: it reads them without the lock.
    auto next_deadline = steady::time_point::max();
    for (const auto& [fd, s] : sessions) {
      fds.push_back({fd, POLLIN, 0});
      if (!s.authenticated) next_deadline = std::min(next_deadline, s.deadline);
      if (s.authenticated && s.grants == 0) next_deadline = std::min(next_deadline, s.last_active + idle);
    }
    int timeout = -1;
    if (next_deadline != steady::time_point::max()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline - steady::now()).count();
      timeout = static_cast<int>(std::clamp<long long>(left + 1, 0, 60'000));
    }
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) break;
    if (closed) break;
    // Messages first, so that a handshake or session whose message came in time is not timed
    // out below; then new connections (which may evict handshakes: their descriptors' numbers
    // may come back for new connections, so the loop looks every descriptor up again).
    for (std::size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const auto it = sessions.find(fds[i].fd);
      if (it != sessions.end()) serve(it->second);
    }
    if ((fds[1].revents & POLLIN) != 0) accept_all();
    // Handshakes that did not finish in time, and sessions that hold nothing and said nothing
    // for idle_timeout, are closed.
    std::vector<int> late;
    const auto now = steady::now();
    for (const auto& [fd, s] : sessions) {
      if ((!s.authenticated && now >= s.deadline) ||
          (s.authenticated && s.grants == 0 && now >= s.last_active + idle)) {
        late.push_back(fd);
      }
    }
    for (const int fd : late) drop(fd);
  }
  std::vector<int> all;
  for (const auto& [fd, s] : sessions) all.push_back(fd);
  for (const int fd : all) drop(fd);
}

void local_server_plane::state::accept_all() {
  // A bounded batch per turn, so that a flood of connects cannot keep the loop from the
  // sessions' messages; the rest wait in the listen backlog for the next turn.
  for (int i = 0; i < 64; ++i) {
    unique_fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (fd.get() < 0) return;
    ucred peer{};
    socklen_t length = sizeof peer;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 || length != sizeof peer) continue;
    make_handshake_room(peer.uid);
    session s;
    s.id = next_session++;
    s.uid = peer.uid;
    s.accepted = steady::now();
    s.deadline = s.accepted + config.handshake_timeout;
    s.last_active = s.accepted;
    const int key = fd.get();
    s.fd = std::move(fd);
    session* added = nullptr;
    {
      const std::lock_guard lock(mutex);
      added = &sessions.emplace(key, std::move(s)).first->second;
      ++handshakes;
      ++slots[peer.uid].handshakes;
    }
    // A client sends its hello right after connect: read it now, so that the connections
    // accepted after it in this batch find it speaking, not silent (silent ones go first).
    serve(*added);
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
  const auto is_silent = [](const session& s) {
    if (s.user != nullptr) return false;
    pollfd p{s.fd.get(), POLLIN, 0};  // a hello waiting to be read counts as speaking
    return ::poll(&p, 1, 0) == 0;
  };
  const session* victim = nullptr;
  bool victim_silent = false;
  for (const auto& [fd, s] : sessions) {
    if (s.authenticated || s.uid != uid) continue;
    const bool silent = is_silent(s);
    if (victim == nullptr || (silent && !victim_silent) || (silent == victim_silent && s.accepted < victim->accepted)) {
      victim = &s;
      victim_silent = silent;
    }
  }
  if (victim != nullptr) drop(victim->fd.get());
}

void local_server_plane::state::drop(int fd) {
  const std::lock_guard lock(mutex);
  const auto it = sessions.find(fd);
  if (it == sessions.end()) return;
  const session& s = it->second;
  const std::uint64_t id = s.id;
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
  sessions.erase(it);
}

void local_server_plane::state::serve(session& s) {
  std::vector<std::byte> packet;
  unique_fd fd;
  const error_code ec = receive_packet(s.fd.get(), packet, fd);
  if (ec.value() == EAGAIN || ec.value() == EINTR) return;
  if (ec || packet.empty() || packet.size() > max_message) {
    if (!packet.empty() && !ec) {
      [[maybe_unused]] auto sent = send_packet(s.fd.get(), error_message(EMSGSIZE, "message too long"));
    }
    drop(s.fd.get());
    return;
  }
  s.last_active = steady::now();
  const bool was_authenticated = s.authenticated;
  const std::vector<std::byte> answer = handle(s, packet, fd);
  if (answer.empty()) return;  // release: no answer
  // A handshake's refusal ends the connection (its slot goes to the next client).
  const bool fatal = static_cast<message_type>(std::to_integer<std::uint8_t>(answer.front())) == message_type::error &&
                     !was_authenticated;
  if (send_packet(s.fd.get(), answer) || fatal) drop(s.fd.get());
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
  if (state_->closed) return errc::rdma_not_supported;
  const bool device = token.provider == cuda_ipc_grant_provider;
  const auto entry =
      state_->find(who, token, device ? grant_entry::kind::device : grant_entry::kind::memfd, source.length);
  if (!entry) return errc::invalid_rdma_token;
  std::uint64_t done = 0;
  for (const auto& seg : token.segments) {
    if (done == source.length) break;
    const std::uint64_t n = std::min(seg.length, source.length - done);
    if (device) {
      rdma_source piece = source;
      piece.offset = source.offset + done;
      piece.length = n;
      if (const error_code ec = entry->device->write(seg.address, piece)) {
        return done == 0 && ec == errc::rdma_not_supported ? ec : error_code(errc::rdma_transfer_failed);
      }
    } else {
      if (!parallel_copy(entry->map + seg.address, source, source.offset + done, static_cast<std::size_t>(n),
                         state_->config.copy_threads)) {
        return errc::rdma_transfer_failed;
      }
    }
    done += n;
  }
  return {};
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

// -- client ----------------------------------------------------------------------------------

namespace {

struct registered {
  grant_id id{};
  std::uint64_t size = 0;
  std::vector<std::byte> description;  // device allocations: what was registered at this base
};

class local_grant final : public rdma_client_plane::grant {
 public:
  explicit local_grant(std::string token) : token_(std::move(token)) {}
  [[nodiscard]] const std::string& token() const noexcept override { return token_; }

 private:
  std::string token_;
};

}  // namespace

struct local_client_plane::state {
  local_client_plane_config config;
  unique_fd socket;
  std::mutex mutex;                                // one exchange at a time; the maps
  std::map<const std::byte*, registered> buffers;  // shared buffers, by base address
  std::map<const std::byte*, registered> devices;  // device allocations, by base address

  /// Connects to the server and runs the handshake: the server proves it holds the user's secret
  /// before this process hands it any memory.
  error_code connect_and_authenticate() {
    socket = unique_fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (socket.get() < 0) return last_errno();
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string& path = config.socket_path.native();
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    // A full listen backlog (a server behind, or another local user's flood of connects) makes
    // connect wait, for the send timeout at most: EAGAIN then, as ETIMEDOUT.
    const timeval bound{static_cast<time_t>(config.timeout.count() / 1000),
                        static_cast<suseconds_t>(config.timeout.count() % 1000 * 1000)};
    if (::setsockopt(socket.get(), SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof bound) != 0) return last_errno();
    if (::connect(socket.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      return errno == EAGAIN ? error_code(ETIMEDOUT, boost::system::generic_category()) : last_errno();
    }
    grant_message hello;
    hello.type = message_type::hello;
    hello.version = protocol_version;
    hello.access_key_id = config.creds.access_key_id;
    hello.nonce = random_bytes<32>();
    error_code ec;
    const auto challenge = send_and_await(detail::encode_grant_message(hello), message_type::challenge, ec);
    if (ec) return ec;
    // The server must prove it holds the secret before we hand it any memory: a process that
    // took the socket's path is not the server.
    const nonce want = proof(server_label, config.creds, hello.nonce, challenge.nonce);
    if (CRYPTO_memcmp(want.data(), challenge.proof.data(), want.size()) != 0) return errc::access_denied;
    grant_message auth;
    auth.type = message_type::auth;
    auth.proof = proof(client_label, config.creds, hello.nonce, challenge.nonce);
    send_and_await(detail::encode_grant_message(auth), message_type::welcome, ec);
    return ec;
  }

  /// Sends `request` (with `fd`) and waits for the answer; answers of type `want` only. A server
  /// closes a session that holds no grant after its idle_timeout: such a session is opened again
  /// once, and the request sent again (the server had not read it).
  grant_message exchange(std::span<const std::byte> request, message_type want, error_code& ec, int fd = -1) {
    grant_message answer = send_and_await(request, want, ec, fd);
    const bool lost = ec.category() == boost::system::generic_category() &&
                      (ec.value() == EPIPE || ec.value() == ECONNRESET || ec.value() == ENOTCONN);
    if (lost && buffers.empty() && devices.empty()) {
      if ((ec = connect_and_authenticate())) return {};
      answer = send_and_await(request, want, ec, fd);
    }
    return answer;
  }

  grant_message send_and_await(std::span<const std::byte> request, message_type want, error_code& ec, int fd = -1) {
    if ((ec = send_packet(socket.get(), request, fd))) return {};
    pollfd p{socket.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(config.timeout.count()));
    if (ready == 0) {
      ec = error_code(ETIMEDOUT, boost::system::generic_category());
      return {};
    }
    std::vector<std::byte> packet;
    unique_fd received;
    if (ready < 0 || (ec = receive_packet(socket.get(), packet, received))) {
      if (!ec) ec = last_errno();
      return {};
    }
    if (packet.empty()) {
      ec = error_code(ECONNRESET, boost::system::generic_category());
      return {};
    }
    std::optional<grant_message> answer = detail::decode_grant_message(packet);
    if (!answer || received.get() >= 0) {
      ec = sluice::errc::protocol_violation;
      return {};
    }
    if (answer->type == message_type::error) {
      const auto code = static_cast<int>(answer->code);
      ec = code == EACCES    ? error_code(errc::access_denied)
           : code == ENOTSUP ? error_code(errc::rdma_not_supported)
                             : error_code(code, boost::system::generic_category());
      return {};
    }
    if (answer->type != want) {
      ec = sluice::errc::protocol_violation;
      return {};
    }
    ec = {};
    return std::move(*answer);
  }
  void release(const grant_id& id) {
    grant_message m;
    m.type = message_type::release;
    m.grant = id;
    [[maybe_unused]] const auto ec = send_packet(socket.get(), detail::encode_grant_message(m));
  }
};

std::shared_ptr<local_client_plane> local_client_plane::open(const local_client_plane_config& config, error_code& ec) {
  const std::string& path = config.socket_path.native();
  if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path) || config.creds.access_key_id.empty() ||
      config.creds.access_key_id.size() > detail::max_grant_key_id) {
    ec = sluice::errc::invalid_config;
    return nullptr;
  }
  auto st = std::make_shared<state>();
  st->config = config;
  if ((ec = st->connect_and_authenticate())) return nullptr;
  std::shared_ptr<local_client_plane> plane(new local_client_plane());
  plane->state_ = std::move(st);
  ec = {};
  return plane;
}

local_client_plane::~local_client_plane() = default;

std::string_view local_client_plane::provider() const noexcept { return memfd_grant_provider; }

void local_client_plane::share(shared_buffer& buffer, error_code& ec) {
  if (buffer.native_handle() < 0) {
    ec = sluice::errc::invalid_argument;
    return;
  }
  grant_message request;
  request.type = message_type::memfd;
  request.size = buffer.size();
  const std::lock_guard lock(state_->mutex);
  const grant_message answer =
      state_->exchange(detail::encode_grant_message(request), message_type::granted, ec, buffer.native_handle());
  if (ec) return;
  if (answer.size != buffer.size()) {
    ec = sluice::errc::protocol_violation;
    return;
  }
  const std::byte* base = buffer.data();
  state_->buffers[base] = registered{answer.grant, answer.size, {}};
  buffer.on_release([weak = std::weak_ptr<state>(state_), base] {
    const auto st = weak.lock();
    if (!st) return;
    const std::lock_guard held(st->mutex);
    const auto it = st->buffers.find(base);
    if (it == st->buffers.end()) return;
    st->release(it->second.id);
    st->buffers.erase(it);
  });
}

void local_client_plane::release_device(const region& memory) {
  const std::lock_guard lock(state_->mutex);
  const auto* at = static_cast<const std::byte*>(memory.data);
  auto it = state_->devices.upper_bound(at);
  if (it == state_->devices.begin()) return;
  --it;
  if (at >= it->first + it->second.size) return;
  state_->release(it->second.id);
  state_->devices.erase(it);
}

std::uint64_t local_client_plane::request_bytes(const region& memory) const noexcept {
  return memory.kind == memory_kind::cuda_device && state_->config.device ? std::numeric_limits<std::uint64_t>::max()
                                                                          : 0;
}

std::unique_ptr<rdma_client_plane::grant> local_client_plane::grant_access(
    const region& memory, rdma_op op, std::chrono::system_clock::time_point expires, error_code& ec) {
  rdma_token token;
  token.op = op;
  token.virtual_addresses = false;
  token.expires = static_cast<std::uint64_t>(
      std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::seconds>(expires.time_since_epoch()).count()));
  const auto* at = static_cast<const std::byte*>(memory.data);
  std::uint64_t offset = 0;
  const registered* reg = nullptr;
  const std::lock_guard lock(state_->mutex);
  if (memory.kind == memory_kind::cuda_device) {
    if (!state_->config.device) {
      ec = sluice::errc::unsupported_memory;
      return nullptr;
    }
    exported_device_memory exported = state_->config.device->export_allocation(memory, ec);
    if (ec) return nullptr;
    if (at < exported.base || memory.size > exported.size ||
        static_cast<std::uint64_t>(at - exported.base) > exported.size - memory.size) {
      ec = sluice::errc::unsupported_memory;
      return nullptr;
    }
    auto found = state_->devices.find(exported.base);
    // A different description at the same base is another allocation that reuses the address.
    if (found != state_->devices.end() && found->second.description != exported.description) {
      state_->release(found->second.id);
      state_->devices.erase(found);
      found = state_->devices.end();
    }
    if (found == state_->devices.end()) {
      if (exported.description.size() > detail::max_grant_description) {
        ec = sluice::errc::unsupported_memory;
        return nullptr;
      }
      grant_message request;
      request.type = message_type::device;
      request.description = exported.description;
      const grant_message answer = state_->exchange(detail::encode_grant_message(request), message_type::granted, ec);
      if (ec) return nullptr;
      found =
          state_->devices.emplace(exported.base, registered{answer.grant, answer.size, std::move(exported.description)})
              .first;
    }
    reg = &found->second;
    offset = static_cast<std::uint64_t>(at - exported.base);
    token.provider = std::string(cuda_ipc_grant_provider);
  } else {
    auto it = state_->buffers.upper_bound(at);
    if (it != state_->buffers.begin()) --it;
    if (it == state_->buffers.end() || at < it->first || static_cast<std::uint64_t>(at - it->first) > it->second.size ||
        memory.size > it->second.size - static_cast<std::uint64_t>(at - it->first)) {
      ec = sluice::errc::unsupported_memory;  // not in a shared buffer: another plane may grant it
      return nullptr;
    }
    reg = &it->second;
    offset = static_cast<std::uint64_t>(at - it->first);
    token.provider = std::string(memfd_grant_provider);
  }
  if (offset + memory.size > reg->size) {  // the server's view of the allocation is smaller
    ec = sluice::errc::unsupported_memory;
    return nullptr;
  }
  token.endpoint.assign(reg->id.begin(), reg->id.end());
  if (memory.size > 0) token.segments.push_back({offset, memory.size, 0});
  ec = {};
  return std::make_unique<local_grant>(encode_rdma_token(token));
}

}  // namespace sluice::s3
