// SPDX-License-Identifier: Apache-2.0
// sluice::s3::any_store: any servable_store behind one interface, so that the S3 server is
// compiled once, in the library, whatever store it serves. Wrap a store with
// any_store::wrap(store) (s3::server's constructor does it for you), or derive from any_store
// directly. The optional capabilities (concepts.hpp: describing_store, growing_mapping, ...)
// become virtual members whose defaults do what the server does for a store without them.
#pragma once

#include <sluice/concepts.hpp>
#include <sluice/error.hpp>
#include <sluice/region.hpp>
#include <sluice/request.hpp>
#include <sluice/s3/error.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::s3 {

/// One version of an object lent in place by a store (a store's mapping_type, erased).
class any_mapping {
 public:
  /// What a mapping can say; the defaults are those of a mapping that has only region and info.
  struct model {
    model() = default;
    model(const model&) = delete;
    model& operator=(const model&) = delete;
    virtual ~model() = default;
    [[nodiscard]] virtual const_region region() const noexcept = 0;
    [[nodiscard]] virtual const object_info& info() const noexcept = 0;
    /// Where region() starts in the object (a part mapped by map_range).
    [[nodiscard]] virtual std::uint64_t base() const noexcept { return 0; }
    /// The file that holds the bytes (sendfile, pread), or -1.
    [[nodiscard]] virtual int native_handle() const noexcept { return -1; }
    /// Where the object's first byte lies in native_handle()'s file.
    [[nodiscard]] virtual std::uint64_t data_offset() const noexcept { return 0; }
    /// True when bytes may still be arriving (a gateway's miss): see ready and async_wait_until.
    [[nodiscard]] virtual bool growing() const noexcept { return false; }
    [[nodiscard]] virtual bool ready(std::uint64_t /*end*/) const noexcept { return true; }
    /// Calls `done` once: with no error when bytes [0, end) of region() are there, else with the
    /// error that ended the fill; at once when it knows, else on the filling thread.
    virtual void async_wait_until(std::uint64_t /*end*/, std::function<void(error_code)> done) const {
      const std::function<void(error_code)> now = std::move(done);
      now({});
    }
  };

  /// Empty: only assigned to or destroyed.
  any_mapping() = default;
  explicit any_mapping(std::unique_ptr<model> held) noexcept : held_(std::move(held)) {}

  /// Wraps a store's mapping, keeping each optional member it has.
  template <class M>
  static any_mapping from(M mapping) {
    return any_mapping(std::make_unique<holder<M>>(std::move(mapping)));
  }

  [[nodiscard]] const_region region() const noexcept { return held_->region(); }
  [[nodiscard]] const object_info& info() const noexcept { return held_->info(); }
  [[nodiscard]] std::uint64_t base() const noexcept { return held_->base(); }
  [[nodiscard]] int native_handle() const noexcept { return held_->native_handle(); }
  [[nodiscard]] std::uint64_t data_offset() const noexcept { return held_->data_offset(); }
  [[nodiscard]] bool growing() const noexcept { return held_->growing(); }
  [[nodiscard]] bool ready(std::uint64_t end) const noexcept { return held_->ready(end); }
  void async_wait_until(std::uint64_t end, std::function<void(error_code)> done) const {
    held_->async_wait_until(end, std::move(done));
  }

  /// The store's own mapping, when this holds an M (how a store's confirm() gets its type back).
  template <class M>
  [[nodiscard]] const M* get() const noexcept {
    const auto* h = dynamic_cast<const holder<M>*>(held_.get());
    return h != nullptr ? &h->mapping : nullptr;
  }

 private:
  template <class M>
  struct holder final : model {
    explicit holder(M m) : mapping(std::move(m)) {}
    [[nodiscard]] const_region region() const noexcept override { return mapping.region(); }
    [[nodiscard]] const object_info& info() const noexcept override { return mapping.info(); }
    [[nodiscard]] std::uint64_t base() const noexcept override {
      if constexpr (partial_mapping<M>) return mapping.base();
      return 0;
    }
    [[nodiscard]] int native_handle() const noexcept override {
      if constexpr (file_backed_mapping<M>) return mapping.native_handle();
      return -1;
    }
    [[nodiscard]] std::uint64_t data_offset() const noexcept override {
      if constexpr (offset_file_mapping<M>) return mapping.data_offset();
      return 0;
    }
    [[nodiscard]] bool growing() const noexcept override { return growing_mapping<M>; }
    [[nodiscard]] bool ready(std::uint64_t end) const noexcept override {
      if constexpr (growing_mapping<M>) return mapping.ready(end);
      return true;
    }
    void async_wait_until(std::uint64_t end, std::function<void(error_code)> done) const override {
      if constexpr (growing_mapping<M>) {
        mapping.async_wait_until(end, std::move(done));
      } else {
        done({});
      }
    }
    M mapping;
  };

  std::unique_ptr<model> held_;
};

/// A store's writer (writer_type or part_writer_type), erased.
class any_writer {
 public:
  struct model {
    model() = default;
    model(const model&) = delete;
    model& operator=(const model&) = delete;
    virtual ~model() = default;
    virtual void write(std::span<const std::byte> data, error_code& ec) = 0;
    virtual object_info commit(const object_attributes& attributes, error_code& ec) = 0;
    /// Publish only if the object replaced meets `precondition` then (a store that cannot
    /// check it at publish ignores it: the server checked it before the body).
    virtual void require(const write_precondition& /*precondition*/) {}
  };

  /// Empty: only assigned to or destroyed.
  any_writer() = default;
  explicit any_writer(std::unique_ptr<model> held) noexcept : held_(std::move(held)) {}

  template <class W>
  static any_writer from(W writer) {
    return any_writer(std::make_unique<holder<W>>(std::move(writer)));
  }

  void write(std::span<const std::byte> data, error_code& ec) { held_->write(data, ec); }
  object_info commit(const object_attributes& attributes, error_code& ec) { return held_->commit(attributes, ec); }
  void require(const write_precondition& precondition) { held_->require(precondition); }

 private:
  template <class W>
  struct holder final : model {
    explicit holder(W w) : writer(std::move(w)) {}
    void write(std::span<const std::byte> data, error_code& ec) override { writer.write(data, ec); }
    object_info commit(const object_attributes& attributes, error_code& ec) override {
      return writer.commit(attributes, ec);
    }
    void require(const write_precondition& precondition) override {
      if constexpr (conditional_writer<W>) writer.require(precondition);
    }
    W writer;
  };

  std::unique_ptr<model> held_;
};

/// A servable_store behind virtual calls: what the S3 server serves. Thread-safety and blocking
/// are the wrapped store's (the server's rules are written at servable_store).
class any_store {
 public:
  any_store() = default;
  any_store(const any_store&) = delete;
  any_store& operator=(const any_store&) = delete;
  virtual ~any_store() = default;

  using writer_type = any_writer;
  using part_writer_type = any_writer;
  using mapping_type = any_mapping;

  /// Wraps `store`, which must outlive the result.
  template <servable_store Store>
  static std::shared_ptr<any_store> wrap(Store& store);

  /// True when a call may wait for a network (gateway_store): the server runs every call on its
  /// blocking pool.
  [[nodiscard]] virtual bool remote() const noexcept { return false; }

  // object_store
  /// `owner` is kept with the bucket by a store that can (bucket_owner() reads it back).
  virtual void create_bucket(std::string_view bucket, std::string_view owner, error_code& ec) = 0;
  [[nodiscard]] virtual std::optional<std::string> bucket_owner(std::string_view /*bucket*/) const {
    return std::nullopt;
  }
  /// The bucket's settings; a store without the capability keeps none (empty, no error).
  virtual bucket_settings bucket_settings_of(std::string_view /*bucket*/, error_code& ec) {
    ec = {};
    return {};
  }
  /// Replaces the bucket's settings; a store without the capability: s3::errc::not_implemented.
  virtual void set_bucket_settings(std::string_view /*bucket*/, const bucket_settings& /*settings*/, error_code& ec) {
    ec = make_error_code(sluice::s3::errc::not_implemented);
  }
  virtual void remove_bucket(std::string_view bucket, error_code& ec) = 0;
  virtual std::vector<bucket_info> list_buckets(error_code& ec) = 0;
  virtual object_info head(const object_ref& object, error_code& ec) = 0;
  virtual std::size_t read(const object_ref& object, std::uint64_t offset, std::span<std::byte> out,
                           error_code& ec) = 0;
  virtual any_writer begin_put(const object_ref& object, error_code& ec) = 0;
  virtual void remove(const object_ref& object, error_code& ec) = 0;
  virtual list_result list(const list_request& request, error_code& ec) = 0;

  // mappable_store and its optional capabilities
  virtual any_mapping map(const object_ref& object, error_code& ec) = 0;
  /// The object's info, bytes optional (a HEAD); default map().
  virtual any_mapping describe(const object_ref& object, error_code& ec) { return map(object, ec); }
  /// Part of the object, per an HTTP Range header (base() says where); default map().
  virtual any_mapping map_range(const object_ref& object, std::string_view /*range*/, error_code& ec) {
    return map(object, ec);
  }
  /// A mapping that may still be filling (growing()); default map().
  virtual any_mapping map_streaming(const object_ref& object, error_code& ec) { return map(object, ec); }
  /// True when async_map waits without a thread (async_mapping_store): the server's GET and HEAD
  /// await it instead of running map_streaming or describe on its blocking pool.
  [[nodiscard]] virtual bool maps_async() const noexcept { return false; }
  /// Which call async_map makes: map_streaming (a GET) or describe (a HEAD).
  enum class async_map_kind { streaming, describe };
  /// What map_streaming or describe answers, given to `done` once, on any thread; `run` runs the
  /// store's blocking calls. Default: the call, as a job given to `run`.
  virtual void async_map(const object_ref& object, async_map_kind kind, const blocking_runner& run,
                         std::function<void(error_code, any_mapping)> done) {
    run([this, object, kind, done = std::move(done)] {
      error_code ec;
      any_mapping mapped = kind == async_map_kind::describe ? describe(object, ec) : map_streaming(object, ec);
      done(ec, std::move(mapped));
    });
  }
  /// True when map_unconfirmed can lend a copy that confirm() checks later.
  [[nodiscard]] virtual bool speculates() const noexcept { return false; }
  /// `if_match`: the GET's If-Match header, empty when it has none.
  virtual std::optional<any_mapping> map_unconfirmed(const object_ref& /*object*/, std::string_view /*if_match*/) {
    return std::nullopt;
  }
  virtual bool confirm(const object_ref& /*object*/, const any_mapping& /*mapping*/) { return true; }

  // multipart_store
  virtual std::string create_upload(const object_ref& object, const object_attributes& attributes, error_code& ec) = 0;
  virtual any_writer begin_part(const object_ref& object, std::string_view upload_id, std::uint32_t part_number,
                                error_code& ec) = 0;
  virtual std::vector<part_info> list_parts(const object_ref& object, std::string_view upload_id, error_code& ec) = 0;
  virtual std::vector<upload_info> list_uploads(std::string_view bucket, std::string_view prefix, error_code& ec) = 0;
  /// With `precondition` checked at publish by a store that can (else before, by the server).
  virtual object_info complete_upload(const object_ref& object, std::string_view upload_id,
                                      std::span<const part_info> chosen, const object_attributes& attributes,
                                      error_code& ec, const write_precondition& precondition) = 0;
  virtual void abort_upload(const object_ref& object, std::string_view upload_id, error_code& ec) = 0;
};

namespace detail {

/// any_store over a Store&: each call forwards; an optional capability the store lacks falls
/// back to the default of any_store.
template <servable_store Store>
class store_adapter final : public any_store {
 public:
  explicit store_adapter(Store& store) noexcept : store_(store) {}

  [[nodiscard]] bool remote() const noexcept override { return remote_store<Store>; }
  void create_bucket(std::string_view bucket, std::string_view owner, error_code& ec) override {
    if constexpr (owner_recording_store<Store>) {
      store_.create_bucket(bucket, owner, ec);
    } else {
      store_.create_bucket(bucket, ec);
    }
  }
  [[nodiscard]] std::optional<std::string> bucket_owner(std::string_view bucket) const override {
    if constexpr (owner_reporting_store<Store>) return store_.bucket_owner(bucket);
    return std::nullopt;
  }
  bucket_settings bucket_settings_of(std::string_view bucket, error_code& ec) override {
    if constexpr (settings_keeping_store<Store>) return store_.bucket_settings_of(bucket, ec);
    return any_store::bucket_settings_of(bucket, ec);
  }
  void set_bucket_settings(std::string_view bucket, const bucket_settings& settings, error_code& ec) override {
    if constexpr (settings_keeping_store<Store>) {
      store_.set_bucket_settings(bucket, settings, ec);
    } else {
      any_store::set_bucket_settings(bucket, settings, ec);
    }
  }
  void remove_bucket(std::string_view bucket, error_code& ec) override { store_.remove_bucket(bucket, ec); }
  std::vector<bucket_info> list_buckets(error_code& ec) override { return store_.list_buckets(ec); }
  object_info head(const object_ref& object, error_code& ec) override { return store_.head(object, ec); }
  std::size_t read(const object_ref& object, std::uint64_t offset, std::span<std::byte> out, error_code& ec) override {
    return store_.read(object, offset, out, ec);
  }
  any_writer begin_put(const object_ref& object, error_code& ec) override {
    return any_writer::from(store_.begin_put(object, ec));
  }
  void remove(const object_ref& object, error_code& ec) override { store_.remove(object, ec); }
  list_result list(const list_request& request, error_code& ec) override { return store_.list(request, ec); }

  any_mapping map(const object_ref& object, error_code& ec) override {
    return any_mapping::from(store_.map(object, ec));
  }
  any_mapping describe(const object_ref& object, error_code& ec) override {
    if constexpr (describing_store<Store>) return any_mapping::from(store_.describe(object, ec));
    return map(object, ec);
  }
  any_mapping map_range(const object_ref& object, std::string_view range, error_code& ec) override {
    if constexpr (range_mapping_store<Store>) {
      return any_mapping::from(store_.map_range(object, range, ec));
    }
    return map(object, ec);
  }
  any_mapping map_streaming(const object_ref& object, error_code& ec) override {
    if constexpr (streaming_store<Store>) {
      return any_mapping::from(store_.map_streaming(object, ec));
    }
    return map(object, ec);
  }
  [[nodiscard]] bool maps_async() const noexcept override { return async_mapping_store<Store>; }
  void async_map(const object_ref& object, async_map_kind kind, const blocking_runner& run,
                 std::function<void(error_code, any_mapping)> done) override {
    if constexpr (async_mapping_store<Store>) {
      auto erased = [done = std::move(done)](error_code ec, typename Store::mapping_type mapped) {
        done(ec, any_mapping::from(std::move(mapped)));
      };
      if (kind == async_map_kind::describe) {
        store_.async_describe(object, run, std::move(erased));
      } else {
        store_.async_map_streaming(object, run, std::move(erased));
      }
    } else {
      any_store::async_map(object, kind, run, std::move(done));
    }
  }
  [[nodiscard]] bool speculates() const noexcept override { return speculating_store<Store>; }
  std::optional<any_mapping> map_unconfirmed(const object_ref& object, std::string_view if_match) override {
    if constexpr (speculating_store<Store>) {
      auto mapped = store_.map_unconfirmed(object, if_match);
      if (!mapped) return std::nullopt;
      return any_mapping::from(std::move(*mapped));
    }
    return std::nullopt;
  }
  bool confirm(const object_ref& object, const any_mapping& mapping) override {
    if constexpr (speculating_store<Store>) {
      const auto* own = mapping.get<typename Store::mapping_type>();
      return own != nullptr && store_.confirm(object, *own);
    }
    return true;
  }

  std::string create_upload(const object_ref& object, const object_attributes& attributes, error_code& ec) override {
    return store_.create_upload(object, attributes, ec);
  }
  any_writer begin_part(const object_ref& object, std::string_view upload_id, std::uint32_t part_number,
                        error_code& ec) override {
    return any_writer::from(store_.begin_part(object, upload_id, part_number, ec));
  }
  std::vector<part_info> list_parts(const object_ref& object, std::string_view upload_id, error_code& ec) override {
    return store_.list_parts(object, upload_id, ec);
  }
  std::vector<upload_info> list_uploads(std::string_view bucket, std::string_view prefix, error_code& ec) override {
    return store_.list_uploads(bucket, prefix, ec);
  }
  object_info complete_upload(const object_ref& object, std::string_view upload_id, std::span<const part_info> chosen,
                              const object_attributes& attributes, error_code& ec,
                              const write_precondition& precondition) override {
    if constexpr (conditional_upload_store<Store>) {
      return store_.complete_upload(object, upload_id, chosen, attributes, ec, precondition);
    }
    return store_.complete_upload(object, upload_id, chosen, attributes, ec);
  }
  void abort_upload(const object_ref& object, std::string_view upload_id, error_code& ec) override {
    store_.abort_upload(object, upload_id, ec);
  }

 private:
  Store& store_;
};

}  // namespace detail

template <servable_store Store>
std::shared_ptr<any_store> any_store::wrap(Store& store) {
  return std::make_shared<detail::store_adapter<Store>>(store);
}

}  // namespace sluice::s3
