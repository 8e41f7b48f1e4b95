// SPDX-License-Identifier: Apache-2.0
// An object_store must list; local_negotiator<> rejects a store without list().
#include <sluice/local_negotiator.hpp>
#include <sluice/memory_store.hpp>

struct candidate {
  using writer_type = sluice::memory_store::writer_type;
  void create_bucket(std::string_view, sluice::error_code&) {}
  void remove_bucket(std::string_view, sluice::error_code&) {}
  std::vector<sluice::bucket_info> list_buckets(sluice::error_code&) { return {}; }
  sluice::object_info head(const sluice::object_ref&, sluice::error_code&) { return {}; }
  std::size_t read(const sluice::object_ref&, std::uint64_t, std::span<std::byte>, sluice::error_code&) { return 0; }
  writer_type begin_put(const sluice::object_ref&, sluice::error_code&) { return {}; }
  void remove(const sluice::object_ref&, sluice::error_code&) {}
#ifdef SLUICE_CF_CONTROL
  sluice::list_result list(const sluice::list_request&, sluice::error_code&) { return {}; }
#endif
};

int main() {
  candidate store;
  sluice::local_negotiator<candidate> n{store};
  (void)n;
}
