// SPDX-License-Identifier: Apache-2.0
// Same-host grants, the client's side (include/sluice/s3/local_plane.hpp): one session with the
// server over its Unix-domain socket (src/s3/grant_socket.hpp), the handshake in which the server
// proves it holds the user's secret first, and the registrations of shared buffers and device
// allocations. The server's side is src/s3/local_plane.cpp.
#include <sluice/s3/local_plane.hpp>

#include <sluice/s3/error.hpp>

#include "grant_codec.hpp"
#include "grant_socket.hpp"

#include <openssl/crypto.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <utility>

namespace sluice::s3 {

namespace {

using namespace grant_wire;
using detail::grant_message;
using message_type = detail::grant_message_type;

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
