// SPDX-License-Identifier: Apache-2.0
// Fuzz target for the JSON configuration loader (sluice::parse_config) and the size parser
// it uses (sluice::parse_size). Both take untrusted bytes (a config file); neither may crash,
// and their results must keep the documented contract:
//   - parse_config succeeds only with a configuration that validates, and then reports no error;
//   - a failure is always errc::invalid_config with a reason, and the throwing overload throws
//     std::invalid_argument with "field: reason" for exactly the same input;
//   - parse_size accepts only text that starts with a digit and never wraps around.
#include <sluice/config.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

void fuzz_parse_config(std::string_view text) {
  sluice::error_code ec;
  sluice::config_error error{"sentinel", "sentinel"};
  const sluice::config result = sluice::parse_config(text, ec, error);
  if (!ec) {
    check(!result.validate().has_value());
    check(error.field.empty() && error.reason.empty());
  } else {
    check(ec == sluice::errc::invalid_config);
    check(!error.reason.empty());
  }

  bool threw = false;
  try {
    (void)sluice::parse_config(text);
  } catch (const std::invalid_argument& e) {
    threw = true;
    check(ec && error.message() == e.what());
  }
  check(threw == static_cast<bool>(ec));
}

void fuzz_parse_size(std::string_view text) {
  const auto size = sluice::parse_size(text);
  if (!size) return;
  check(!text.empty() && text.front() >= '0' && text.front() <= '9');
  // A bare number of bytes is itself: the unit suffixes only ever scale up.
  const auto digits = text.find_first_not_of("0123456789");
  const auto number = sluice::parse_size(text.substr(0, digits));
  check(number.has_value() && *number <= *size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // An owned copy of exactly `size` bytes, so that ASan catches a read past the end.
  const std::string bytes = size == 0 ? std::string() : std::string(data, data + size);
  fuzz_parse_config(bytes);
  fuzz_parse_size(bytes);
  return 0;
}
