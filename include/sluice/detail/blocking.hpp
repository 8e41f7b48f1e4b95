// SPDX-License-Identifier: Apache-2.0
// The blocking overloads every path type offers, written once over its async_get/async_put.
#pragma once

#include <sluice/detail/completion.hpp>
#include <sluice/region.hpp>
#include <sluice/request.hpp>

namespace sluice::detail {

/// CRTP base: `Derived` provides async_get(object, region, byte_range, token) and
/// async_put(object, region, token); this adds get/put in an error_code& and a throwing form.
template <class Derived>
class blocking_transfers {
 public:
  /// Reads `range` of `object` into the start of `destination`; blocks until done.
  transfer_result get(const object_ref& object, const region& destination, const byte_range& range, error_code& ec) {
    return run_blocking<transfer_result>(
        [&](auto handler) { self().async_get(object, destination, range, std::move(handler)); }, ec);
  }
  transfer_result get(const object_ref& object, const region& destination, error_code& ec) {
    return get(object, destination, byte_range{}, ec);
  }
  /// Throws sluice::system_error on failure.
  transfer_result get(const object_ref& object, const region& destination, const byte_range& range = {}) {
    error_code ec;
    transfer_result result = get(object, destination, range, ec);
    throw_on_error(ec, "sluice get");
    return result;
  }

  /// Writes all of `source` as `object`; blocks until it is published or failed.
  transfer_result put(const object_ref& object, const const_region& source, error_code& ec) {
    return run_blocking<transfer_result>([&](auto handler) { self().async_put(object, source, std::move(handler)); },
                                         ec);
  }
  /// Throws sluice::system_error on failure.
  transfer_result put(const object_ref& object, const const_region& source) {
    error_code ec;
    transfer_result result = put(object, source, ec);
    throw_on_error(ec, "sluice put");
    return result;
  }

 protected:
  blocking_transfers() = default;

 private:
  Derived& self() noexcept { return static_cast<Derived&>(*this); }
};

}  // namespace sluice::detail
