// SPDX-License-Identifier: Apache-2.0
// The grant session's socket and proofs (src/s3/grant_socket.hpp).
#include "grant_socket.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <sys/socket.h>

#include <cstring>
#include <stdexcept>

namespace sluice::s3::grant_wire {

void fill_random(std::span<std::byte> out) {
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size())) != 1) {
    throw std::runtime_error("sluice: RAND_bytes failed");  // no entropy: nothing safe to hand out
  }
}

nonce proof(std::string_view label, const credentials& user, const nonce& client, const nonce& server) {
  std::vector<std::byte> in;
  const auto append = [&in](std::span<const std::byte> b) { in.insert(in.end(), b.begin(), b.end()); };
  const auto text = [&append](std::string_view s) { append(std::as_bytes(std::span(s.data(), s.size()))); };
  text(label);
  const std::size_t n = user.access_key_id.size();
  append(std::array{static_cast<std::byte>(n & 0xFFu), static_cast<std::byte>((n >> 8) & 0xFFu)});
  text(user.access_key_id);
  append(client);
  append(server);
  nonce out{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), user.secret_access_key.data(), static_cast<int>(user.secret_access_key.size()),
       reinterpret_cast<const unsigned char*>(in.data()), in.size(), reinterpret_cast<unsigned char*>(out.data()),
       &length);
  return out;
}

error_code send_packet(int socket, std::span<const std::byte> data, int fd) {
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
  detail::grant_message m;
  m.type = detail::grant_message_type::error;
  m.code = code;
  m.text = std::string(text.substr(0, 200));
  return detail::encode_grant_message(m);
}

}  // namespace sluice::s3::grant_wire
