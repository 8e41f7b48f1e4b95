// SPDX-License-Identifier: Apache-2.0
// any_path: the one place where the choice of path is made at run time (CLI flags, a config
// file). Inside, every path stays a fully static path<N, R, T>.
#pragma once

#include <sluice/detail/blocking.hpp>
#include <sluice/path.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>

#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

namespace sluice {

namespace detail {

/// A move-only, type-erased completion handler `void(error_code, transfer_result)` that keeps
/// the original handler's associated executor, so erasure does not change where it runs.
class any_transfer_handler {
  struct base {
    virtual ~base() = default;
    virtual void invoke(error_code ec, transfer_result result) = 0;
  };
  template <class Handler>
  struct holder final : base {
    explicit holder(Handler&& h) : handler(std::move(h)) {}
    void invoke(error_code ec, transfer_result result) override { std::move(handler)(ec, std::move(result)); }
    Handler handler;
  };

 public:
  using executor_type = boost::asio::any_io_executor;

  /// Wraps `handler`; a handler without an associated executor gets `fallback` (the erased
  /// path's executor), as it would have from the path itself.
  template <class Handler>
  requires(!std::is_same_v<std::decay_t<Handler>, any_transfer_handler>)
      any_transfer_handler(Handler&& handler, const executor_type& fallback)
      : executor_(boost::asio::get_associated_executor(handler, fallback)),
        impl_(std::make_unique<holder<std::decay_t<Handler>>>(std::forward<Handler>(handler))) {}

  [[nodiscard]] executor_type get_executor() const noexcept { return executor_; }

  void operator()(error_code ec, transfer_result result) {
    auto impl = std::move(impl_);  // exactly once
    impl->invoke(ec, std::move(result));
  }

 private:
  executor_type executor_;
  std::unique_ptr<base> impl_;
};

}  // namespace detail

/// Holds any path<N, R, T, E> behind one type. Same operations and guarantees as path.
class any_path : public detail::blocking_transfers<any_path> {
  using handler_type = detail::any_transfer_handler;

  struct interface {
    virtual ~interface() = default;
    virtual void get(const object_ref& object, const region& destination, const byte_range& range,
                     handler_type handler) = 0;
    virtual void put(const object_ref& object, const const_region& source, handler_type handler) = 0;
    [[nodiscard]] virtual boost::asio::any_io_executor executor() const = 0;
    [[nodiscard]] virtual std::string_view negotiator_name() const noexcept = 0;
    [[nodiscard]] virtual std::string_view transport_name() const noexcept = 0;
  };

  template <class Path>
  struct model final : interface {
    explicit model(Path&& p) : path(std::move(p)) {}
    void get(const object_ref& object, const region& destination, const byte_range& range,
             handler_type handler) override {
      path.async_get(object, destination, range, std::move(handler));
    }
    void put(const object_ref& object, const const_region& source, handler_type handler) override {
      path.async_put(object, source, std::move(handler));
    }
    [[nodiscard]] boost::asio::any_io_executor executor() const override { return path.get_executor(); }
    [[nodiscard]] std::string_view negotiator_name() const noexcept override { return Path::negotiator_type::name; }
    [[nodiscard]] std::string_view transport_name() const noexcept override { return Path::transport_type::name; }
    Path path;
  };

 public:
  /// Takes ownership of `p`, any specialisation of sluice::path.
  template <class N, class R, class T, class E>
  explicit any_path(path<N, R, T, E> p) : impl_(std::make_unique<model<path<N, R, T, E>>>(std::move(p))) {}

  /// Name of the negotiator inside ("local", "s3", ...).
  [[nodiscard]] std::string_view negotiator_name() const noexcept { return impl_->negotiator_name(); }
  /// Name of the transport inside ("loopback", "fabric", "s3-rdma", ...).
  [[nodiscard]] std::string_view transport_name() const noexcept { return impl_->transport_name(); }

  /// As path::async_get. Completion: `void(error_code, transfer_result)`.
  template <class CompletionToken>
  auto async_get(const object_ref& object, const region& destination, const byte_range& range,
                 CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, transfer_result)>(
        [this](auto handler, const object_ref& o, const region& d, const byte_range& r) {
          impl_->get(o, d, r, handler_type(std::move(handler), impl_->executor()));
        },
        token, object, destination, range);
  }

  /// As path::async_put. Completion: `void(error_code, transfer_result)`.
  template <class CompletionToken>
  auto async_put(const object_ref& object, const const_region& source, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, transfer_result)>(
        [this](auto handler, const object_ref& o, const const_region& s) {
          impl_->put(o, s, handler_type(std::move(handler), impl_->executor()));
        },
        token, object, source);
  }

 private:
  std::unique_ptr<interface> impl_;
};

}  // namespace sluice
