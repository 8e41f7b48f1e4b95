// SPDX-License-Identifier: Apache-2.0
// The negotiator's remote descriptors must be what the transport moves to/from; path<> rejects
// a negotiator and transport that disagree.
#include <sluice/host_registrar.hpp>
#include <sluice/local_negotiator.hpp>
#include <sluice/memory_store.hpp>
#include <sluice/path.hpp>

struct other_remote {};

struct candidate {
#ifdef SLUICE_CF_CONTROL
  using remote_type = sluice::region;
#else
  using remote_type = other_remote;
#endif
  static constexpr std::string_view name = "candidate";
  template <class G, class H>
  void async_read(const G&, const remote_type&, sluice::transfer_span, H&&) {}
  template <class G, class H>
  void async_write(const G&, const remote_type&, sluice::transfer_span, H&&) {}
};

int main() {
  sluice::memory_store store;
  sluice::path<sluice::local_negotiator<sluice::memory_store>, sluice::host_registrar, candidate> p(
      sluice::local_negotiator<sluice::memory_store>{store}, sluice::host_registrar{}, candidate{});
  (void)p;
}
