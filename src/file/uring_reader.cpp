// SPDX-License-Identifier: Apache-2.0
// Compiled part of sluice::file: the io_uring reader (include/sluice/file/uring_reader.hpp). The
// only translation unit that includes <liburing.h>.
#include <sluice/file/uring_reader.hpp>

#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "file_support.hpp"

namespace sluice::file {

using namespace file_impl;  // this tier's helpers (file_support.hpp)

// -- uring_reader ---------------------------------------------------------------------------------

std::optional<config_error> uring_config::validate() const {
  if (queue_depth < 1 || queue_depth > 1024) return config_error{"queue_depth", "must be between 1 and 1024"};
  return check_chunk_bytes(chunk_bytes);
}

/// Everything a reader owns, on the heap so that the ring (whose address the kernel's mappings
/// are reached through) never moves, and moving a reader is moving a pointer.
struct uring_reader::state {
  /// One read in flight: a whole chunk, the aligned body or the tail of one, or a block read
  /// into this op's bounce block. Its index is the SQE's user_data.
  struct op {
    bool used = false;
    std::size_t chunk = 0;     // index in chunks
    std::uint64_t pos = 0;     // file offset of the next byte to read
    std::byte* ptr = nullptr;  // where that byte goes
    std::size_t len = 0;       // bytes asked of the next read
    std::size_t need = 0;      // bytes that must still arrive (len may exceed it: a whole tail block)
    bool direct = false;       // read through the O_DIRECT descriptor
    bool bounce = false;       // ptr is in this op's bounce block; copy out when done
    std::size_t skip = 0;      // bounce: the wanted bytes start this far into the block
    std::byte* copy_to = nullptr;
    std::size_t copy_len = 0;
  };
  /// One chunk given to the caller's buffer, complete when its ops (one or two) are.
  struct chunk {
    bool used = false;
    std::uint64_t offset = 0;
    std::size_t length = 0;
    std::span<std::byte> buffer;
    unsigned ops = 0;
  };
  /// The ring, torn down on destruction.
  struct ring_owner {
    ::io_uring ring{};
    bool initialized = false;
    ring_owner() = default;
    ring_owner(const ring_owner&) = delete;
    ring_owner& operator=(const ring_owner&) = delete;
    ~ring_owner() {
      if (initialized) io_uring_queue_exit(&ring);
    }
  };

  uring_config config;
  unique_fd direct_fd;    // O_DIRECT; empty when the reader reads buffered only
  unique_fd buffered_fd;  // for what O_DIRECT cannot take (misaligned memory), or everything
  std::uint64_t size = 0;
  bool direct = false;
  ring_owner ring;
  error_code broken;     // set when the ring itself failed: no further read is attempted
  aligned_bytes bounce;  // one block per op
  std::vector<op> ops;
  std::vector<chunk> chunks;

  // Per run.
  error_code first_error;
  std::size_t ops_in_flight = 0;     // prepared (submitted or not) and not completed
  std::size_t chunks_in_flight = 0;  // given a buffer and not handed back
  const filled_fn* on_filled = nullptr;
  std::vector<std::size_t> plan_scratch;  // plan()'s list, kept to reuse its allocation

  std::byte* bounce_block(std::size_t op_index) const noexcept { return bounce.get() + op_index * block; }

  void fail(const error_code& e) {
    if (!first_error) first_error = e;
  }

  // Queues the read of op `i` as it stands. The SQ has an entry for every op there can be, so
  // io_uring_get_sqe cannot come back empty; if it ever did, the op ends with EBUSY.
  void prepare(std::size_t i) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring.ring);
    if (sqe == nullptr) {
      finish_op(i, errno_error(EBUSY));
      return;
    }
    const op& o = ops[i];
    const int fd = o.direct ? direct_fd.get() : buffered_fd.get();
    io_uring_prep_read(sqe, fd, o.ptr, static_cast<unsigned>(o.len), o.pos);
    io_uring_sqe_set_data64(sqe, i);
  }

  // Claims a free op for chunk `c` (not queued yet: plan() counts a chunk's ops before it
  // queues any, so that an op ending at once cannot hand back a half-planned chunk).
  op& new_op(std::size_t c, std::vector<std::size_t>& planned) {
    const auto i = static_cast<std::size_t>(std::find_if(ops.begin(), ops.end(), [](const op& o) { return !o.used; }) -
                                            ops.begin());
    planned.push_back(i);
    ops[i] = op{.used = true, .chunk = c};
    return ops[i];
  }

  void add_read(std::size_t c, std::vector<std::size_t>& planned, std::uint64_t pos, std::byte* ptr, std::size_t len,
                std::size_t need, bool use_direct) {
    op& o = new_op(c, planned);
    o.pos = pos;
    o.ptr = ptr;
    o.len = len;
    o.need = need;
    o.direct = use_direct;
  }

  // Reads the block at `block_pos` into the op's bounce block and copies [skip, skip + copy_len)
  // of it to `copy_to` when done.
  void add_bounce(std::size_t c, std::vector<std::size_t>& planned, std::uint64_t block_pos, std::size_t skip,
                  std::byte* copy_to, std::size_t copy_len) {
    op& o = new_op(c, planned);
    o.pos = block_pos;
    o.ptr = bounce_block(planned.back());
    o.len = block;
    o.need = skip + copy_len;
    o.direct = true;
    o.bounce = true;
    o.skip = skip;
    o.copy_to = copy_to;
    o.copy_len = copy_len;
  }

  // Splits chunk `c` into reads O_DIRECT can take, reads through the cache what it cannot, and
  // queues them.
  void plan(std::size_t c) {
    const chunk& ch = chunks[c];
    const std::uint64_t p = ch.offset;
    const std::size_t n = ch.length;
    std::byte* b = ch.buffer.data();
    std::vector<std::size_t>& planned = plan_scratch;
    planned.clear();
    if (direct && is_aligned(p) && is_aligned(b)) {
      const auto body = static_cast<std::size_t>(align_down(n));
      const std::size_t rest = n - body;
      if (body != 0) add_read(c, planned, p, b, body, body, true);
      if (rest != 0) {
        if (ch.buffer.size() - body >= block) {
          add_read(c, planned, p + body, b + body, block, rest, true);  // the whole tail block, into the slack
        } else {
          add_bounce(c, planned, p + body, 0, b + body, rest);
        }
      }
    } else if (direct && p % block + n <= block) {
      add_bounce(c, planned, align_down(p), static_cast<std::size_t>(p % block), b, n);
    } else {
      // Buffered reads, or memory not aligned like the file: through the page cache.
      add_read(c, planned, p, b, n, n, false);
    }
    chunks[c].ops = static_cast<unsigned>(planned.size());
    ops_in_flight += planned.size();
    for (const std::size_t i : planned) prepare(i);
  }

  // Op `i` ended (`e`: how); hands its chunk back once the chunk's last op ended.
  void finish_op(std::size_t i, const error_code& e) {
    op& o = ops[i];
    if (e) {
      fail(e);
    } else if (o.bounce) {
      std::memcpy(o.copy_to, bounce_block(i) + o.skip, o.copy_len);
    }
    o.used = false;
    --ops_in_flight;
    chunk& ch = chunks[o.chunk];
    if (--ch.ops != 0) return;
    ch.used = false;
    --chunks_in_flight;
    if (!first_error) fail((*on_filled)(ch.offset, ch.buffer.first(ch.length)));
  }

  void complete(std::size_t i, int res) {
    op& o = ops[i];
    if (res < 0) {
      const int e = -res;
      if (e == EINTR || e == EAGAIN) {
        prepare(i);
      } else if (e == EINVAL && o.direct) {
        // Opened with O_DIRECT but the file system refuses O_DIRECT reads (our reads are
        // aligned): read through the page cache from now on.
        direct = false;
        o.direct = false;
        prepare(i);
      } else {
        finish_op(i, errno_error(e));
      }
      return;
    }
    if (res == 0) {
      finish_op(i, errc::bad_range);  // end of file before the range's end: the file shrank
      return;
    }
    const auto got = static_cast<std::size_t>(res);
    o.pos += got;
    o.ptr += got;
    o.len -= got;
    o.need -= std::min(got, o.need);
    if (o.need == 0) {
      finish_op(i, {});
      return;
    }
    // A short read: continue where it stopped, through the cache if that is no longer aligned.
    if (o.direct && !(is_aligned(o.pos) && is_aligned(o.ptr) && is_aligned(o.len))) o.direct = false;
    prepare(i);
  }

  // Submits what is queued, waits for at least one completion and processes all there are.
  void wait_and_process() {
    int r = io_uring_submit_and_wait(&ring.ring, 1);
    if (r == -EAGAIN || r == -EBUSY) {
      // The kernel is short of resources (or of CQ room) until completions are reaped: wait
      // for one if any read is in the kernel, else give it a moment.
      const std::size_t in_kernel = ops_in_flight - io_uring_sq_ready(&ring.ring);
      if (in_kernel != 0) {
        io_uring_cqe* cqe = nullptr;
        r = io_uring_wait_cqe(&ring.ring, &cqe);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return;
      }
    }
    if (r < 0 && r != -EINTR) {
      // The ring itself failed. SQEs it did not take stay queued; a later submit would start them
      // into buffers the caller may have freed, so this reader submits nothing ever again.
      broken = errno_error(-r);
      fail(broken);
      return;
    }
    // The CQEs processed are consumed even when a callback throws, so abandon() sees the rest only.
    struct consume {
      ::io_uring* ring;
      unsigned seen = 0;
      explicit consume(::io_uring* r) noexcept : ring(r) {}
      consume(const consume&) = delete;
      consume& operator=(const consume&) = delete;
      ~consume() { io_uring_cq_advance(ring, seen); }
    } consumed(&ring.ring);
    unsigned head = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(&ring.ring, head, cqe) {
      ++consumed.seen;
      complete(static_cast<std::size_t>(io_uring_cqe_get_data64(cqe)), cqe->res);
    }
  }

  // A callback threw: let every read still queued or in the kernel end (its buffer may go away
  // with the exception), without handing anything back, and forget the run.
  void abandon() noexcept {
    while (ops_in_flight != 0 && !broken) {
      const int r = io_uring_submit_and_wait(&ring.ring, 1);
      if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
        broken = errno_error(-r);
        wait_for_kernel();
        break;
      }
      unsigned head = 0;
      unsigned seen = 0;
      io_uring_cqe* cqe = nullptr;
      io_uring_for_each_cqe(&ring.ring, head, cqe) { ++seen; }
      io_uring_cq_advance(&ring.ring, seen);
      ops_in_flight -= std::min<std::size_t>(seen, ops_in_flight);
    }
    forget();
  }

  void forget() noexcept {
    for (op& o : ops) o.used = false;
    for (chunk& ch : chunks) ch.used = false;
    ops_in_flight = chunks_in_flight = 0;
    on_filled = nullptr;
  }

  // Drains what the kernel holds after the ring failed: nothing may be written after return.
  void wait_for_kernel() {
    std::size_t in_kernel = ops_in_flight - io_uring_sq_ready(&ring.ring);
    while (in_kernel != 0) {
      io_uring_cqe* cqe = nullptr;
      const int r = io_uring_wait_cqe(&ring.ring, &cqe);
      if (r == -EINTR) continue;
      if (r < 0) return;  // nothing more can be learnt from this ring
      io_uring_cqe_seen(&ring.ring, cqe);
      --in_kernel;
    }
  }

  error_code run(std::uint64_t offset, std::uint64_t length, const next_buffer_fn& next_buffer,
                 const filled_fn& filled) {
    if (broken) return broken;
    first_error = {};
    on_filled = &filled;
    try {
      pump(offset, offset + length, next_buffer);
    } catch (...) {
      abandon();
      throw;
    }
    if (broken) forget();  // what the failed ring held is gone with it; this reader is done
    on_filled = nullptr;
    return first_error;
  }

  // Keeps queue_depth chunks in flight until the range is read or an error stopped it.
  void pump(std::uint64_t cursor, std::uint64_t end, const next_buffer_fn& next_buffer) {
    while (true) {
      while (!first_error && cursor < end && chunks_in_flight < config.queue_depth) {
        // With O_DIRECT a range starting inside a block gets that block's remainder as a chunk of
        // its own (one bounce block), so that every later chunk starts aligned.
        const std::uint64_t chunk_end = (direct && !is_aligned(cursor)) ? std::min(end, align_down(cursor) + block)
                                                                        : std::min(end, cursor + config.chunk_bytes);
        const auto n = static_cast<std::size_t>(chunk_end - cursor);
        error_code e;
        const std::span<std::byte> buffer = next_buffer(cursor, n, e);
        if (e) {
          fail(e);
          break;
        }
        if (buffer.size() < n || buffer.data() == nullptr) {
          fail(errc::region_too_small);
          break;
        }
        const auto c = static_cast<std::size_t>(
            std::find_if(chunks.begin(), chunks.end(), [](const chunk& ch) { return !ch.used; }) - chunks.begin());
        chunks[c] = {.used = true, .offset = cursor, .length = n, .buffer = buffer, .ops = 0};
        ++chunks_in_flight;
        cursor = chunk_end;
        plan(c);
      }
      if (ops_in_flight == 0) break;
      if (broken) {
        wait_for_kernel();
        break;
      }
      wait_and_process();
    }
  }
};

uring_reader::uring_reader() noexcept = default;
uring_reader::uring_reader(std::unique_ptr<state> s) noexcept : state_(std::move(s)) {}
uring_reader::uring_reader(uring_reader&& other) noexcept = default;
uring_reader& uring_reader::operator=(uring_reader&& other) noexcept = default;
uring_reader::~uring_reader() = default;

uring_reader uring_reader::open(const std::filesystem::path& path, const uring_config& config, error_code& ec) {
  if (config.validate()) {
    ec = errc::invalid_config;
    return {};
  }
  opened_file file = open_for_reading(path, config.direct, ec);
  if (ec) return {};
  auto s = std::make_unique<state>();
  s->config = config;
  s->size = file.size;
  s->direct = file.direct;
  if (file.direct) {
    s->direct_fd = std::move(file.fd);
    s->buffered_fd = open_read_only(path, false);
    if (!s->buffered_fd) {
      ec = errno_error(errno);
      return {};
    }
  } else {
    s->buffered_fd = std::move(file.fd);
  }
  // Up to two reads per chunk (body and tail), each needing an SQE before the next submit.
  const std::size_t max_ops = std::size_t{2} * config.queue_depth;
  if (const int r = io_uring_queue_init(static_cast<unsigned>(max_ops), &s->ring.ring, 0); r < 0) {
    ec = errno_error(-r);
    return {};
  }
  s->ring.initialized = true;
  s->bounce = allocate_aligned(max_ops * block);
  s->ops.resize(max_ops);
  s->chunks.resize(config.queue_depth);
  ec = {};
  return uring_reader(std::move(s));
}

uring_reader uring_reader::open(const std::filesystem::path& path, const uring_config& config) {
  error_code ec;
  uring_reader reader = open(path, config, ec);
  detail::throw_on_error(ec, "sluice::file::uring_reader::open");
  return reader;
}

std::uint64_t uring_reader::size() const noexcept { return state_ ? state_->size : 0; }
bool uring_reader::direct() const noexcept { return state_ && state_->direct; }
const uring_config& uring_reader::config() const noexcept {
  static const uring_config empty{};
  return state_ ? state_->config : empty;
}
::io_uring* uring_reader::native_handle() const noexcept { return state_ ? &state_->ring.ring : nullptr; }

error_code uring_reader::read_chunks(std::uint64_t offset, std::uint64_t length, const next_buffer_fn& next_buffer,
                                     const filled_fn& on_filled) {
  if (!state_ || !next_buffer || !on_filled) return errc::invalid_argument;
  if (!range_inside(offset, length, state_->size)) return errc::bad_range;
  if (length == 0) return {};
  return state_->run(offset, length, next_buffer, on_filled);
}

std::size_t uring_reader::read(std::uint64_t offset, std::span<std::byte> into, error_code& ec) {
  // Each chunk is read in place; tails the span has no room to over-read go through a bounce block.
  ec = read_chunks(
      offset, into.size(),
      [&](std::uint64_t chunk_offset, std::size_t chunk_length, error_code&) {
        return into.subspan(static_cast<std::size_t>(chunk_offset - offset), chunk_length);
      },
      [](std::uint64_t, std::span<std::byte>) { return error_code{}; });
  return ec ? 0 : into.size();
}

std::size_t uring_reader::read(std::uint64_t offset, std::span<std::byte> into) {
  error_code ec;
  const std::size_t n = read(offset, into, ec);
  detail::throw_on_error(ec, "sluice::file::uring_reader::read");
  return n;
}

}  // namespace sluice::file
