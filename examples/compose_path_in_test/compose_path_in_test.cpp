// SPDX-License-Identifier: Apache-2.0
// How to compose a whole sluice path inside a unit test, and run the same test body against
// the in-process path and against a real S3 server.
//
// A path is one negotiator (who agrees what moves), one registrar (makes memory reachable) and
// one transport (moves the bytes). The test bodies below are written once, against a fixture
// that owns a path, and run with four:
//   in_process    local_negotiator<memory_store> × host_registrar × loopback_transport
//                 (the "server" is an object store in memory, the bytes move by memcpy)
//   s3_over_http  s3::negotiator × host_registrar × s3::http_transport, against `sluice serve`
//   s3_over_rdma  s3::negotiator × host_registrar × s3::rdma_transport, the same server, the
//                 bytes by libfabric RMA (tcp;ofi_rxm) into the test's memory (x-amz-rdma-token)
//   s3_auto       s3::negotiator × host_registrar × s3::auto_transport, the same server: RDMA
//                 when the server takes the token, else the body of the same request
// The S3 fixtures start `sluice serve` (the binary named by $SLUICE, else `sluice` on PATH) on
// an ephemeral loopback port with a store in a temporary directory.
// A read-only path joins the bodies that only read (a fixture's `seed` puts the object there):
//   file_on_disk  file::negotiator × host_registrar × file::uring_transport
//                 (the object is a file, its key the file's path; io_uring reads)
// Run: ./compose_path_in_test  (doctest options apply; -tc='*in_process*' for one path).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <sluice/sluice.hpp>

#include <doctest/doctest.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#ifdef SLUICE_EXAMPLE_FILE
#include <sluice/file/transport.hpp>

#include <filesystem>
#include <fstream>
#include <system_error>

#include <unistd.h>
#endif

#ifdef SLUICE_EXAMPLE_S3
#include <sluice/fabric/s3_plane.hpp>
#include <sluice/s3/path.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#endif

namespace {

// -- The fixtures: each owns one path and a bucket named "segments" ---------------------------

using store_type = sluice::memory_store;
using local_path =
    sluice::path<sluice::local_negotiator<store_type>, sluice::host_registrar, sluice::loopback_transport>;

struct in_process {
  using path_type = local_path;
  static constexpr const char* name = "in_process";
  in_process() {
    sluice::error_code ec;
    store.create_bucket("segments", ec);
    REQUIRE(!ec);
  }
  path_type make_path() {
    return path_type{sluice::local_negotiator<store_type>{store}, sluice::host_registrar{},
                     sluice::loopback_transport{}};
  }
  static sluice::object_ref object(const std::string& key) { return {"segments", key}; }
  void seed(const std::string& key, std::span<float> bytes) { path.put(object(key), sluice::host_region(bytes)); }
  store_type store{sluice::memory_store_config{.max_bytes = 64 * sluice::mib, .max_object_bytes = 16 * sluice::mib}};
  path_type path = make_path();
};

#ifdef SLUICE_EXAMPLE_S3

// `sluice serve` on 127.0.0.1 (an ephemeral port), one per test program: started by the first
// fixture that needs it, stopped (SIGTERM) and its store removed when the program ends.
class sluice_serve {
 public:
  static sluice_serve& instance() {
    static sluice_serve server;
    return server;
  }
  [[nodiscard]] const std::string& endpoint() const { return endpoint_; }
  sluice_serve(const sluice_serve&) = delete;
  sluice_serve& operator=(const sluice_serve&) = delete;
  ~sluice_serve() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

 private:
  sluice_serve() {
    const char* binary = std::getenv("SLUICE");  // NOLINT(concurrency-mt-unsafe): before any thread
    const std::string program = binary != nullptr ? binary : "sluice";
    std::string dir_template = (std::filesystem::temp_directory_path() / "compose-path-XXXXXX").string();
    REQUIRE(::mkdtemp(dir_template.data()) != nullptr);
    dir_ = dir_template;
    const std::string root = (dir_ / "store").string();
    const std::string log = (dir_ / "serve.log").string();
    std::vector<std::string> args = {program,       "serve",        "--root",         root,           "--listen",
                                     "127.0.0.1:0", "--access-key", "AKEXAMPLE",      "--secret-key", "example-secret",
                                     "--fabric",    "tcp",          "--grant-socket", "off"};
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = ::posix_spawnp(&pid_, program.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE_MESSAGE(rc == 0, "cannot start " << program << " (set $SLUICE to the sluice binary)");
    // Ready when it says "listening on 127.0.0.1:PORT, ...".
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::string said;
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(log);
      std::stringstream text;
      text << in.rdbuf();
      said = text.str();
      if (const auto at = said.find("listening on 127.0.0.1:"); at != std::string::npos) {
        const auto port_at = at + std::string_view("listening on 127.0.0.1:").size();
        endpoint_ = "http://127.0.0.1:" + said.substr(port_at, said.find_first_not_of("0123456789", port_at) - port_at);
        return;
      }
      int status = 0;
      REQUIRE_MESSAGE(::waitpid(pid_, &status, WNOHANG) == 0, "sluice serve exited: " << said);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL("sluice serve did not say it listens within 60 s: " << said);
  }

  pid_t pid_ = -1;
  std::filesystem::path dir_;
  std::string endpoint_;
};

// A client of that server, and an S3 path over it: the bucket is made fresh for each test.
template <class Transport, bool Rdma>
struct s3_fixture {
  using path_type = sluice::path<sluice::s3::negotiator, sluice::host_registrar, Transport>;
  s3_fixture() : client(config()), path(sluice::s3::negotiator{client}, sluice::host_registrar{}, Transport{client}) {
    sluice::error_code ec;  // the last test's bucket, emptied and removed (none the first time)
    for (const auto& object : client.list_all_objects("segments", {}, ec).objects) {
      client.delete_object("segments", object.key);
    }
    client.delete_bucket("segments", ec);
    client.create_bucket("segments");
  }
  static sluice::s3::client_config config() {
    sluice::s3::client_config c;
    c.endpoint = sluice_serve::instance().endpoint();
    c.creds = {"AKEXAMPLE", "example-secret"};
    if constexpr (Rdma) {
      sluice::fabric::client_plane_config plane;
      plane.fabric.provider = "tcp;ofi_rxm";
      plane.fabric.node = "127.0.0.1";
      sluice::error_code ec;
      c.rdma = sluice::fabric::client_plane::open(plane, true, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
    }
    return c;
  }
  static sluice::object_ref object(const std::string& key) { return {"segments", key}; }
  void seed(const std::string& key, std::span<float> bytes) { path.put(object(key), sluice::host_region(bytes)); }
  sluice::s3::client client;
  path_type path;
};

struct s3_over_http : s3_fixture<sluice::s3::http_transport, false> {
  static constexpr const char* name = "s3_over_http";
};
struct s3_over_rdma : s3_fixture<sluice::s3::rdma_transport, true> {
  static constexpr const char* name = "s3_over_rdma";
};
struct s3_auto : s3_fixture<sluice::s3::auto_transport, true> {
  static constexpr const char* name = "s3_auto";
};
#define SLUICE_EXAMPLE_PATHS in_process, s3_over_http, s3_over_rdma, s3_auto
#else
#define SLUICE_EXAMPLE_PATHS in_process
#endif

#ifdef SLUICE_EXAMPLE_FILE
// Files in a temporary directory, read by io_uring into the test's memory. The path reads only:
// seed writes the file the way any other program would.
struct file_on_disk {
  using path_type = sluice::file::host_path;
  static constexpr const char* name = "file_on_disk";
  file_on_disk() {
    static int counter = 0;
    dir = std::filesystem::temp_directory_path() /
          ("compose-path-files-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(dir);
  }
  file_on_disk(const file_on_disk&) = delete;
  file_on_disk& operator=(const file_on_disk&) = delete;
  ~file_on_disk() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  [[nodiscard]] sluice::object_ref object(const std::string& key) const { return {{}, (dir / key).string()}; }
  void seed(const std::string& key, std::span<float> bytes) const {
    std::ofstream out(dir / key, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size_bytes()));
    REQUIRE(out.good());
  }
  std::filesystem::path dir;
  path_type path{sluice::file::negotiator{}, sluice::host_registrar{}, sluice::file::uring_transport{}};
};
#define SLUICE_EXAMPLE_READ_PATHS SLUICE_EXAMPLE_PATHS, file_on_disk
#else
#define SLUICE_EXAMPLE_READ_PATHS SLUICE_EXAMPLE_PATHS
#endif

std::vector<float> make_vectors(std::size_t count) {
  std::vector<float> v(count);
  std::iota(v.begin(), v.end(), 0.5F);
  return v;
}

}  // namespace

// -- The test bodies: written once, run with every fixture --------------------------------------

TEST_CASE_TEMPLATE("upload an index segment, read it back whole and in ranges", Fixture, SLUICE_EXAMPLE_PATHS) {
  Fixture f;
  auto segment = make_vectors(std::size_t{128} * 1024);  // 512 KiB of float32

  // Blocking put: throws sluice::system_error on failure; returns what moved and how.
  const sluice::transfer_result put = f.path.put({"segments", "seg-0001"}, sluice::host_region(segment));
  CHECK(put.bytes == segment.size() * sizeof(float));
  MESSAGE(std::string(Fixture::name) << ": " << put.negotiator << " × " << put.transport);

  // Whole object into fresh memory.
  std::vector<float> loaded(segment.size());
  f.path.get({"segments", "seg-0001"}, sluice::host_region(loaded));
  CHECK(loaded == segment);

  // Just the vectors 1000..1999: a byte range.
  std::vector<float> slice(1000);
  f.path.get({"segments", "seg-0001"}, sluice::host_region(slice),
             sluice::byte_range{1000 * sizeof(float), 1000 * sizeof(float)});
  CHECK(slice.front() == segment[1000]);
  CHECK(slice.back() == segment[1999]);
}

TEST_CASE_TEMPLATE("errors come back as error codes a test can assert on", Fixture, SLUICE_EXAMPLE_PATHS) {
  Fixture f;
  sluice::error_code ec;
  std::vector<std::byte> small(10);
  f.path.get({"segments", "missing"}, sluice::host_region(small), ec);
  CHECK(ec == sluice::condition::not_found);  // the store's "no such object", S3's NoSuchKey

  std::vector<std::byte> data(100, std::byte{1});
  f.path.put({"segments", "k"}, sluice::host_region(data));
  f.path.get({"segments", "k"}, sluice::host_region(small), ec);  // 100 bytes do not fit in 10
  CHECK(ec == sluice::errc::region_too_small);
  f.path.get({"segments", "k"}, sluice::host_region(small), sluice::byte_range{95, 10}, ec);  // past the end
  CHECK(ec == sluice::errc::bad_range);
}

TEST_CASE_TEMPLATE("asynchronous use: many reads in flight on one io_context", Fixture, SLUICE_EXAMPLE_PATHS) {
  Fixture f;
  auto segment = make_vectors(std::size_t{64} * 1024);
  f.path.put({"segments", "seg-async"}, sluice::host_region(segment));

  boost::asio::io_context io;
  std::vector<float> out(segment.size());
  constexpr std::size_t parts = 8;
  const std::size_t part_bytes = out.size() * sizeof(float) / parts;
  int done = 0;
  for (std::size_t i = 0; i < parts; ++i) {
    sluice::error_code ec;
    const sluice::region part = sluice::host_region(out).subregion(i * part_bytes, part_bytes, ec);
    f.path.async_get({"segments", "seg-async"}, part, sluice::byte_range{i * part_bytes, part_bytes},
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

TEST_CASE_TEMPLATE("choose the path at run time through any_path", Fixture, SLUICE_EXAMPLE_PATHS) {
  Fixture f;
  std::vector<sluice::any_path> choices;
  choices.emplace_back(std::move(f.path));
  sluice::any_path& chosen = choices.front();
  std::vector<std::byte> data(4096, std::byte{9});
  CHECK(chosen.put({"segments", "erased"}, sluice::host_region(data)).bytes == 4096);
  std::vector<std::byte> back(4096);
  CHECK(chosen.get({"segments", "erased"}, sluice::host_region(back)).bytes == 4096);
  CHECK(back == data);
  MESSAGE(std::string(Fixture::name) << ": any_path over " << chosen.negotiator_name() << " × "
                                     << chosen.transport_name());
}

TEST_CASE_TEMPLATE("read a segment that is already there: whole, a range, past its end", Fixture,
                   SLUICE_EXAMPLE_READ_PATHS) {
  Fixture f;
  auto segment = make_vectors(std::size_t{96} * 1024);  // 384 KiB of float32
  f.seed("seg-read", segment);

  std::vector<float> loaded(segment.size());
  const sluice::transfer_result got = f.path.get(f.object("seg-read"), sluice::host_region(loaded));
  CHECK(got.bytes == segment.size() * sizeof(float));
  CHECK(loaded == segment);
  MESSAGE(std::string(Fixture::name) << ": " << got.negotiator << " × " << got.transport);

  std::vector<float> slice(1000);
  f.path.get(f.object("seg-read"), sluice::host_region(slice),
             sluice::byte_range{5000 * sizeof(float), 1000 * sizeof(float)});
  CHECK(slice.front() == segment[5000]);
  CHECK(slice.back() == segment[5999]);

  sluice::error_code ec;
  f.path.get(f.object("seg-read"), sluice::host_region(slice),
             sluice::byte_range{(segment.size() - 999) * sizeof(float), 1000 * sizeof(float)}, ec);
  CHECK(ec == sluice::errc::bad_range);
  f.path.get(f.object("missing"), sluice::host_region(slice), ec);
  CHECK(ec);  // not_found for a store, no_such_file_or_directory for a file
}
