// SPDX-License-Identifier: Apache-2.0
// A negotiator must name its session type; path<> rejects one that does not.
#include <sluice/host_registrar.hpp>
#include <sluice/loopback.hpp>
#include <sluice/path.hpp>

struct session {
  sluice::region r;
  [[nodiscard]] const sluice::region& remote() const { return r; }
  [[nodiscard]] sluice::transfer_span span() const { return {}; }
};

struct candidate {
#ifdef SLUICE_CF_CONTROL
  using session_type = session;
#endif
  using remote_type = sluice::region;
  static constexpr std::string_view name = "candidate";
  template <class H>
  void async_negotiate(const sluice::transfer_request&, H&&) {}
  template <class H>
  void async_complete(session&&, sluice::error_code, std::uint64_t, H&&) {}
};

int main() {
  sluice::path<candidate, sluice::host_registrar, sluice::loopback_transport> p(
      candidate{}, sluice::host_registrar{}, sluice::loopback_transport{});
  (void)p;
}
