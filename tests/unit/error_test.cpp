// SPDX-License-Identifier: Apache-2.0
#include <sluice/error.hpp>

#include <doctest/doctest.h>

#include <boost/system/error_code.hpp>

#include <cerrno>
#include <string>
#include <system_error>
#include <type_traits>

namespace {

using sluice::errc;

constexpr errc all_errc[] = {
    errc::region_too_small,  errc::bad_range,          errc::no_such_bucket, errc::no_such_object,
    errc::bucket_exists,     errc::bucket_not_empty,   errc::invalid_name,   errc::unsupported_memory,
    errc::no_device,         errc::declined,           errc::invalid_config, errc::invalid_argument,
    errc::capacity_exceeded, errc::protocol_violation,
};

}  // namespace

TEST_CASE("sluice_category is named sluice and is a single instance") {
  CHECK(std::string(sluice::sluice_category().name()) == "sluice");
  CHECK(&sluice::sluice_category() == &sluice::sluice_category());
}

TEST_CASE("every errc has a specific message") {
  const sluice::error_code unknown{999, sluice::sluice_category()};
  for (errc e : all_errc) {
    CAPTURE(static_cast<int>(e));
    const sluice::error_code ec = sluice::make_error_code(e);
    CHECK(ec.value() == static_cast<int>(e));
    CHECK(&ec.category() == &sluice::sluice_category());
    CHECK_FALSE(ec.message().empty());
    CHECK(ec.message() != unknown.message());
  }
  CHECK(unknown.message() == "unknown sluice error");
}

TEST_CASE("selected errc messages") {
  CHECK(sluice::make_error_code(errc::region_too_small).message() == "memory region too small for the transfer");
  CHECK(sluice::make_error_code(errc::bad_range).message() == "byte range outside the object");
  CHECK(sluice::make_error_code(errc::no_such_bucket).message() == "no such bucket");
  CHECK(sluice::make_error_code(errc::invalid_config).message() == "invalid configuration");
  CHECK(sluice::make_error_code(errc::protocol_violation).message() == "protocol violation by peer");
}

TEST_CASE("errc values start at 1 so that every one of them is an error") {
  CHECK(static_cast<int>(errc::region_too_small) == 1);
  for (errc e : all_errc) {
    const sluice::error_code ec = e;
    CHECK(static_cast<bool>(ec));
    CHECK(ec.failed());
  }
}

TEST_CASE("errc converts implicitly to error_code and compares") {
  static_assert(boost::system::is_error_code_enum<errc>::value);
  static_assert(std::is_convertible_v<errc, sluice::error_code>);

  sluice::error_code ec;
  CHECK_FALSE(ec);
  ec = errc::bad_range;
  CHECK(ec);
  CHECK(ec == errc::bad_range);
  CHECK(ec != errc::no_such_bucket);
  CHECK(ec == sluice::make_error_code(errc::bad_range));

  // The same value in another category is a different error.
  const sluice::error_code generic{static_cast<int>(errc::bad_range), boost::system::generic_category()};
  CHECK(ec != generic);

  ec = {};
  CHECK_FALSE(ec);
  CHECK(ec != errc::bad_range);
}

TEST_CASE("error_code converts to std::error_code keeping value, name and message") {
  const sluice::error_code ec = errc::no_such_object;
  const std::error_code std_ec = ec;
  CHECK(std_ec);
  CHECK(std_ec.value() == static_cast<int>(errc::no_such_object));
  CHECK(std::string(std_ec.category().name()) == "sluice");
  CHECK(std_ec.message() == "no such object");
}

TEST_CASE("system_error carries the code and the context") {
  const sluice::system_error error(errc::capacity_exceeded, "put");
  CHECK(error.code() == errc::capacity_exceeded);
  const std::string what = error.what();
  CHECK(what.find("put") != std::string::npos);
  CHECK(what.find("configured capacity exceeded") != std::string::npos);
}

TEST_CASE("throw_on_error throws only for errors") {
  CHECK_NOTHROW(sluice::detail::throw_on_error(sluice::error_code{}, "op"));
  try {
    sluice::detail::throw_on_error(errc::declined, "negotiate");
    FAIL("throw_on_error did not throw");
  } catch (const sluice::system_error& e) {
    CHECK(e.code() == errc::declined);
    CHECK(std::string(e.what()).find("negotiate") != std::string::npos);
  }
}

TEST_CASE("core errors compare with the shared conditions") {
  using sluice::condition;
  for (const errc e : {errc::no_such_bucket, errc::no_such_object, errc::no_such_upload}) {
    CAPTURE(static_cast<int>(e));
    CHECK(sluice::error_code(e) == condition::not_found);
    CHECK(sluice::error_code(e) != condition::declined);
  }
  CHECK(sluice::error_code(errc::declined) == condition::declined);
  CHECK(sluice::error_code(errc::unsupported_memory) == condition::declined);
  for (const errc e : {errc::region_too_small, errc::bad_range, errc::invalid_argument, errc::protocol_violation}) {
    CAPTURE(static_cast<int>(e));
    CHECK(sluice::error_code(e) != condition::not_found);
    CHECK(sluice::error_code(e) != condition::declined);
    CHECK(sluice::error_code(e) != condition::fabric_failed);
  }
  // Success and other categories' values are no condition.
  CHECK(sluice::error_code{} != condition::not_found);
  const sluice::error_code enoent{ENOENT, boost::system::generic_category()};
  CHECK(enoent != condition::not_found);
  CHECK(std::string(sluice::condition_category().name()) == "sluice.condition");
  CHECK(sluice::make_error_condition(condition::declined).message() == "path declined");
}
