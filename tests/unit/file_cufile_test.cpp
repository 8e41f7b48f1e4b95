// SPDX-License-Identifier: Apache-2.0
#include <sluice/file/cufile.hpp>

#include <doctest/doctest.h>

#include <string>
#include <type_traits>

namespace {

using sluice::errc;
using sluice::error_code;
using sluice::file::cufile_config;
using sluice::file::cufile_reader;

static_assert(!std::is_copy_constructible_v<cufile_reader> && !std::is_copy_assignable_v<cufile_reader>);
static_assert(std::is_nothrow_move_constructible_v<cufile_reader> && std::is_nothrow_move_assignable_v<cufile_reader>);

}  // namespace

TEST_CASE("file cufile: config validates the chunk size") {
  CHECK_FALSE(cufile_config{}.validate());
  CHECK(cufile_config{.chunk_bytes = 1000}.validate()->field == "chunk_bytes");
  CHECK(cufile_config{.chunk_bytes = 0}.validate()->field == "chunk_bytes");
  error_code ec;
  const cufile_reader reader = cufile_reader::open("/dev/null", cufile_config{.chunk_bytes = 1000}, ec);
  CHECK(ec == errc::invalid_config);
}

TEST_CASE("file cufile: the category names cuFile's errors") {
  const auto& category = sluice::file::cufile_category();
  CHECK(std::string(category.name()) == "cufile");
  CHECK(&category == &sluice::file::cufile_category());
  CHECK(error_code(5020, category).message() == "cuFile: the file descriptor is not opened with O_DIRECT");
  CHECK(error_code(5999, category).message() == "cuFile error 5999");
}

TEST_CASE("file cufile: cuFile on a host without libcufile is errc::unavailable, not a crash") {
  error_code ec;
  if (sluice::file::cufile_available(ec)) {
    MESSAGE("libcufile is installed here: the unavailable path is not exercised");
    CHECK(sluice::file::cufile_unavailable_reason().empty());
    return;
  }
  CHECK(ec == errc::unavailable);
  MESSAGE("libcufile: " << sluice::file::cufile_unavailable_reason());
  CHECK_FALSE(sluice::file::cufile_unavailable_reason().empty());
  const sluice::file::cufile_driver driver = sluice::file::cufile_driver::open(ec);
  CHECK(ec == errc::unavailable);
  CHECK_FALSE(driver.holds_reference());
  CHECK(driver.properties().nvfs_major == 0);
  CHECK_THROWS_AS(static_cast<void>(sluice::file::cufile_driver::open()), sluice::system_error);
  const cufile_reader reader = cufile_reader::open("/dev/null", {}, ec);
  CHECK(ec == errc::unavailable);
  CHECK(reader.native_handle() == nullptr);
  CHECK_THROWS_AS(static_cast<void>(cufile_reader::open("/dev/null")), sluice::system_error);
}

TEST_CASE("file cufile: an empty cufile_reader refuses to read") {
  cufile_reader reader;
  error_code ec;
  CHECK(reader.read(0, sluice::region{}, ec) == 0);
  CHECK(ec == errc::invalid_argument);
  CHECK(reader.size() == 0);
  CHECK_FALSE(reader.direct());
  CHECK_FALSE(reader.registered());
  CHECK(reader.properties().nvfs_major == 0);
}
