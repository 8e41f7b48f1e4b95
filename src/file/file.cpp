// Compiled part of sluice::file: the io_uring reader (liburing), the cuFile transport
// (libcufile, loaded with dlopen), the page-cache residency probe, the file negotiator and the
// io_uring transport into host memory. The only translation unit that includes <liburing.h>.
#include <sluice/file/cufile.hpp>
#include <sluice/file/negotiator.hpp>
#include <sluice/file/residency.hpp>
#include <sluice/file/transport.hpp>
#include <sluice/file/uring_reader.hpp>

#include <dlfcn.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/fs.h>  // BLKGETSIZE64
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/unique_fd.hpp"

namespace sluice::file {

namespace {

constexpr std::uint64_t block = direct_alignment;

error_code errno_error(int e) noexcept { return {e, boost::system::system_category()}; }

constexpr std::uint64_t align_down(std::uint64_t v) noexcept { return v & ~(block - 1); }
constexpr bool is_aligned(std::uint64_t v) noexcept { return v % block == 0; }
bool is_aligned(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p) % block == 0; }

std::optional<config_error> check_chunk_bytes(std::size_t chunk_bytes) {
  if (chunk_bytes < block || chunk_bytes > gib || chunk_bytes % block != 0) {
    return config_error{"chunk_bytes", "must be a multiple of 4096 between 4 KiB and 1 GiB"};
  }
  return std::nullopt;
}

using ::sluice::detail::unique_fd;

unique_fd open_read_only(const std::filesystem::path& path, bool direct) noexcept {
  const int flags = O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0);
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags);
  } while (fd < 0 && errno == EINTR);
  return unique_fd(fd);
}

/// The size of a regular file or a block device; errc::invalid_argument for anything else.
std::uint64_t readable_size(int fd, error_code& ec) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ec = errno_error(errno);
    return 0;
  }
  ec = {};
  if (S_ISREG(st.st_mode)) return static_cast<std::uint64_t>(st.st_size);
  if (S_ISBLK(st.st_mode)) {
    std::uint64_t bytes = 0;
    if (::ioctl(fd, BLKGETSIZE64, &bytes) != 0) {
      ec = errno_error(errno);
      return 0;
    }
    return bytes;
  }
  ec = errc::invalid_argument;  // a directory, FIFO, socket, character device: no size to range-check
  return 0;
}

/// A file opened for reading: O_DIRECT when asked and the file system takes it.
struct opened_file {
  unique_fd fd;
  bool direct = false;
  std::uint64_t size = 0;
};

opened_file open_for_reading(const std::filesystem::path& path, bool direct, error_code& ec) {
  opened_file out;
  out.fd = open_read_only(path, direct);
  out.direct = direct;
  if (!out.fd && direct && errno == EINVAL) {
    // The file system has no O_DIRECT (older tmpfs, procfs, some FUSE): read through the cache.
    out.fd = open_read_only(path, false);
    out.direct = false;
  }
  if (!out.fd) {
    ec = errno_error(errno);
    return {};
  }
  out.size = readable_size(out.fd.get(), ec);
  if (ec) return {};
  return out;
}

/// Memory aligned for O_DIRECT, freed on destruction.
struct aligned_delete {
  void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{block}); }
};
using aligned_bytes = std::unique_ptr<std::byte[], aligned_delete>;

aligned_bytes allocate_aligned(std::size_t size) {
  return aligned_bytes(static_cast<std::byte*>(::operator new[](size, std::align_val_t{block})));
}

bool range_inside(std::uint64_t offset, std::uint64_t length, std::uint64_t size) noexcept {
  return offset <= size && length <= size - offset;
}

}  // namespace

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

// -- cufile -----------------------------------------------------------------------------------------

namespace {

// The cuFile ABI, declared here so that sluice builds without cufile.h. Layouts and names from
// NVIDIA's "GDS cuFile API Reference Guide" (docs.nvidia.com/gpudirect-storage/api-reference-guide,
// §4.1 data types, §4.2–4.5 driver, I/O, handle and buffer APIs) and cuda-python's cuFile
// bindings generated from cufile.h 12.9–13.0 (NVIDIA/cuda-python, cuda_bindings/cuda/bindings/
// cycufile.pxd). cufile.h renames cuFileDriverClose to cuFileDriverClose_v2 (reference-counted
// since GDS 1.6); libcufile exports both names.
namespace abi {

constexpr int base_error = 5000;                   // CUFILEOP_BASE_ERR: cuFile errors are above it
constexpr int driver_already_open = 5026;          // CU_FILE_DRIVER_ALREADY_OPEN
constexpr int handle_type_opaque_fd = 1;           // CU_FILE_HANDLE_TYPE_OPAQUE_FD
constexpr unsigned control_allow_compat_mode = 1;  // bit index CU_FILE_ALLOW_COMPAT_MODE in dcontrolflags

// CUfileError_t { CUfileOpError err; CUresult cu_err; }: two enums, 4 bytes each.
struct error_t {
  int err;
  int cu_err;
};

// CUfileDescr_t { CUfileFileHandleType type; union { int fd; void* handle; } handle;
//                 const CUfileFSOps_t* fs_ops; }
struct descr_t {
  int type;
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};
static_assert(sizeof(descr_t) == 24 && offsetof(descr_t, handle) == 8 && offsetof(descr_t, fs_ops) == 16);

// The first member of CUfileDrvProps_t; the members after it changed between GDS versions, so
// cuFileDriverGetProperties writes into a larger buffer and only this prefix is read.
struct drv_props_nvfs {
  unsigned major_version;
  unsigned minor_version;
  std::size_t poll_thresh_size;
  std::size_t max_direct_io_size;
  unsigned dstatusflags;
  unsigned dcontrolflags;
};

using handle_t = void*;  // CUfileHandle_t
using driver_open_fn = error_t (*)();
using driver_close_fn = error_t (*)();
using get_properties_fn = error_t (*)(void* props);
using handle_register_fn = error_t (*)(handle_t* fh, descr_t* descr);
using handle_deregister_fn = void (*)(handle_t fh);
using buf_register_fn = error_t (*)(const void* base, std::size_t length, int flags);
using buf_deregister_fn = error_t (*)(const void* base);
using read_fn = ssize_t (*)(handle_t fh, void* base, std::size_t size, off_t file_offset, off_t base_offset);

}  // namespace abi

class cufile_category_impl final : public boost::system::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "cufile"; }
  [[nodiscard]] std::string message(int value) const override {
    // CUfileOpError, in the words of the API reference (§4.1.3).
    switch (value) {
      case 5001: return "cuFile: the nvidia-fs driver is not loaded";
      case 5002: return "cuFile: invalid property";
      case 5003: return "cuFile: property range error";
      case 5004: return "cuFile: nvidia-fs driver version mismatch";
      case 5005: return "cuFile: nvidia-fs driver version read error";
      case 5006: return "cuFile: driver shutdown in progress";
      case 5007: return "cuFile: GDS is not supported on this platform";
      case 5008: return "cuFile: GDS is not supported on this file";
      case 5009: return "cuFile: GDS is not supported on this GPU";
      case 5010: return "cuFile: nvidia-fs driver ioctl error";
      case 5011: return "cuFile: CUDA driver API error";
      case 5012: return "cuFile: invalid device pointer";
      case 5013: return "cuFile: invalid pointer memory type";
      case 5014: return "cuFile: pointer range exceeds the allocated address range";
      case 5015: return "cuFile: CUDA context mismatch";
      case 5016: return "cuFile: access beyond the maximum pinned memory size";
      case 5017: return "cuFile: access beyond the mapped size";
      case 5018: return "cuFile: unsupported file type";
      case 5019: return "cuFile: unsupported file open flags";
      case 5020: return "cuFile: the file descriptor is not opened with O_DIRECT";
      case 5022: return "cuFile: invalid API arguments";
      case 5023: return "cuFile: device pointer already registered";
      case 5024: return "cuFile: device pointer lookup failure";
      case 5025: return "cuFile: driver or file access error";
      case 5026: return "cuFile: driver already open";
      case 5027: return "cuFile: file descriptor not registered";
      case 5028: return "cuFile: file descriptor already registered";
      case 5029: return "cuFile: GPU device not found";
      case 5030: return "cuFile: internal error";
      case 5031: return "cuFile: failed to obtain a new file descriptor";
      case 5033: return "cuFile: nvidia-fs driver initialization error";
      case 5034: return "cuFile: GDS disabled by configuration for this file";
      case 5036: return "cuFile: failed to allocate pinned GPU memory";
      case 5043: return "cuFile: out of memory";
      case 5044: return "cuFile: I/O error";
      case 5045: return "cuFile: buffer registration error";
      case 5047: return "cuFile: invalid CUDA context";
      case 5048: return "cuFile: nvidia-fs internal driver error";
      case 5049: return "cuFile: compatibility mode is off";
      default: return "cuFile error " + std::to_string(value);
    }
  }
};

error_code cufile_error(const abi::error_t& e) noexcept { return {e.err, cufile_category()}; }

/// libcufile's entry points, resolved once per process. The library is never unloaded: cuFile
/// starts threads of its own, and a driver reference of another component may still be open.
struct cufile_library {
  std::string error;  // why it is unusable; empty when it is usable
  abi::driver_open_fn driver_open = nullptr;
  abi::driver_close_fn driver_close = nullptr;  // cuFileDriverClose_v2; null before GDS 1.6
  abi::get_properties_fn get_properties = nullptr;
  abi::handle_register_fn handle_register = nullptr;
  abi::handle_deregister_fn handle_deregister = nullptr;
  abi::buf_register_fn buf_register = nullptr;
  abi::buf_deregister_fn buf_deregister = nullptr;
  abi::read_fn read = nullptr;
};

template <class Fn>
void resolve(void* library, const char* symbol, Fn& fn) noexcept {
  // POSIX guarantees that a dlsym result converts to the function pointer type it names.
  fn = reinterpret_cast<Fn>(::dlsym(library, symbol));
}

cufile_library load_cufile() {
  cufile_library lib;
  void* handle = ::dlopen("libcufile.so.0", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    // dlerror's buffer is per thread in glibc; this runs once, under the static's guard.
    const char* why = ::dlerror();  // NOLINT(concurrency-mt-unsafe)
    lib.error = why != nullptr ? why : "libcufile.so.0 could not be loaded";
    return lib;
  }
  resolve(handle, "cuFileDriverOpen", lib.driver_open);
  resolve(handle, "cuFileDriverClose_v2", lib.driver_close);
  resolve(handle, "cuFileDriverGetProperties", lib.get_properties);
  resolve(handle, "cuFileHandleRegister", lib.handle_register);
  resolve(handle, "cuFileHandleDeregister", lib.handle_deregister);
  resolve(handle, "cuFileBufRegister", lib.buf_register);
  resolve(handle, "cuFileBufDeregister", lib.buf_deregister);
  resolve(handle, "cuFileRead", lib.read);
  const std::pair<const char*, bool> required[] = {
      {"cuFileDriverOpen", lib.driver_open != nullptr},
      {"cuFileHandleRegister", lib.handle_register != nullptr},
      {"cuFileHandleDeregister", lib.handle_deregister != nullptr},
      {"cuFileBufRegister", lib.buf_register != nullptr},
      {"cuFileBufDeregister", lib.buf_deregister != nullptr},
      {"cuFileRead", lib.read != nullptr},
  };
  for (const auto& [symbol, found] : required) {
    if (!found) {
      lib.error = std::string("libcufile.so.0 does not export ") + symbol;
      break;
    }
  }
  return lib;
}

const cufile_library& cufile() {
  static const cufile_library lib = load_cufile();
  return lib;
}

/// A registered CUfileHandle_t, deregistered on destruction.
class file_handle {
 public:
  file_handle() = default;
  explicit file_handle(abi::handle_t h) noexcept : handle_(h) {}
  file_handle(file_handle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  file_handle& operator=(file_handle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  file_handle(const file_handle&) = delete;
  file_handle& operator=(const file_handle&) = delete;
  ~file_handle() { reset(); }
  [[nodiscard]] abi::handle_t get() const noexcept { return handle_; }

 private:
  void reset() noexcept {
    if (handle_ != nullptr) cufile().handle_deregister(std::exchange(handle_, nullptr));
  }
  abi::handle_t handle_ = nullptr;
};

/// Device memory registered with cuFileBufRegister for one read, deregistered on destruction.
class buffer_registration {
 public:
  buffer_registration(const void* base, std::size_t length) noexcept
      : base_(cufile().buf_register(base, length, 0).err == 0 ? base : nullptr) {}
  buffer_registration(const buffer_registration&) = delete;
  buffer_registration& operator=(const buffer_registration&) = delete;
  ~buffer_registration() {
    if (base_ != nullptr) static_cast<void>(cufile().buf_deregister(base_));
  }
  [[nodiscard]] bool registered() const noexcept { return base_ != nullptr; }

 private:
  const void* base_;
};

}  // namespace

const boost::system::error_category& cufile_category() noexcept {
  static const cufile_category_impl category;
  return category;
}

std::optional<config_error> cufile_config::validate() const { return check_chunk_bytes(chunk_bytes); }

bool cufile_available(error_code& ec) noexcept {
  try {
    ec = cufile().error.empty() ? error_code{} : error_code(errc::unavailable);
  } catch (const std::bad_alloc&) {
    ec = make_error_code(boost::system::errc::not_enough_memory);
  }
  return !ec;
}

std::string cufile_unavailable_reason() { return cufile().error; }

cufile_driver cufile_driver::open(error_code& ec) {
  const cufile_library& lib = cufile();
  if (!lib.error.empty()) {
    ec = errc::unavailable;
    return {};
  }
  const abi::error_t e = lib.driver_open();
  if (e.err == abi::driver_already_open) {
    ec = {};  // a library without reference counting, opened before: nothing of ours to close
    return {};
  }
  if (e.err != 0) {
    ec = cufile_error(e);
    return {};
  }
  ec = {};
  // Without cuFileDriverClose_v2 closing would tear the driver down under every other user.
  return cufile_driver(lib.driver_close != nullptr);
}

cufile_driver cufile_driver::open() {
  error_code ec;
  cufile_driver driver = open(ec);
  detail::throw_on_error(ec, "sluice::file::cufile_driver::open");
  return driver;
}

cufile_driver::cufile_driver(cufile_driver&& other) noexcept : owned_(std::exchange(other.owned_, false)) {}
cufile_driver& cufile_driver::operator=(cufile_driver&& other) noexcept {
  if (this != &other) {
    reset();
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}
cufile_driver::~cufile_driver() { reset(); }

void cufile_driver::reset() noexcept {
  if (std::exchange(owned_, false)) static_cast<void>(cufile().driver_close());
}

cufile_properties cufile_driver::properties() const {
  cufile_properties out;
  const cufile_library& lib = cufile();
  if (!lib.error.empty() || lib.get_properties == nullptr) return out;
  // Room for every CUfileDrvProps_t layout so far (under 100 bytes) and then some.
  alignas(std::max_align_t) std::byte props[512]{};
  if (lib.get_properties(props).err != 0) return out;
  abi::drv_props_nvfs nvfs{};
  std::memcpy(&nvfs, props, sizeof nvfs);
  out.nvfs_major = nvfs.major_version;
  out.nvfs_minor = nvfs.minor_version;
  out.compat_mode_allowed = (nvfs.dcontrolflags & (1U << abi::control_allow_compat_mode)) != 0;
  return out;
}

struct cufile_reader::state {
  cufile_config config;
  // Declared in acquisition order: destroyed handle first, then the descriptor, then the driver.
  cufile_driver driver;
  unique_fd fd;
  file_handle handle;
  std::uint64_t size = 0;
  bool direct = false;
  bool registered = false;
  cufile_properties properties;
};

cufile_reader::cufile_reader() noexcept = default;
cufile_reader::cufile_reader(std::unique_ptr<state> s) noexcept : state_(std::move(s)) {}
cufile_reader::cufile_reader(cufile_reader&& other) noexcept = default;
cufile_reader& cufile_reader::operator=(cufile_reader&& other) noexcept = default;
cufile_reader::~cufile_reader() = default;

cufile_reader cufile_reader::open(const std::filesystem::path& path, const cufile_config& config, error_code& ec) {
  if (config.validate()) {
    ec = errc::invalid_config;
    return {};
  }
  auto s = std::make_unique<state>();
  s->config = config;
  s->driver = cufile_driver::open(ec);
  if (ec) return {};
  s->properties = s->driver.properties();
  opened_file file = open_for_reading(path, config.direct, ec);
  if (ec) return {};
  s->fd = std::move(file.fd);
  s->size = file.size;
  s->direct = file.direct;
  abi::descr_t descr{};
  descr.type = abi::handle_type_opaque_fd;
  descr.handle.fd = s->fd.get();
  abi::handle_t handle = nullptr;
  if (const abi::error_t e = cufile().handle_register(&handle, &descr); e.err != 0) {
    ec = cufile_error(e);
    return {};
  }
  s->handle = file_handle(handle);
  ec = {};
  return cufile_reader(std::move(s));
}

cufile_reader cufile_reader::open(const std::filesystem::path& path, const cufile_config& config) {
  error_code ec;
  cufile_reader reader = open(path, config, ec);
  detail::throw_on_error(ec, "sluice::file::cufile_reader::open");
  return reader;
}

std::uint64_t cufile_reader::size() const noexcept { return state_ ? state_->size : 0; }
bool cufile_reader::direct() const noexcept { return state_ && state_->direct; }
const cufile_properties& cufile_reader::properties() const noexcept {
  static const cufile_properties none{};
  return state_ ? state_->properties : none;
}
bool cufile_reader::registered() const noexcept { return state_ && state_->registered; }
void* cufile_reader::native_handle() const noexcept { return state_ ? state_->handle.get() : nullptr; }

std::size_t cufile_reader::read(std::uint64_t offset, const region& destination, error_code& ec) {
  if (!state_ || (destination.data == nullptr && destination.size != 0)) {
    ec = errc::invalid_argument;
    return 0;
  }
  if (destination.kind != memory_kind::cuda_device) {
    ec = errc::unsupported_memory;
    return 0;
  }
  if (!range_inside(offset, destination.size, state_->size)) {
    ec = errc::bad_range;
    return 0;
  }
  state_->registered = false;
  ec = {};
  if (destination.size == 0) return 0;
  std::optional<buffer_registration> registration;
  if (state_->config.register_buffer) {
    registration.emplace(destination.data, destination.size);
    state_->registered = registration->registered();
  }
  const cufile_library& lib = cufile();
  std::size_t done = 0;
  while (done < destination.size) {
    const std::size_t length = std::min(state_->config.chunk_bytes, destination.size - done);
    // Base and offset rather than base + done: a registered buffer is found by its base.
    const ssize_t r = lib.read(state_->handle.get(), destination.data, length, static_cast<off_t>(offset + done),
                               static_cast<off_t>(done));
    if (r > 0) {
      done += static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) {
      ec = errc::bad_range;  // end of file before the range's end: the file shrank
    } else if (r == -1) {
      if (errno == EINTR || errno == EAGAIN) continue;
      ec = errno_error(errno);
    } else if (-r > abi::base_error) {
      ec = {static_cast<int>(-r), cufile_category()};
    } else {
      ec = errno_error(static_cast<int>(-r));
    }
    return 0;
  }
  return destination.size;
}

std::size_t cufile_reader::read(std::uint64_t offset, const region& destination) {
  error_code ec;
  const std::size_t n = read(offset, destination, ec);
  detail::throw_on_error(ec, "sluice::file::cufile_reader::read");
  return n;
}

// -- page-cache residency ---------------------------------------------------------------------------

namespace {

// cachestat(2), Linux 6.5: one syscall number on every architecture. The C library may lack
// both the number and the structures (glibc 2.36, kernel headers 6.1): declared here.
#ifdef __NR_cachestat
constexpr long cachestat_syscall = __NR_cachestat;
#else
constexpr long cachestat_syscall = 451;
#endif
struct cachestat_range_abi {
  std::uint64_t off;
  std::uint64_t len;
};
struct cachestat_abi {
  std::uint64_t nr_cache;
  std::uint64_t nr_dirty;
  std::uint64_t nr_writeback;
  std::uint64_t nr_evicted;
  std::uint64_t nr_recently_evicted;
};

std::uint64_t page_bytes() noexcept {
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

/// cachestat of whole pages [first_page, first_page + pages): the resident count, or the errno.
std::uint64_t count_cachestat(int fd, std::uint64_t first_page, std::uint64_t pages, int& error) noexcept {
  cachestat_range_abi range{first_page * page_bytes(), pages * page_bytes()};
  cachestat_abi stat{};
  if (::syscall(cachestat_syscall, fd, &range, &stat, 0U) != 0) {
    error = errno;
    return 0;
  }
  error = 0;
  // Pages cut by the end of the file count as cached when their folio is: at most `pages`.
  return std::min(stat.nr_cache, pages);
}

/// mincore over a read-only mapping of the pages, unmapped again.
std::uint64_t count_mincore(int fd, std::uint64_t first_page, std::uint64_t pages, error_code& ec) {
  const std::uint64_t page = page_bytes();
  if (pages > std::numeric_limits<std::size_t>::max() / page) {
    ec = errc::bad_range;
    return 0;
  }
  const std::size_t length = static_cast<std::size_t>(pages * page);
  void* map = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(first_page * page));
  if (map == MAP_FAILED) {
    ec = errno_error(errno);
    return 0;
  }
  std::vector<unsigned char> in(static_cast<std::size_t>(pages));
  const int r = ::mincore(map, length, in.data());
  const int saved = errno;
  static_cast<void>(::munmap(map, length));
  if (r != 0) {
    ec = errno_error(saved);
    return 0;
  }
  ec = {};
  return static_cast<std::uint64_t>(std::count_if(in.begin(), in.end(), [](unsigned char c) { return (c & 1U) != 0; }));
}

}  // namespace

const char* to_string(residency_probe p) noexcept {
  switch (p) {
    case residency_probe::automatic: return "automatic";
    case residency_probe::cachestat: return "cachestat";
    case residency_probe::mincore: return "mincore";
  }
  return "?";
}

page_residency page_cache_residency(int fd, std::uint64_t offset, std::uint64_t length, residency_probe probe,
                                    error_code& ec) {
  if (probe != residency_probe::automatic && probe != residency_probe::cachestat && probe != residency_probe::mincore) {
    ec = errc::invalid_config;
    return {};
  }
  const std::uint64_t size = readable_size(fd, ec);
  if (ec) return {};
  if (!range_inside(offset, length, size)) {
    ec = errc::bad_range;
    return {};
  }
  page_residency out;
  out.probe = probe == residency_probe::mincore ? residency_probe::mincore : residency_probe::cachestat;
  if (length == 0) return out;
  const std::uint64_t page = page_bytes();
  const std::uint64_t first = offset / page;
  out.pages = (offset + length - 1) / page - first + 1;
  if (out.probe == residency_probe::cachestat) {
    int error = 0;
    out.resident = count_cachestat(fd, first, out.pages, error);
    if (error == 0) return out;
    // No cachestat here (older kernel, a seccomp filter, a file system without it).
    if (probe == residency_probe::cachestat || (error != ENOSYS && error != EOPNOTSUPP && error != EPERM)) {
      ec = errno_error(error);
      return {};
    }
    out.probe = residency_probe::mincore;
  }
  out.resident = count_mincore(fd, first, out.pages, ec);
  if (ec) return {};
  return out;
}

page_residency page_cache_residency(const std::filesystem::path& path, std::uint64_t offset, std::uint64_t length,
                                    residency_probe probe, error_code& ec) {
  const unique_fd fd = open_read_only(path, false);
  if (!fd) {
    ec = errno_error(errno);
    return {};
  }
  return page_cache_residency(fd.get(), offset, length, probe, ec);
}

page_residency page_cache_residency(const std::filesystem::path& path, std::uint64_t offset, std::uint64_t length,
                                    residency_probe probe) {
  error_code ec;
  const page_residency r = page_cache_residency(path, offset, length, probe, ec);
  detail::throw_on_error(ec, "sluice::file::page_cache_residency");
  return r;
}

// -- negotiator ------------------------------------------------------------------------------------

std::shared_ptr<const open_file> open_file::open(const std::filesystem::path& path, error_code& ec) {
  unique_fd fd = open_read_only(path, false);
  if (!fd) {
    ec = errno_error(errno);
    return nullptr;
  }
  const std::uint64_t size = readable_size(fd.get(), ec);
  if (ec) return nullptr;
  auto file = std::shared_ptr<const open_file>(new open_file(fd.get(), path, size));
  static_cast<void>(fd.release());  // the open_file closes it now
  return file;
}

open_file::~open_file() { static_cast<void>(::close(fd_)); }

negotiator::session negotiator::negotiate(const transfer_request& request, error_code& ec) const {
  session s;
  if (request.dir != direction::get || !request.object.bucket.empty() || request.object.key.empty()) {
    ec = errc::invalid_argument;
    return s;
  }
  s.remote_.file = open_file::open(request.object.key, ec);
  if (ec) return s;
  const extent e = resolve(request.range, s.remote_.file->size(), ec);
  if (ec) return s;
  if (options_.probe_residency) {
    s.remote_.residency =
        page_cache_residency(s.remote_.file->fd(), e.offset, e.length, residency_probe::automatic, ec);
    if (ec) return s;
  }
  s.span_ = {0, e.offset, e.length};
  return s;
}

// -- uring_transport ------------------------------------------------------------------------------

error_code check_read(const region& local, const file_remote& remote, transfer_span span, bool device_memory) noexcept {
  if (!local.contains(span.local_offset, span.length)) return errc::region_too_small;
  if (!range_inside(span.remote_offset, span.length, remote.size())) return errc::bad_range;
  if (device_memory == local.host_accessible()) return errc::unsupported_memory;
  return {};
}

std::size_t uring_transport::read(const region& local, const file_remote& remote, transfer_span span,
                                  error_code& ec) const {
  if ((ec = check_read(local, remote, span, false))) return 0;
  if (local.data == nullptr && span.length != 0) {
    ec = errc::invalid_argument;
    return 0;
  }
  if (span.length == 0) return 0;
  uring_reader reader = uring_reader::open(remote.file->path(), config_, ec);
  if (ec) return 0;
  const std::span<std::byte> into(local.bytes() + span.local_offset, static_cast<std::size_t>(span.length));
  return reader.read(span.remote_offset, into, ec);
}

}  // namespace sluice::file
