// SPDX-License-Identifier: Apache-2.0
// The host-memory grant's copy (src/s3/local_plane.cpp): the store's bytes into a client's memfd
// mapping, in pieces posted on the caller's executor (the server's RDMA pool). No thread is made
// for a transfer and none waits for another: the worker that finishes the transfer's last piece
// runs its completion.
#pragma once

#include <sluice/s3/rdma.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace sluice::s3::grant_copy {

/// Pieces under this size are not split further: a piece costs a post and a madvise.
inline constexpr std::size_t min_piece = std::size_t{4} << 20;

/// `length` bytes of a source's range, from `at` (an offset of the range), to `to`.
struct piece {
  std::byte* to = nullptr;
  std::uint64_t at = 0;
  std::size_t length = 0;
};

/// Appends the pieces of copying `n` bytes of a source's range from `at` to `to` by up to
/// `workers` workers: as many pieces as workers, each at least min_piece (one when `n` is
/// smaller), all but the last a multiple of 4 KiB.
void split(std::vector<piece>& out, std::byte* to, std::uint64_t at, std::size_t n, std::size_t workers);

/// Copies one piece of `source`'s range: pread from the store's file when it has one, else memcpy
/// from the mapping; the destination's page tables are filled first. False when a read failed.
[[nodiscard]] bool copy(const rdma_source& source, const piece& p);

/// Copies `pieces` of `source` with up to `workers` workers posted on `executor`, each taking the
/// next piece not yet taken until none is left. `done` runs once, on the worker that finishes
/// last (posted on `executor` when there is nothing to copy), with false when a read failed.
/// `source` must stay valid until then; `keep` is held until then (the grant's mapping).
void async_copy(const rdma_source& source, std::vector<piece> pieces, std::size_t workers,
                const boost::asio::any_io_executor& executor, std::shared_ptr<const void> keep,
                std::function<void(bool)> done);

}  // namespace sluice::s3::grant_copy
