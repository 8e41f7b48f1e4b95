// SPDX-License-Identifier: Apache-2.0
// A conditional writer takes the whole write_precondition (If-None-Match and If-Match); one that
// takes only "if absent" is not one.
#include <sluice/concepts.hpp>

struct candidate {
  void write(std::span<const std::byte> /*data*/, sluice::error_code& /*ec*/) {}
  sluice::object_info commit(const sluice::object_attributes& /*attrs*/, sluice::error_code& /*ec*/) { return {}; }
  void require(bool /*if_absent*/) {}
#ifdef SLUICE_CF_CONTROL
  void require(const sluice::write_precondition& /*precondition*/) {}
#endif
};

static_assert(sluice::object_writer<candidate>);
static_assert(sluice::conditional_writer<candidate>);

int main() {}
