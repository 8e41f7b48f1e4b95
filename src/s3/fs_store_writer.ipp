// SPDX-License-Identifier: Apache-2.0
// The writer (staged in a temporary file, published by rename) and the mapping of an object.
// Part of fs_store's implementation (include/sluice/s3/fs_store.hpp), included by src/s3/fs_store.ipp
// in the order written there.

namespace sluice::s3 {

// --- writer and mapping ----------------------------------------------------------------------

fs_store::writer::writer(writer&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)),
      fd_(std::exchange(other.fd_, -1)),
      temp_(std::exchange(other.temp_, {})),
      object_(std::move(other.object_)),
      data_offset_(std::exchange(other.data_offset_, 0)),
      written_(std::exchange(other.written_, 0)),
      pending_(std::move(other.pending_)),
      upload_id_(std::move(other.upload_id_)),
      part_number_(std::exchange(other.part_number_, 0)),
      precondition_(std::exchange(other.precondition_, {})) {}

fs_store::writer& fs_store::writer::operator=(writer&& other) noexcept {
  if (this != &other) {
    reset();
    store_ = std::exchange(other.store_, nullptr);
    fd_ = std::exchange(other.fd_, -1);
    temp_ = std::exchange(other.temp_, {});
    object_ = std::move(other.object_);
    data_offset_ = std::exchange(other.data_offset_, 0);
    written_ = std::exchange(other.written_, 0);
    pending_ = std::move(other.pending_);
    upload_id_ = std::move(other.upload_id_);
    part_number_ = std::exchange(other.part_number_, 0);
    precondition_ = std::exchange(other.precondition_, {});
  }
  return *this;
}

fs_store::writer::~writer() { reset(); }

void fs_store::writer::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  // Not published: the temporary file goes (ENOENT when an abort took its directory).
  if (!temp_.empty()) ::unlink(temp_.c_str());
  store_ = nullptr;
  fd_ = -1;
  temp_.clear();
  data_offset_ = 0;
  written_ = 0;
  pending_.clear();
  pending_.shrink_to_fit();
  part_number_ = 0;
  precondition_ = {};
}

void fs_store::writer::write(std::span<const std::byte> data, error_code& ec) {
  if (store_ == nullptr) {
    ec = sluice::errc::invalid_argument;
    return;
  }
  if (data.size() > store_->config_.max_object_bytes - written_) {
    ec = sluice::errc::capacity_exceeded;
    return;
  }
  // The file is written in whole, aligned store_write_unit pieces (small writes gather in
  // pending_ up to the next boundary): the page cache then holds the object in large folios.
  const std::uint64_t unit = store_write_unit;
  const std::uint64_t written_before = written_;
  const std::size_t pending_before = pending_.size();
  bool flushed = false;
  const auto undo = [&] {  // nothing of `data` counts; bytes already in the file stay there
    written_ = written_before;
    if (flushed) {
      pending_.clear();
    } else {
      pending_.resize(pending_before);
    }
  };
  while (!data.empty()) {
    const std::uint64_t at = data_offset_ + written_;  // the file offset of data's first byte
    if (pending_.empty() && at % unit == 0 && data.size() >= unit) {
      const auto n = static_cast<std::size_t>(data.size() / unit * unit);
      if (!fs_store_impl::write_all(fd_, data.data(), n, at, ec)) return undo();
      written_ += n;
      data = data.subspan(n);
      continue;
    }
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(data.size(), unit - at % unit));
    if (pending_.capacity() < unit) pending_.reserve(static_cast<std::size_t>(unit));
    pending_.insert(pending_.end(), data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n));
    written_ += n;
    data = data.subspan(n);
    if ((data_offset_ + written_) % unit == 0) {
      if (!flush(ec)) return undo();
      flushed = true;
    }
  }
  ec = {};
}

void fs_store::writer::wrote(std::uint64_t n, error_code& ec) {
  ec = {};
  if (store_ == nullptr || !pending_.empty()) {
    ec = sluice::errc::invalid_argument;
    return;
  }
  if (n > store_->config_.max_object_bytes - written_) {
    ec = sluice::errc::capacity_exceeded;
    return;
  }
  written_ += n;
}

bool fs_store::writer::flush(error_code& ec) {
  if (pending_.empty()) {
    ec = {};
    return true;
  }
  if (!fs_store_impl::write_all(fd_, pending_.data(), pending_.size(), data_offset_ + written_ - pending_.size(), ec)) {
    return false;
  }
  pending_.clear();
  return true;
}

object_info fs_store::writer::commit(const object_attributes& attributes, error_code& ec) {
  if (store_ == nullptr) {
    ec = sluice::errc::invalid_argument;
    return {};
  }
  object_info info = store_->publish(*this, attributes, ec);
  reset();
  return ec ? object_info{} : info;
}

fs_store::mapping::mapping(mapping&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      base_(std::exchange(other.base_, nullptr)),
      length_(std::exchange(other.length_, 0)),
      copy_(std::move(other.copy_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      data_offset_(std::exchange(other.data_offset_, 0)),
      version_(std::move(other.version_)) {}

fs_store::mapping& fs_store::mapping::operator=(mapping&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
    base_ = std::exchange(other.base_, nullptr);
    length_ = std::exchange(other.length_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    data_offset_ = std::exchange(other.data_offset_, 0);
    copy_ = std::move(other.copy_);
    version_ = std::move(other.version_);
  }
  return *this;
}

fs_store::mapping::~mapping() { reset(); }

void fs_store::mapping::reset() noexcept {
  if (base_ != nullptr) ::munmap(base_, length_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  base_ = nullptr;
  length_ = 0;
  data_ = nullptr;
  size_ = 0;
  copy_.reset();
  version_.reset();
}

}  // namespace sluice::s3
