// SPDX-License-Identifier: Apache-2.0
// A registrar must offer register_region(region, error_code&); path<> rejects one that does not.
#include <sluice/host_registrar.hpp>
#include <sluice/local_negotiator.hpp>
#include <sluice/loopback.hpp>
#include <sluice/memory_store.hpp>
#include <sluice/path.hpp>

struct candidate {
  using registration_type = sluice::host_registration;
#ifdef SLUICE_CF_CONTROL
  registration_type register_region(const sluice::region& r, sluice::error_code&) { return registration_type{r}; }
#endif
};

int main() {
  sluice::memory_store store;
  sluice::path<sluice::local_negotiator<sluice::memory_store>, candidate, sluice::loopback_transport> p(
      sluice::local_negotiator<sluice::memory_store>{store}, candidate{}, sluice::loopback_transport{});
  (void)p;
}
