// How to compose a whole sluice path inside a unit test, with no network and no GPU.
//
// A path is one negotiator (who agrees what moves), one registrar (makes memory reachable) and
// one transport (moves the bytes). For a test, all three run in this process:
//   local_negotiator<memory_store>  the "server" is an object store in memory
//   host_registrar                  host memory needs no registration
//   loopback_transport              the bytes move by memcpy
// Swap any one part for a real one (s3_rdma, the cuda registrar, the fabric transport) and the
// test code around it stays the same. Run: ./compose_path_in_test  (doctest options apply).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <sluice/sluice.hpp>

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>

#include <cstdint>
#include <numeric>
#include <vector>

namespace {

// The parts, named once for the whole test file.
using store_type = sluice::memory_store;
using test_path =
    sluice::path<sluice::local_negotiator<store_type>, sluice::host_registrar, sluice::loopback_transport>;

// A fixture that owns the store and a path to it, with one bucket ready.
struct in_process {
  store_type store{sluice::memory_store_config{.max_bytes = 64 * sluice::mib, .max_object_bytes = 16 * sluice::mib}};
  test_path path{sluice::local_negotiator<store_type>{store}, sluice::host_registrar{}, sluice::loopback_transport{}};

  in_process() { store.create_bucket("segments", ec); }
  sluice::error_code ec;
};

std::vector<float> make_vectors(std::size_t count) {
  std::vector<float> v(count);
  std::iota(v.begin(), v.end(), 0.5F);
  return v;
}

}  // namespace

TEST_CASE_FIXTURE(in_process, "upload an index segment, read it back whole and in ranges") {
  REQUIRE(!ec);
  auto segment = make_vectors(std::size_t{128} * 1024);  // 512 KiB of float32

  // Blocking put: throws sluice::system_error on failure; returns what moved and how.
  const sluice::transfer_result put = path.put({"segments", "seg-0001"}, sluice::host_region(segment));
  CHECK(put.bytes == segment.size() * sizeof(float));
  CHECK(put.negotiator == "local");
  CHECK(put.transport == "loopback");

  // Whole object into fresh memory.
  std::vector<float> loaded(segment.size());
  path.get({"segments", "seg-0001"}, sluice::host_region(loaded));
  CHECK(loaded == segment);

  // Just the vectors 1000..1999: a byte range.
  std::vector<float> slice(1000);
  path.get({"segments", "seg-0001"}, sluice::host_region(slice),
           sluice::byte_range{1000 * sizeof(float), 1000 * sizeof(float)});
  CHECK(slice.front() == segment[1000]);
  CHECK(slice.back() == segment[1999]);
}

TEST_CASE_FIXTURE(in_process, "errors come back as error codes a test can assert on") {
  std::vector<std::byte> small(10);
  path.get({"segments", "missing"}, sluice::host_region(small), ec);
  CHECK(ec == sluice::errc::no_such_object);

  std::vector<std::byte> data(100, std::byte{1});
  path.put({"segments", "k"}, sluice::host_region(data));
  path.get({"segments", "k"}, sluice::host_region(small), ec);  // 100 bytes do not fit in 10
  CHECK(ec == sluice::errc::region_too_small);
}

TEST_CASE_FIXTURE(in_process, "asynchronous use: many reads in flight on one io_context") {
  auto segment = make_vectors(std::size_t{64} * 1024);
  path.put({"segments", "seg-async"}, sluice::host_region(segment));

  boost::asio::io_context io;
  std::vector<float> out(segment.size());
  constexpr std::size_t parts = 8;
  const std::size_t part_bytes = out.size() * sizeof(float) / parts;
  int done = 0;
  for (std::size_t i = 0; i < parts; ++i) {
    const sluice::region whole = sluice::host_region(out);
    const sluice::region part = whole.subregion(i * part_bytes, part_bytes, ec);
    path.async_get({"segments", "seg-async"}, part, sluice::byte_range{i * part_bytes, part_bytes},
                   boost::asio::bind_executor(io, [&](sluice::error_code e, sluice::transfer_result r) {
                     CHECK(!e);
                     CHECK(r.bytes == part_bytes);
                     ++done;
                   }));
  }
  io.run();
  CHECK(done == static_cast<int>(parts));
  CHECK(out == segment);
}

TEST_CASE_FIXTURE(in_process, "choose the path at run time through any_path") {
  std::vector<sluice::any_path> choices;
  choices.emplace_back(
      test_path{sluice::local_negotiator<store_type>{store}, sluice::host_registrar{}, sluice::loopback_transport{}});
  sluice::any_path& chosen = choices.front();
  std::vector<std::byte> data(4096, std::byte{9});
  CHECK(chosen.put({"segments", "erased"}, sluice::host_region(data)).bytes == 4096);
  CHECK(chosen.transport_name() == "loopback");
}
