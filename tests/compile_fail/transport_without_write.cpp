// SPDX-License-Identifier: Apache-2.0
// A transport must offer both async_read and async_write; path<> rejects one without async_write.
#include <sluice/host_registrar.hpp>
#include <sluice/local_negotiator.hpp>
#include <sluice/memory_store.hpp>
#include <sluice/path.hpp>

struct candidate {
  using remote_type = sluice::region;
  static constexpr std::string_view name = "candidate";
  template <class G, class H>
  void async_read(const G&, const sluice::region&, sluice::transfer_span, H&&) {}
#ifdef SLUICE_CF_CONTROL
  template <class G, class H>
  void async_write(const G&, const sluice::region&, sluice::transfer_span, H&&) {}
#endif
};

int main() {
  sluice::memory_store store;
  sluice::path<sluice::local_negotiator<sluice::memory_store>, sluice::host_registrar, candidate> p(
      sluice::local_negotiator<sluice::memory_store>{store}, sluice::host_registrar{}, candidate{});
  (void)p;
}
