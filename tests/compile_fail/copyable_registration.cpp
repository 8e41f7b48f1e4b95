// SPDX-License-Identifier: Apache-2.0
// A registration must be move-only (it owns a registration that its destructor undoes);
// a registrar whose registration can be copied is rejected.
#include <sluice/host_registrar.hpp>
#include <sluice/local_negotiator.hpp>
#include <sluice/loopback.hpp>
#include <sluice/memory_store.hpp>
#include <sluice/path.hpp>

struct candidate_registration {
  sluice::region r;
  candidate_registration() = default;
  candidate_registration(candidate_registration&&) = default;
#ifdef SLUICE_CF_CONTROL
  candidate_registration(const candidate_registration&) = delete;
#else
  candidate_registration(const candidate_registration&) = default;
#endif
  [[nodiscard]] const sluice::region& region() const { return r; }
};

struct candidate {
  using registration_type = candidate_registration;
  registration_type register_region(const sluice::region&, sluice::error_code&) { return {}; }
};

int main() {
  sluice::memory_store store;
  sluice::path<sluice::local_negotiator<sluice::memory_store>, candidate, sluice::loopback_transport> p(
      sluice::local_negotiator<sluice::memory_store>{store}, candidate{}, sluice::loopback_transport{});
  (void)p;
}
