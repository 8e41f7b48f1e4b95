// SPDX-License-Identifier: Apache-2.0
// Files into host memory as a path: the file negotiator, the host registrar and a transport that
// reads with io_uring.
//
//   file::host_path   file::negotiator × host_registrar × file::uring_transport
//
// The same negotiator pairs with cuda::file_transport for files into device memory
// (sluice/cuda/file.hpp).
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/file/negotiator.hpp>
#include <sluice/file/reading_transport.hpp>
#include <sluice/file/uring_reader.hpp>
#include <sluice/host_registrar.hpp>
#include <sluice/path.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <cstddef>
#include <string_view>
#include <utility>

namespace sluice::file {

/// Reads a negotiated file into host memory with io_uring: O_DIRECT where the file system takes
/// it (buffered reads otherwise, or when `config.direct` is false), up to config.queue_depth
/// chunks in flight, straight into the local memory (through a bounce block where it is not
/// aligned for O_DIRECT). Each read opens the file's path again with a ring of its own.
/// Reads only (`reads_only`): a write is errc::invalid_argument. The reads block: they run on
/// the executor given at construction, or else on the handler's associated executor.
class uring_transport : public reading_transport<uring_transport> {
 public:
  static constexpr std::string_view name = "file-uring";

  explicit uring_transport(uring_config config = {}, boost::asio::any_io_executor reads = {})
      : reading_transport(std::move(reads)), config_(config) {}

  /// Reads `span.length` bytes of the file at `span.remote_offset` into `local` at
  /// `span.local_offset`, blocking; what async_read runs (file::reading_transport). Errors:
  /// check_read's, then uring_reader's (errc::invalid_config, the errno of open or a read,
  /// errc::bad_range when the file shrank).
  std::size_t read(const region& local, const file_remote& remote, transfer_span span, error_code& ec) const;

 private:
  uring_config config_;
};

/// A file's bytes into host memory.
using host_path = path<negotiator, host_registrar, uring_transport>;

}  // namespace sluice::file
