// SPDX-License-Identifier: Apache-2.0
// The job runner (transfer_job.hpp). Every completion runs on this thread's io_context, which
// starts the next item: the client's threads move the bytes (and write a download's into its
// file as they arrive), this one renames finished files and reports. Memory stays bounded: a
// download holds the client's small receive buffers, a copy nothing (the server copies).
#include "transfer_job.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::cli {

namespace {

namespace asio = boost::asio;
using steady = std::chrono::steady_clock;

sluice::error_code last_errno() { return {errno, boost::system::system_category()}; }

// A download's temporary file beside its target: removed unless committed.
class temporary_file {
 public:
  temporary_file() = default;
  temporary_file(const temporary_file&) = delete;
  temporary_file& operator=(const temporary_file&) = delete;
  ~temporary_file() { discard(); }

  // Makes the file in the target's directory (created as needed); ec on failure.
  void create(const std::string& target, sluice::error_code& ec) {
    const std::filesystem::path where = std::filesystem::path(target).parent_path();
    std::error_code made;
    if (!where.empty()) std::filesystem::create_directories(where, made);
    std::string pattern = (where.empty() ? std::string(".") : where.string()) + "/.sluice-XXXXXX.partial";
    fd_ = ::mkostemps(pattern.data(), 8, O_CLOEXEC);
    if (fd_ < 0) {
      ec = last_errno();
      return;
    }
    path_ = pattern;
  }
  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

  // Sets the mtime (when given), closes and renames the file to `target`.
  void commit(const std::string& target, std::chrono::system_clock::time_point modified, sluice::error_code& ec) {
    if (modified != std::chrono::system_clock::time_point{}) {
      const auto since = modified.time_since_epoch();
      const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since);
      const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(since - seconds);
      const std::array<timespec, 2> times{timespec{0, UTIME_OMIT}, timespec{seconds.count(), nanos.count()}};
      (void)::futimens(fd_, times.data());
    }
    (void)::fchmod(fd_, static_cast<mode_t>(0644U & ~current_umask()));
    const int closed = ::close(fd_);
    fd_ = -1;
    if (closed != 0 || ::rename(path_.c_str(), target.c_str()) != 0) {
      ec = last_errno();
      return;
    }
    path_.clear();
  }

  void discard() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!path_.empty()) ::unlink(path_.c_str());
    path_.clear();
  }

 private:
  static mode_t current_umask() {
    static const mode_t mask = [] {
      const mode_t m = ::umask(022);
      ::umask(m);
      return m;
    }();
    return mask;
  }
  int fd_ = -1;
  std::string path_;
};

// Bytes of an item in flight, for the progress line: the callbacks run on the client's threads.
struct item_progress {
  std::atomic<std::uint64_t>* total_in_flight = nullptr;
  std::uint64_t counted = 0;

  void report(std::uint64_t now) {
    if (now > counted) {
      total_in_flight->fetch_add(now - counted);
    } else {
      total_in_flight->fetch_sub(counted - now);
    }
    counted = now;
  }
};

// Address space the size of an object, reserved and never mapped to memory (PROT_NONE,
// MAP_NORESERVE: no commit charge, so any size fits): the destination a sink's GET names, which
// the client never writes (get_options::sink). Anything that touched it would fault at once.
class unwritten_range {
 public:
  explicit unwritten_range(std::uint64_t size) : size_(std::max<std::size_t>(static_cast<std::size_t>(size), 1)) {
    void* at = ::mmap(nullptr, size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    base_ = at == MAP_FAILED ? nullptr : static_cast<std::byte*>(at);
  }
  unwritten_range(const unwritten_range&) = delete;
  unwritten_range& operator=(const unwritten_range&) = delete;
  ~unwritten_range() {
    if (base_ != nullptr) ::munmap(base_, size_);
  }
  [[nodiscard]] std::byte* data() const noexcept { return base_; }

 private:
  std::size_t size_;
  std::byte* base_ = nullptr;
};

// A download in flight: GETs (in parts, parts_in_flight at once, as the library reads into
// memory) whose bytes the client hands over as they arrive, through its small buffer that stays
// in the core's cache, and that are written into the temporary file there with pwrite. No window
// of the object is held in memory, and the file's pages are never mapped: mapping 4 KiB pages of
// a new file cost more than the second copy (a 1 GiB cp to tmpfs: 0.83 against 0.70 CPU-s).
// A large object of a known version goes as several ranged GETs, pieces, each an operation of its
// own: the parts of one operation share its strand, so its pwrites (making the file's new pages)
// and its receiving take one io thread at a time; pieces spread them over the client's io threads.
struct download {
  job_item item;
  temporary_file file;
  std::unique_ptr<unwritten_range> unwritten;
  std::size_t pieces = 1;
  std::vector<std::shared_ptr<item_progress>> progress;  // one per piece (each reports on its strand)
  std::unique_ptr<asio::cancellation_signal[]> stop;     // a failed piece stops the others
  std::size_t pending = 0;                               // pieces not ended (on the job's thread)
  sluice::error_code failed;

  // Where piece `i` starts; its end is the next one's start.
  [[nodiscard]] std::uint64_t piece_start(std::size_t i) const noexcept {
    return i >= pieces ? item.size : item.size / pieces * i;
  }
  void report_none() const {
    for (const auto& p : progress) p->report(0);
  }
};

// How many pieces an object of `size` goes in: one per io thread, each at least
// 2 x parts_in_flight parts (smaller ones would not keep their parts busy); one when the version
// is not pinned (pieces of different versions must never make one file).
std::size_t download_pieces(const s3::client_config& config, std::uint64_t size, bool pinned) {
  if (!pinned) return 1;
  const std::uint64_t least = 2 * config.part_size * config.parts_in_flight;
  return static_cast<std::size_t>(std::clamp<std::uint64_t>(size / std::max<std::uint64_t>(least, 1), 1,
                                                            std::max<std::size_t>(config.io_threads, 1)));
}

class job_runner {
 public:
  job_runner(s3::client& client, std::vector<job_item> items, const job_options& options,
             std::vector<std::string> failed_early)
      : client_(client),
        items_(std::move(items)),
        options_(options),
        failures_(std::move(failed_early)),
        early_failures_(failures_.size()),
        redraw_(io_),
        signals_(io_, SIGINT, SIGTERM) {
    for (const auto& item : items_) total_bytes_ += item.size;
  }

  int run() {
    started_ = steady::now();
    signals_.async_wait([this](const sluice::error_code& ec, int signal_number) {
      if (ec) return;
      interrupted_ = signal_number;
      client_.cancel();
    });
    start_more();
    if (options_.progress) {
      draw();  // the first frame at once, then ten a second
      schedule_redraw();
    }
    io_.run();
    return finish();
  }

 private:
  void start_more() {
    while (interrupted_ == 0 && running_ < options_.jobs && next_ < items_.size()) launch(next_++);
    if (running_ == 0) {
      signals_.cancel();
      redraw_.cancel();
    }
  }

  template <class Handler>
  auto here(Handler&& handler) {
    return asio::bind_executor(io_, std::forward<Handler>(handler));
  }

  void launch(std::size_t index) {
    ++running_;
    job_item& item = items_[index];
    const auto began = steady::now();
    switch (item.op) {
      case job_item::kind::upload: upload(index, item.local, began); break;
      case job_item::kind::download: start_download(index, began); break;
      case job_item::kind::copy: copy(index, began); break;
      case job_item::kind::remove:
        client_.async_delete_object(item.target.bucket, item.target.key,
                                    here([this, index, began](sluice::error_code ec) { done(index, ec, "", began); }));
        break;
      case job_item::kind::remove_local: {
        std::error_code removed;
        std::filesystem::remove(item.local, removed);
        asio::post(io_, [this, index, began, removed] {
          done(index,
               removed ? sluice::error_code(removed.value(), boost::system::system_category()) : sluice::error_code(),
               "", began);
        });
        break;
      }
    }
  }

  s3::put_options put_options(const std::shared_ptr<item_progress>& progress) const {
    s3::put_options put;
    put.attributes.content_type = options_.content_type;
    put.via = options_.via;
    if (options_.progress) put.progress = [progress](std::uint64_t done, std::uint64_t) { progress->report(done); };
    return put;
  }

  void upload(std::size_t index, const std::string& file, steady::time_point began) {
    const job_item& item = items_[index];
    auto progress = std::make_shared<item_progress>();
    progress->total_in_flight = &in_flight_;
    client_.async_put_object(item.target.bucket, item.target.key, std::filesystem::path(file), put_options(progress),
                             here([this, index, began, progress](sluice::error_code ec, const std::string& etag) {
                               progress->report(0);
                               done(index, ec, etag, began);
                             }));
  }

  // Inside the server (CopyObject; UploadPartCopy above 5 GiB): no byte comes here, no local file.
  void copy(std::size_t index, steady::time_point began) {
    const job_item& item = items_[index];
    auto progress = std::make_shared<item_progress>();
    progress->total_in_flight = &in_flight_;
    s3::copy_options options;
    options.if_match = item.etag;  // the listed version, or nothing
    options.source_size = item.size;
    if (options_.progress) options.progress = [progress](std::uint64_t done, std::uint64_t) { progress->report(done); };
    client_.async_copy_object(item.source.bucket, item.source.key, item.target.bucket, item.target.key,
                              std::move(options),
                              here([this, index, began, progress](sluice::error_code ec, const std::string& etag) {
                                progress->report(0);
                                done(index, ec, etag, began);
                              }));
  }

  void start_download(std::size_t index, steady::time_point began) {
    auto d = std::make_shared<download>();
    d->item = items_[index];
    d->pieces = download_pieces(client_.config(), d->item.size, !d->item.etag.empty());
    for (std::size_t i = 0; i < d->pieces; ++i) {
      d->progress.push_back(std::make_shared<item_progress>());
      d->progress.back()->total_in_flight = &in_flight_;
    }
    d->stop = std::make_unique<asio::cancellation_signal[]>(d->pieces);
    sluice::error_code failed;
    d->file.create(d->item.local, failed);  // beside its target
    if (!failed && d->item.size > 0) {
      d->unwritten = std::make_unique<unwritten_range>(d->item.size);
      if (d->unwritten->data() == nullptr) failed = last_errno();
    }
    if (failed) {
      asio::post(io_, [this, index, failed, began] { done(index, failed, "", began); });
      return;
    }
    if (d->item.size == 0) {  // nothing to fetch
      asio::post(io_, [this, index, d, began] { finish_download(index, d, began); });
      return;
    }
    d->pending = d->pieces;
    for (std::size_t i = 0; i < d->pieces; ++i) start_piece(index, d, i, began);
  }

  void start_piece(std::size_t index, const std::shared_ptr<download>& d, std::size_t i, steady::time_point began) {
    const std::uint64_t first = d->piece_start(i);
    const std::uint64_t length = d->piece_start(i + 1) - first;
    s3::get_options get;
    get.via = s3::transfer_via::http;  // a sink takes the bytes of HTTP bodies
    get.if_match = d->item.etag;
    if (d->pieces > 1) get.range = sluice::byte_range{first, length};
    if (options_.progress) get.progress = [p = d->progress[i]](std::uint64_t done, std::uint64_t) { p->report(done); };
    // On a client thread; a retried request writes its range again. An error fails the GET at once.
    get.sink = [fd = d->file.fd(), first](std::uint64_t at, std::span<const std::byte> bytes) {
      const int error = write_all(fd, bytes.data(), bytes.size(), first + at);
      return error != 0 ? sluice::error_code(error, boost::system::system_category()) : sluice::error_code();
    };
    client_.async_get_object(
        d->item.source.bucket, d->item.source.key,
        sluice::region{d->unwritten->data() + first, static_cast<std::size_t>(length)}, std::move(get),
        asio::bind_cancellation_slot(d->stop[i].slot(),
                                     here([this, index, d, i, length, began](sluice::error_code ec, std::uint64_t got) {
                                       if (!ec && got != length) ec = s3::errc::precondition_failed;  // not as listed
                                       if (ec && !d->failed) {
                                         d->failed = ec;
                                         for (std::size_t other = 0; other < d->pieces; ++other) {
                                           if (other != i) d->stop[other].emit(asio::cancellation_type::terminal);
                                         }
                                       }
                                       if (--d->pending > 0) return;
                                       d->unwritten.reset();
                                       if (d->failed) {
                                         d->report_none();
                                         d->file.discard();
                                         done(index, d->failed, "", began);
                                         return;
                                       }
                                       finish_download(index, d, began);
                                     })));
  }

  void finish_download(std::size_t index, const std::shared_ptr<download>& d, steady::time_point began) {
    sluice::error_code ec;
    d->file.commit(d->item.local, d->item.modified, ec);
    d->report_none();
    d->file.discard();
    done(index, ec, d->item.etag, began);
  }

  void done(std::size_t index, sluice::error_code ec, const std::string& etag, steady::time_point began) {
    --running_;
    const job_item& item = items_[index];
    const bool aborted = ec == asio::error::operation_aborted && interrupted_ != 0;
    if (!ec) {
      ++files_done_;
      bytes_done_ += item.size;
    } else if (!aborted) {
      const bool local = ec.category() == boost::system::system_category() && item.op != job_item::kind::remove;
      failures_.push_back(describe_item(item) + ": " + (local ? ec.message() : describe(ec, client_.config())));
      clear_line();
      std::fprintf(stderr, "sluice %s: %s\n", options_.command, failures_.back().c_str());
    }
    if (options_.json && !aborted) print_item(item, ec, etag, began);
    start_more();
  }

  void print_item(const job_item& item, const sluice::error_code& ec, const std::string& etag,
                  steady::time_point began) {
    static constexpr std::array<const char*, 5> names = {"upload", "download", "copy", "delete", "delete"};
    json_line line;
    line.text("op", names[static_cast<std::size_t>(item.op)]);
    switch (item.op) {
      case job_item::kind::upload: line.text("source", item.local).text("target", url_text(item.target)); break;
      case job_item::kind::download: line.text("source", url_text(item.source)).text("target", item.local); break;
      case job_item::kind::copy:
        line.text("source", url_text(item.source)).text("target", url_text(item.target));
        break;
      case job_item::kind::remove: line.text("target", url_text(item.target)); break;
      case job_item::kind::remove_local: line.text("target", item.local); break;
    }
    line.number("bytes", ec ? 0 : item.size).text("etag", etag);
    line.seconds("seconds", std::chrono::duration<double>(steady::now() - began).count());
    if (ec) {
      line.text("error", describe(ec, client_.config()));
    } else {
      line.null("error");
    }
    line.print();
  }

  void schedule_redraw() {
    redraw_.expires_after(std::chrono::milliseconds(100));
    redraw_.async_wait([this](const sluice::error_code& ec) {
      if (ec) return;
      draw();
      schedule_redraw();
    });
  }

  void draw() {
    const double seconds = std::chrono::duration<double>(steady::now() - started_).count();
    const std::uint64_t moved = bytes_done_ + in_flight_.load();
    const double rate = seconds > 0 ? static_cast<double>(moved) / seconds : 0.0;
    std::string eta = "-";
    if (rate > 0 && total_bytes_ > moved) {
      eta = std::to_string(std::llround(static_cast<double>(total_bytes_ - moved) / rate)) + " s";
    }
    std::fprintf(stderr, "\r%s: %zu/%zu files, %s/%s, %s/s, ETA %s\x1b[K", options_.command, files_done_, items_.size(),
                 human_bytes(static_cast<double>(moved)).c_str(),
                 human_bytes(static_cast<double>(total_bytes_)).c_str(), human_bytes(rate).c_str(), eta.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }

  void clear_line() {
    if (!drawn_) return;
    std::fputs("\r\x1b[K", stderr);
    drawn_ = false;
  }

  int finish() {
    clear_line();
    const double seconds = std::chrono::duration<double>(steady::now() - started_).count();
    const std::size_t total = items_.size() + early_failures_;
    if (options_.json) {
      json_line line;
      line.text("summary", options_.command)
          .number("files", files_done_)
          .number("of", total)
          .number("failed", failures_.size())
          .number("bytes", bytes_done_)
          .seconds("seconds", seconds)
          .boolean("interrupted", interrupted_ != 0);
      line.print();
    }
    std::string text = std::string(options_.command) + ": " + std::to_string(files_done_) + " of " +
                       std::to_string(total) + " done, " + human_bytes(static_cast<double>(bytes_done_)) + " in " +
                       std::to_string(seconds).substr(0, std::to_string(seconds).find('.') + 3) + " s";
    if (seconds > 0 && bytes_done_ > 0) text += " (" + human_bytes(static_cast<double>(bytes_done_) / seconds) + "/s)";
    FILE* out = failures_.empty() && interrupted_ == 0 ? stdout : stderr;
    if (interrupted_ != 0) {
      text += "; interrupted by " + std::string(interrupted_ == SIGINT ? "SIGINT" : "SIGTERM") + ": " +
              std::to_string(total - files_done_ - failures_.size()) + " not done, no partial files left";
    }
    if (!failures_.empty()) text += "; " + std::to_string(failures_.size()) + " failed:";
    if (!options_.json || out == stderr) {
      std::fprintf(out, "%s\n", text.c_str());
      for (const std::string& failure : failures_) std::fprintf(out, "  %s\n", failure.c_str());
    }
    std::fflush(stdout);
    if (interrupted_ != 0) return 128 + interrupted_;
    return failures_.empty() ? 0 : 1;
  }

  s3::client& client_;
  std::vector<job_item> items_;
  job_options options_;
  std::vector<std::string> failures_;
  std::size_t early_failures_ = 0;
  asio::io_context io_;
  asio::steady_timer redraw_;
  asio::signal_set signals_;
  std::size_t next_ = 0;
  std::size_t running_ = 0;
  std::size_t files_done_ = 0;
  std::uint64_t bytes_done_ = 0;
  std::uint64_t total_bytes_ = 0;
  std::atomic<std::uint64_t> in_flight_{0};
  int interrupted_ = 0;
  bool drawn_ = false;
  steady::time_point started_;
};

}  // namespace

std::string describe_item(const job_item& item) {
  switch (item.op) {
    case job_item::kind::upload: return item.local + " -> " + printable_key(url_text(item.target));
    case job_item::kind::download: return printable_key(url_text(item.source)) + " -> " + item.local;
    case job_item::kind::copy:
      return printable_key(url_text(item.source)) + " -> " + printable_key(url_text(item.target));
    case job_item::kind::remove: return "delete " + printable_key(url_text(item.target));
    case job_item::kind::remove_local: return "delete " + item.local;
  }
  return {};
}

int run_job(s3::client& client, std::vector<job_item> items, const job_options& options,
            std::vector<std::string> failed_early) {
  if (options.dry_run) {
    for (const job_item& item : items) std::printf("(dry run) %s\n", describe_item(item).c_str());
    for (const std::string& failure : failed_early)
      std::fprintf(stderr, "sluice %s: %s\n", options.command, failure.c_str());
    return failed_early.empty() ? 0 : 1;
  }
  job_runner runner(client, std::move(items), options, std::move(failed_early));
  return runner.run();
}

int write_all(int fd, const std::byte* data, std::uint64_t n, std::uint64_t at) {
  for (std::uint64_t done = 0; done < n;) {
    const ssize_t w = ::pwrite(fd, data + done, static_cast<std::size_t>(n - done), static_cast<off_t>(at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    done += static_cast<std::uint64_t>(w);
  }
  return 0;
}

}  // namespace sluice::cli
