// SPDX-License-Identifier: Apache-2.0
#include <sluice/fabric/error.hpp>

#include <doctest/doctest.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <string>
#include <system_error>

TEST_CASE("fabric category is named fabric") {
  CHECK(std::string(sluice::fabric::fabric_category().name()) == "fabric");
  CHECK(&sluice::fabric::fabric_category() == &sluice::fabric::fabric_category());
}

TEST_CASE("make_fabric_error takes the negated libfabric return value") {
  const sluice::error_code ec = sluice::fabric::make_fabric_error(-FI_EAGAIN);
  CHECK(ec);
  CHECK(ec.value() == FI_EAGAIN);
  CHECK(&ec.category() == &sluice::fabric::fabric_category());
  CHECK(ec.message() == fi_strerror(FI_EAGAIN));
  const std::error_code std_ec = ec;
  CHECK(std::string(std_ec.category().name()) == "fabric");
  CHECK(std_ec.message() == fi_strerror(FI_EAGAIN));
}

TEST_CASE("libfabric-specific codes use fi_strerror's messages") {
  for (const int code :
       {int{FI_ENOENT}, int{FI_EINVAL}, int{FI_ETRUNC}, int{FI_EAVAIL}, int{FI_ENOKEY}, int{FI_ECANCELED}}) {
    CAPTURE(code);
    const sluice::error_code ec = sluice::fabric::make_fabric_error(-code);
    CHECK(ec.value() == code);
    CHECK(ec.message() == fi_strerror(code));
    CHECK_FALSE(ec.message().empty());
  }
  // Distinct codes, distinct errors.
  CHECK(sluice::fabric::make_fabric_error(-FI_EAGAIN) != sluice::fabric::make_fabric_error(-FI_EINVAL));
  CHECK(sluice::fabric::make_fabric_error(-FI_EAGAIN) == sluice::fabric::make_fabric_error(-FI_EAGAIN));
}

TEST_CASE("non-negative return values are success") {
  for (long ret : {0L, 1L, 4096L}) {
    CAPTURE(ret);
    const sluice::error_code ec = sluice::fabric::make_fabric_error(ret);
    CHECK_FALSE(ec);
    CHECK(ec == sluice::error_code{});
  }
}

TEST_CASE("fabric errors are not confused with generic errno values") {
  const sluice::error_code fabric = sluice::fabric::make_fabric_error(-FI_EAGAIN);
  const sluice::error_code generic{FI_EAGAIN, boost::system::generic_category()};
  CHECK(fabric.value() == generic.value());
  CHECK(fabric != generic);
}

TEST_CASE("every fabric error is the core's fabric_failed condition, and nothing else") {
  for (const int code : {int{FI_EAGAIN}, int{FI_EINVAL}, int{FI_ENOKEY}, int{FI_ECANCELED}, int{FI_EOPNOTSUPP}}) {
    CAPTURE(code);
    const sluice::error_code ec = sluice::fabric::make_fabric_error(-code);
    CHECK(ec == sluice::condition::fabric_failed);
    CHECK(ec != sluice::condition::declined);
    CHECK(ec != sluice::condition::not_found);
  }
  const sluice::error_code generic{FI_EAGAIN, boost::system::generic_category()};
  CHECK(generic != sluice::condition::fabric_failed);
}
