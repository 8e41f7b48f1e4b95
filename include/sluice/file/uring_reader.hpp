// SPDX-License-Identifier: Apache-2.0
// The file transport: reads a byte range of a local file (NVMe, any block device file system)
// with io_uring, O_DIRECT when the file system allows it, several chunk reads in flight.
//
// O_DIRECT moves the bytes from the device straight into the caller's memory (no page cache
// copy), but wants the file offset, the length and the memory address aligned to the logical
// block size. The reader aligns what it can and handles the rest itself:
// - a range that starts inside a 4 KiB block: its first piece (up to the block's end) is read
//   as one whole block into a small bounce block and copied out (< 4 KiB);
// - a range that ends inside a block: the last block is read whole, into the caller's buffer
//   when that buffer has room for it (read_chunks), else into a bounce block (read);
// - memory that is not aligned the same way as the file offset: those chunks are read through
//   the page cache (buffered reads of the same file);
// - a file system that refuses O_DIRECT (EINVAL at open or at the first read): the whole
//   reader falls back to buffered reads, and direct() says so.
// Short reads are continued, EINTR and EAGAIN are retried.
#pragma once

#include <sluice/config.hpp>
#include <sluice/error.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>

struct io_uring;  // liburing's ring; <liburing.h> is needed only to use native_handle()

namespace sluice::file {

/// The alignment O_DIRECT reads use here (file offset, length, memory): 4096 covers the logical
/// block size of every NVMe and SATA device in practice (512 or 4096).
inline constexpr std::size_t direct_alignment = 4096;

/// How a reader splits and pipelines a read.
struct uring_config {
  std::uint32_t queue_depth = 8;      ///< chunks in flight at once (each is one read, plus one for a tail)
  std::size_t chunk_bytes = 1 * mib;  ///< bytes per chunk read; a multiple of direct_alignment
  bool direct = true;                 ///< try O_DIRECT (false: buffered reads through the page cache)

  /// Valid when queue_depth is 1..1024 and chunk_bytes a multiple of 4096 between 4 KiB and 1 GiB.
  [[nodiscard]] std::optional<config_error> validate() const;
};

/// An open file and an io_uring ring to read it with. Move-only; closes both on destruction.
/// One thread at a time may use a reader (a ring has one submitter).
class uring_reader {
 public:
  /// Called for chunk [chunk_offset, chunk_offset + chunk_length) of the file before its read is
  /// submitted: returns the memory the chunk is to be read into, at least chunk_length bytes,
  /// which must stay valid and untouched until the chunk is handed back through on_filled (or
  /// read_chunks returns). The reader may write up to the end of the span (a whole tail block
  /// read with O_DIRECT), so a span longer than chunk_length lets it skip the bounce copy; a
  /// 4096-aligned span lets it read straight into the memory with O_DIRECT. Setting `ec` stops the
  /// read: read_chunks waits for the chunks in flight and returns `ec`.
  using next_buffer_fn =
      std::function<std::span<std::byte>(std::uint64_t chunk_offset, std::size_t chunk_length, error_code& ec)>;
  /// Called once per chunk when all its bytes arrived, in completion order (not file order):
  /// `filled` is the first chunk_length bytes of the span next_buffer gave. An error stops the
  /// read as next_buffer's does.
  using filled_fn = std::function<error_code(std::uint64_t chunk_offset, std::span<std::byte> filled)>;

  /// An empty reader (no file, no ring); only assignment and destruction are valid.
  uring_reader() noexcept;
  /// Opens `path` read-only (O_DIRECT when config.direct, falling back to buffered reads when
  /// the file system refuses it) and sets up a ring of config.queue_depth chunks.
  /// Errors: errc::invalid_config, the errno of open/fstat/io_uring_setup (system_category:
  /// no_such_file_or_directory, permission_denied, ...), errc::invalid_argument for a path
  /// that is not a regular file or block device.
  [[nodiscard]] static uring_reader open(const std::filesystem::path& path, const uring_config& config, error_code& ec);
  /// Throwing overload.
  [[nodiscard]] static uring_reader open(const std::filesystem::path& path, const uring_config& config = {});

  uring_reader(uring_reader&& other) noexcept;
  uring_reader& operator=(uring_reader&& other) noexcept;
  uring_reader(const uring_reader&) = delete;
  uring_reader& operator=(const uring_reader&) = delete;
  ~uring_reader();

  /// The file's size in bytes when it was opened (reads are checked against it).
  [[nodiscard]] std::uint64_t size() const noexcept;
  /// True while reads use O_DIRECT; false when buffered reads were asked for or the file
  /// system refused O_DIRECT (at open, or at a read since: the reader then switched for good).
  [[nodiscard]] bool direct() const noexcept;
  /// The configuration the reader was opened with.
  [[nodiscard]] const uring_config& config() const noexcept;
  /// The ring (liburing's `struct io_uring`), nullptr for an empty reader.
  [[nodiscard]] ::io_uring* native_handle() const noexcept;

  /// Reads the file range [offset, offset + into.size()) into `into` (any host memory), with up
  /// to queue_depth chunk reads in flight, and blocks until all arrived. Returns into.size(), or
  /// 0 on error (then `into` holds unspecified bytes of the range; nothing outside it is written).
  /// Errors: errc::bad_range when the range does not lie inside the file (checked before any
  /// read, against size(); also when the file shrank and ended early), the errno of a read
  /// (system_category).
  std::size_t read(std::uint64_t offset, std::span<std::byte> into, error_code& ec);
  /// Throwing overload.
  std::size_t read(std::uint64_t offset, std::span<std::byte> into);

  /// Streams the file range [offset, offset + length) chunk by chunk: asks next_buffer for the
  /// memory of each chunk, keeps up to queue_depth chunks in flight, hands each one to on_filled
  /// as soon as it is complete, and returns when all were handed back or an error stopped it
  /// (reads in flight are always waited for: no buffer is written to after return; an exception
  /// thrown by a callback propagates once they ended). Chunks are chunk_bytes long but the last;
  /// with O_DIRECT a range starting inside a 4 KiB block first gets a chunk of its own up to
  /// that block's end. Errors: as read(), or the first error of a callback.
  [[nodiscard]] error_code read_chunks(std::uint64_t offset, std::uint64_t length, const next_buffer_fn& next_buffer,
                                       const filled_fn& on_filled);

 private:
  struct state;
  explicit uring_reader(std::unique_ptr<state> s) noexcept;
  std::unique_ptr<state> state_;
};

}  // namespace sluice::file
