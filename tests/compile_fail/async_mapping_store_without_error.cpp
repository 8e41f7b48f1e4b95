// SPDX-License-Identifier: Apache-2.0
// async_map_streaming answers with an error_code and the mapping; a `done` that takes the mapping
// alone cannot say why a GET failed.
#include <sluice/memory_store.hpp>

#include <functional>

struct candidate : sluice::memory_store {
  mapping map_streaming(const sluice::object_ref& /*obj*/, sluice::error_code& /*ec*/) { return {}; }
  mapping describe(const sluice::object_ref& /*obj*/, sluice::error_code& /*ec*/) { return {}; }
  void async_describe(const sluice::object_ref& /*obj*/, sluice::blocking_runner /*run*/,
                      std::function<void(sluice::error_code, mapping)> /*done*/) {}
#ifdef SLUICE_CF_CONTROL
  void async_map_streaming(const sluice::object_ref& /*obj*/, sluice::blocking_runner /*run*/,
                           std::function<void(sluice::error_code, mapping)> /*done*/) {}
#else
  void async_map_streaming(const sluice::object_ref& /*obj*/, sluice::blocking_runner /*run*/,
                           std::function<void(mapping)> /*done*/) {}
#endif
};

static_assert(sluice::streaming_store<candidate>);
static_assert(sluice::async_mapping_store<candidate>);

int main() {}
