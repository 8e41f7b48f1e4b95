// SPDX-License-Identifier: Apache-2.0
// Same-host grants: the token's data plane for a client on the server's host, in which the client
// grants the server exactly the buffers it chose and the server can touch nothing else.
//
// The client opens a session on the server's Unix-domain socket (SOCK_SEQPACKET), and both ends
// prove they hold the S3 user's secret key (HMAC-SHA256 over two fresh nonces; the client learns
// it reached the real server before it hands over any memory). Over the session the client
// registers buffers:
// - host memory: a sluice::shared_buffer (memfd, sealed against shrinking), passed with
//   SCM_RIGHTS; the server maps exactly that file;
// - device memory: an allocation described by a device_grant_exporter (sluice::cuda: a CUDA IPC
//   handle and the device's UUID), which the server's device_grant_opener opens.
// Each registration answers a grant id (16 random bytes) bound to the session's user. A request's
// x-amz-rdma-token then names provider "local:memfd" or "local:cuda-ipc", the grant id as its
// endpoint, and offsets into the granted buffer as its segments. The server refuses a grant of
// another user or a segment outside the buffer (400 InvalidRDMAToken, nothing touched), and drops
// a session's grants when the session closes (the client process exited or released them).
//
// The S3 tier needs no CUDA: device memory goes through the two small interfaces below, which
// sluice::cuda implements (include/sluice/cuda/grant.hpp).
#pragma once

#include <sluice/config.hpp>
#include <sluice/s3/rdma.hpp>
#include <sluice/s3/sigv4.hpp>
#include <sluice/shared_buffer.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::s3 {

/// The token provider of a host-memory grant (a shared_buffer).
inline constexpr std::string_view memfd_grant_provider = "local:memfd";
/// The token provider of a device-memory grant (a CUDA IPC handle).
inline constexpr std::string_view cuda_ipc_grant_provider = "local:cuda-ipc";

/// Server side of a device-memory grant: one client allocation, opened in the server.
/// Thread-safe; write and read block until the bytes moved, async_write does not.
class device_grant {
 public:
  virtual ~device_grant() = default;
  /// Bytes of the allocation the server may touch, from offset 0.
  [[nodiscard]] virtual std::uint64_t size() const noexcept = 0;
  /// Copies `source.bytes()` to [offset, offset + source.length) of the allocation and returns
  /// once they are there. Precondition: the range lies inside size(). Keeps `source.owner` while
  /// a copy may still read the mapping.
  [[nodiscard]] virtual error_code write(std::uint64_t offset, const rdma_source& source) = 0;
  /// write without a thread waiting for the bytes: `done` runs once with what write would return,
  /// on `executor` or any thread; `executor` runs what may block (pageable copies). `source` is
  /// copied. The default runs write on `executor`.
  virtual void async_write(std::uint64_t offset, const rdma_source& source,
                           const boost::asio::any_io_executor& executor, std::function<void(error_code)> done) {
    boost::asio::post(executor, [this, offset, source, done = std::move(done)] { done(write(offset, source)); });
  }
  /// Hands [offset, offset + length) of the allocation to `sink`, in order. Precondition: the
  /// range lies inside size().
  [[nodiscard]] virtual error_code read(std::uint64_t offset, std::uint64_t length, const rdma_sink& sink) = 0;
};

/// Opens the device memory clients describe (the server's side of cuda-ipc grants).
class device_grant_opener {
 public:
  virtual ~device_grant_opener() = default;
  /// Opens what a client's exporter wrote in `description` (hostile bytes: any length, any
  /// content). Errors: s3::errc::rdma_not_supported when it cannot be opened here (no CUDA, a
  /// GPU this process does not see, a handle of another host or boot), invalid_argument when
  /// malformed.
  [[nodiscard]] virtual std::shared_ptr<device_grant> open(std::span<const std::byte> description, error_code& ec) = 0;
  /// As rdma_server_plane::published_min_bytes and published: an opener that registers the
  /// store's mappings may register a new version before its first GET.
  [[nodiscard]] virtual std::uint64_t published_min_bytes() const noexcept {
    return std::numeric_limits<std::uint64_t>::max();
  }
  virtual void published(const rdma_source& /*source*/) {}
};

/// An allocation of device memory, described for a server on this host.
struct exported_device_memory {
  std::vector<std::byte> description;  ///< for device_grant_opener::open (at most 512 bytes)
  const std::byte* base = nullptr;     ///< the allocation's first byte in this process
  std::uint64_t size = 0;              ///< the allocation's bytes
};

/// Describes device memory for the server (the client's side of cuda-ipc grants).
class device_grant_exporter {
 public:
  virtual ~device_grant_exporter() = default;
  /// The allocation that holds all of `memory`. Errors: errc::unsupported_memory (not device
  /// memory, or not exportable), cuda errors.
  [[nodiscard]] virtual exported_device_memory export_allocation(const region& memory, error_code& ec) = 0;
};

/// How a server's same-host plane is opened.
///
/// Every connection first waits in a handshake slot; only a connection whose client proved it
/// holds an S3 user's secret takes a session slot. Slots are counted per local user (the peer's
/// uid, SO_PEERCRED), so that one local user cannot take them all: a user past its handshake
/// slots loses its own oldest (silent first) handshake, a full table loses one of the user that
/// holds the most, and a user past its sessions is refused.
struct local_server_plane_config {
  std::filesystem::path socket_path;  ///< created mode 0666 (any local user who can reach it may try
                                      ///< to authenticate); a stale socket is replaced
  /// The socket's directory is this user's alone: created mode 0700 when missing; refused (EPERM)
  /// when it is not a directory of this effective uid with mode 0700 (a symlink, another owner,
  /// group or other access). Set for the default socket (default_grant_socket), which other local
  /// users can then not reach, take or pre-create.
  bool private_directory = false;
  std::vector<credentials> users;               ///< who may open sessions (the server's S3 users)
  std::shared_ptr<device_grant_opener> device;  ///< null: cuda-ipc grants are declined
  std::size_t max_sessions = 256;               ///< authenticated sessions open at once
  std::size_t max_sessions_per_user = 64;       ///< of them, per local uid
  std::size_t max_handshakes = 64;              ///< connections not yet authenticated
  std::size_t max_handshakes_per_user = 16;     ///< of them, per local uid
  std::size_t max_grants_per_session = 1024;
  std::uint64_t max_mapped_bytes = 64ULL << 30;           ///< memfd bytes mapped at once, all sessions
  std::uint64_t max_mapped_bytes_per_user = 16ULL << 30;  ///< of them, per local uid
  std::size_t copy_threads = 4;                           ///< workers one host-memory transfer copies with
  std::chrono::milliseconds handshake_timeout{2000};      ///< from connect to the client's proof
  /// A session that holds no grant is closed after this long without a message (it holds nothing
  /// a transfer could use; local_client_plane opens a new one when it next needs it).
  std::chrono::milliseconds idle_timeout{60'000};

  /// The first problem, or nullopt.
  [[nodiscard]] std::optional<config_error> validate() const;
};

/// Where a server on `port` puts its grant socket unless told otherwise, and where a client of it
/// on this host looks: `runtime_dir`/sluice/sluice-PORT.sock when `runtime_dir` (the caller's
/// $XDG_RUNTIME_DIR) is not empty, else /tmp/sluice-UID/sluice-PORT.sock (UID: the effective uid).
/// Port 0 names the socket after this process (sluice-pidPID.sock). Open it with
/// local_server_plane_config::private_directory.
[[nodiscard]] std::filesystem::path default_grant_socket(std::uint16_t port, const std::filesystem::path& runtime_dir);

/// The server side. Thread-safe; hold it by shared_ptr (server_config::rdma, usually inside an
/// rdma_server_planes before the libfabric plane).
class local_server_plane final : public rdma_server_plane {
 public:
  /// Binds the socket and starts accepting sessions on a thread of its own. Errors:
  /// invalid_config, EPERM (private_directory: the directory is not this user's private one), the
  /// errno of mkdir/socket/bind/listen.
  [[nodiscard]] static std::shared_ptr<local_server_plane> open(local_server_plane_config config, error_code& ec);
  ~local_server_plane() override;
  local_server_plane(const local_server_plane&) = delete;
  local_server_plane& operator=(const local_server_plane&) = delete;

  [[nodiscard]] const std::filesystem::path& socket_path() const noexcept;
  /// memfd grants always; cuda-ipc grants with a device opener.
  [[nodiscard]] bool serves(std::string_view provider) const override;
  /// Errors: invalid_rdma_token (unknown grant, another user's, a segment outside the buffer, a
  /// grant of the other kind), rdma_not_supported (plane closed), rdma_transfer_failed.
  [[nodiscard]] error_code write_from(const rdma_requester& who, const rdma_token& token,
                                      const rdma_source& source) override;
  /// A memfd grant's copy in pieces posted on `executor` (no thread made or waiting for it; `done`
  /// runs on the worker that finishes the last piece); a cuda-ipc grant's blocking write on
  /// `executor`.
  void async_write_from(const rdma_requester& who, const rdma_token& token, const rdma_source& source,
                        const boost::asio::any_io_executor& executor, std::function<void(error_code)> done) override;
  [[nodiscard]] error_code read(const rdma_requester& who, const rdma_token& token, std::uint64_t length,
                                const rdma_sink& sink) override;
  /// Stops accepting, closes every session and drops the grants (transfers in flight finish).
  void close() noexcept override;
  /// The device opener's (register on write).
  [[nodiscard]] std::uint64_t published_min_bytes() const noexcept override;
  void published(const rdma_source& source) override;
  /// Grants held now, over all sessions.
  [[nodiscard]] std::size_t grant_count() const;
  /// Authenticated sessions open now.
  [[nodiscard]] std::size_t session_count() const;
  /// Connections still in their handshake.
  [[nodiscard]] std::size_t handshake_count() const;

  struct state;

 private:
  local_server_plane() = default;
  std::shared_ptr<state> state_;
};

/// How a client's same-host plane is opened.
struct local_client_plane_config {
  std::filesystem::path socket_path;              ///< the server's (sluice serve --grant-socket)
  credentials creds;                              ///< the S3 user that signs the requests
  std::shared_ptr<device_grant_exporter> device;  ///< null: device memory is not granted
  std::chrono::milliseconds timeout{5000};        ///< connect, handshake, each registration
};

/// The client side: one session with the server. Grants memory of shared buffers it was given
/// (share) and, with an exporter, device memory; any other memory is errc::unsupported_memory, so
/// that an rdma_client_planes goes on to the next plane. Thread-safe; hold it by shared_ptr.
class local_client_plane final : public rdma_client_plane {
 public:
  /// Connects and authenticates. Errors: the errno of connect (ENOENT, ECONNREFUSED: no server
  /// here), s3::errc::access_denied (the server does not know the key, or proved no knowledge of
  /// it), protocol_violation, timed_out.
  [[nodiscard]] static std::shared_ptr<local_client_plane> open(const local_client_plane_config& config,
                                                                error_code& ec);
  ~local_client_plane() override;
  local_client_plane(const local_client_plane&) = delete;
  local_client_plane& operator=(const local_client_plane&) = delete;

  /// "local:memfd".
  [[nodiscard]] std::string_view provider() const noexcept override;
  /// Registers the buffer holding `memory` with the server on first use (one grant per buffer or
  /// device allocation, kept until the buffer is destroyed or the plane closes) and returns a
  /// token for exactly `memory`.
  [[nodiscard]] std::unique_ptr<grant> grant_access(const region& memory, rdma_op op,
                                                    std::chrono::system_clock::time_point expires,
                                                    error_code& ec) override;
  /// Device memory (with an exporter): no limit, a GET goes in one request (the server copies it
  /// with several streams and threads); host memory: 0, the client's part_size (the server copies
  /// each request with up to copy_threads workers on its RDMA pool, so parts in flight share it).
  [[nodiscard]] std::uint64_t request_bytes(const region& memory) const noexcept override;
  /// Makes `buffer` grantable. The plane forgets it (and the server unmaps it) when the buffer is
  /// destroyed; the buffer and the plane may be destroyed in either order.
  /// Errors: the server's refusal (EMFILE past max_grants_per_session, ENOMEM past a mapped-bytes
  /// budget), protocol_violation, timed_out, the errno of sendmsg.
  void share(shared_buffer& buffer, error_code& ec);
  /// Drops the grant of the device allocation holding `memory` (call before freeing it when the
  /// allocation's address may be reused for another one).
  void release_device(const region& memory);

  struct state;

 private:
  local_client_plane() = default;
  std::shared_ptr<state> state_;
};

}  // namespace sluice::s3
