#include <sluice/sluice.hpp>
#include <doctest/doctest.h>
TEST_CASE("smoke") {
  sluice::memory_store store;
  sluice::error_code ec;
  store.create_bucket("bucket", ec);
  REQUIRE(!ec);
  sluice::path p{sluice::local_negotiator<sluice::memory_store>{store}, sluice::host_registrar{}, sluice::loopback_transport{}};
  std::string data = "hello world";
  auto r = p.put({"bucket", "k"}, sluice::host_region(data));
  CHECK(r.bytes == data.size());
  std::string out(5, '\0');
  p.get({"bucket", "k"}, sluice::host_region(out), sluice::byte_range{6, 5});
  CHECK(out == "world");
  sluice::any_path a{std::move(p)};
  std::string out2(11, '\0');
  a.get({"bucket", "k"}, sluice::host_region(out2));
  CHECK(out2 == data);
}
