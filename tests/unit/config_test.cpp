// SPDX-License-Identifier: Apache-2.0
#include <sluice/config.hpp>

#include <sluice/detail/regular_file.hpp>

#include <doctest/doctest.h>

#include "temp_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace {

using sluice::gib;
using sluice::kib;
using sluice::mib;

// parse_config's error_code overload, with the results gathered for checks.
struct parsed {
  sluice::config cfg;
  sluice::error_code ec;
  sluice::config_error error;
};

parsed parse(std::string_view json) {
  parsed p;
  p.error = {"stale", "stale"};  // success must clear it
  p.cfg = sluice::parse_config(json, p.ec, p.error);
  return p;
}

void check_defaults(const sluice::config& c) {
  CHECK(c.transfer.part_size == 8 * mib);
  CHECK(c.transfer.parts_in_flight == 4);
  CHECK(c.transfer.staging_bytes == 64 * mib);
  CHECK(c.memory_store.max_bytes == 1 * gib);
  CHECK(c.memory_store.max_object_bytes == 1 * gib);
}

void check_fails(std::string_view json, std::string_view field) {
  CAPTURE(std::string(json));
  const parsed p = parse(json);
  CHECK(p.ec == sluice::errc::invalid_config);
  CHECK(p.error.field == field);
  CHECK_FALSE(p.error.reason.empty());
}

// A file in the temporary directory, removed when the test ends.
class temp_file {
 public:
  explicit temp_file(std::string_view name, std::string_view contents)
      : path_(std::filesystem::temp_directory_path() / std::string(name)) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << contents;
  }
  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;
  ~temp_file() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace

TEST_CASE("the unit constants are binary") {
  CHECK(kib == 1024);
  CHECK(mib == 1024 * 1024);
  CHECK(gib == 1024ULL * 1024 * 1024);
}

TEST_CASE("default configuration is valid") {
  const sluice::config c;
  check_defaults(c);
  CHECK_FALSE(c.validate().has_value());
  CHECK_FALSE(c.transfer.validate().has_value());
  CHECK_FALSE(c.memory_store.validate().has_value());
}

TEST_CASE("config_error message joins field and reason") {
  CHECK(sluice::config_error{"transfer.part_size", "too small"}.message() == "transfer.part_size: too small");
  CHECK(sluice::config_error{"", "malformed"}.message() == "malformed");
}

TEST_CASE("transfer_config::validate bounds") {
  sluice::transfer_config t;
  t.part_size = 4 * kib;
  t.staging_bytes = 4 * kib;
  CHECK_FALSE(t.validate().has_value());
  t.part_size = 4 * kib - 1;
  REQUIRE(t.validate().has_value());
  CHECK(t.validate()->field == "part_size");

  t = {};
  t.part_size = 5 * gib;
  t.staging_bytes = 5 * gib;
  CHECK_FALSE(t.validate().has_value());
  t.part_size = 5 * gib + 1;
  t.staging_bytes = 6 * gib;
  REQUIRE(t.validate().has_value());
  CHECK(t.validate()->field == "part_size");

  t = {};
  t.parts_in_flight = 0;
  REQUIRE(t.validate().has_value());
  CHECK(t.validate()->field == "parts_in_flight");
  t.parts_in_flight = 1;
  CHECK_FALSE(t.validate().has_value());
  t.parts_in_flight = 256;
  CHECK_FALSE(t.validate().has_value());
  t.parts_in_flight = 257;
  REQUIRE(t.validate().has_value());
  CHECK(t.validate()->field == "parts_in_flight");

  t = {};
  t.staging_bytes = t.part_size - 1;
  REQUIRE(t.validate().has_value());
  CHECK(t.validate()->field == "staging_bytes");
  t.staging_bytes = t.part_size;
  CHECK_FALSE(t.validate().has_value());
}

TEST_CASE("memory_store_config::validate bounds") {
  sluice::memory_store_config m;
  m.max_bytes = 0;
  REQUIRE(m.validate().has_value());
  CHECK(m.validate()->field == "max_bytes");
  m = {};
  m.max_object_bytes = 0;
  REQUIRE(m.validate().has_value());
  CHECK(m.validate()->field == "max_object_bytes");
  m = {100, 101};
  REQUIRE(m.validate().has_value());
  CHECK(m.validate()->field == "max_object_bytes");
  m = {100, 100};
  CHECK_FALSE(m.validate().has_value());
  m = {1, 1};
  CHECK_FALSE(m.validate().has_value());
}

TEST_CASE("config::validate prefixes the section") {
  sluice::config c;
  c.transfer.parts_in_flight = 0;
  REQUIRE(c.validate().has_value());
  CHECK(c.validate()->field == "transfer.parts_in_flight");
  c = {};
  c.memory_store.max_bytes = 0;
  REQUIRE(c.validate().has_value());
  CHECK(c.validate()->field == "memory_store.max_bytes");
}

TEST_CASE("parse_config of an empty object keeps the defaults") {
  const parsed p = parse("{}");
  CHECK_FALSE(p.ec);
  CHECK(p.error.field.empty());
  CHECK(p.error.reason.empty());
  check_defaults(p.cfg);

  const parsed sections = parse(R"({"transfer": {}, "memory_store": {}})");
  CHECK_FALSE(sections.ec);
  check_defaults(sections.cfg);
}

TEST_CASE("parse_config reads every field") {
  const parsed p = parse(R"({
    "transfer": {"part_size": 1048576, "parts_in_flight": 16, "staging_bytes": "32 MiB"},
    "memory_store": {"max_bytes": "2GiB", "max_object_bytes": "512KiB"}
  })");
  REQUIRE_FALSE(p.ec);
  CHECK(p.cfg.transfer.part_size == 1 * mib);
  CHECK(p.cfg.transfer.parts_in_flight == 16);
  CHECK(p.cfg.transfer.staging_bytes == 32 * mib);
  CHECK(p.cfg.memory_store.max_bytes == 2 * gib);
  CHECK(p.cfg.memory_store.max_object_bytes == 512 * kib);
}

TEST_CASE("parse_config sizes as integers and as strings") {
  struct size_case {
    const char* json_value;
    std::uint64_t bytes;
  };
  const size_case cases[] = {
      {"8388608", 8 * mib},   {"\"8 MiB\"", 8 * mib}, {"\"512KiB\"", 512 * kib}, {"\"1GiB\"", 1 * gib},
      {"\"4096\"", 4096},     {"4096", 4096},         {"\"16M\"", 16 * mib},     {"\"16 MB\"", 16 * mib},
      {"\"5 GiB\"", 5 * gib}, {"\"65536 B\"", 65536},
  };
  for (const auto& c : cases) {
    const std::string json =
        std::string(R"({"transfer": {"part_size": )") + c.json_value + R"(, "staging_bytes": "8 GiB"}})";
    CAPTURE(json);
    const parsed p = parse(json);
    CHECK_FALSE(p.ec);
    CHECK(p.cfg.transfer.part_size == c.bytes);
  }
}

TEST_CASE("parse_config rejects an unknown field with its path") {
  const parsed p = parse(R"({"transfer": {"bogus": 1}})");
  CHECK(p.ec == sluice::errc::invalid_config);
  CHECK(p.error.field == "transfer.bogus");
  CHECK(p.error.reason == "unknown field");
  check_defaults(p.cfg);  // nothing of a failed parse leaks out

  check_fails(R"({"memory_store": {"max_bytes": "1 GiB", "MAX_BYTES": 1}})", "memory_store.MAX_BYTES");
}

TEST_CASE("parse_config rejects an unknown section") {
  const parsed p = parse(R"({"transfers": {}})");
  CHECK(p.ec == sluice::errc::invalid_config);
  CHECK(p.error.field == "transfers");
  CHECK(p.error.reason == "unknown section");
}

TEST_CASE("parse_config rejects wrong types") {
  check_fails(R"({"transfer": {"part_size": true}})", "transfer.part_size");
  check_fails(R"({"transfer": {"part_size": -4096}})", "transfer.part_size");
  check_fails(R"({"transfer": {"part_size": 4096.5}})", "transfer.part_size");
  check_fails(R"({"transfer": {"part_size": null}})", "transfer.part_size");
  check_fails(R"({"transfer": {"part_size": [4096]}})", "transfer.part_size");
  check_fails(R"({"transfer": {"part_size": "8 parsecs"}})", "transfer.part_size");
  check_fails(R"({"transfer": {"parts_in_flight": "4"}})", "transfer.parts_in_flight");
  check_fails(R"({"transfer": {"parts_in_flight": -1}})", "transfer.parts_in_flight");
  check_fails(R"({"transfer": {"parts_in_flight": 4294967296}})", "transfer.parts_in_flight");
  check_fails(R"({"transfer": 5})", "transfer");
  check_fails(R"({"memory_store": []})", "memory_store");
}

TEST_CASE("parse_config rejects out-of-range values with the field path") {
  const parsed p = parse(R"({"transfer": {"part_size": "1 KiB"}})");
  CHECK(p.ec == sluice::errc::invalid_config);
  CHECK(p.error.field == "transfer.part_size");
  CHECK(p.error.reason == "must be between 4 KiB and 5 GiB");
  CHECK(p.error.message() == "transfer.part_size: must be between 4 KiB and 5 GiB");

  check_fails(R"({"transfer": {"parts_in_flight": 0}})", "transfer.parts_in_flight");
  check_fails(R"({"transfer": {"parts_in_flight": 257}})", "transfer.parts_in_flight");
  check_fails(R"({"memory_store": {"max_bytes": 0}})", "memory_store.max_bytes");
  check_fails(R"({"memory_store": {"max_bytes": "1 MiB"}})", "memory_store.max_object_bytes");
}

TEST_CASE("parse_config rejects staging smaller than one part") {
  const parsed p = parse(R"({"transfer": {"part_size": "16 MiB", "staging_bytes": "8 MiB"}})");
  CHECK(p.ec == sluice::errc::invalid_config);
  CHECK(p.error.field == "transfer.staging_bytes");

  // A part as large as the default staging bound is fine when staging grows with it.
  const parsed ok = parse(R"({"transfer": {"part_size": "128 MiB", "staging_bytes": "128 MiB"}})");
  CHECK_FALSE(ok.ec);
}

TEST_CASE("parse_config rejects malformed JSON and a non-object root") {
  for (std::string_view bad : {R"({"transfer": )", "", "{", "not json", R"({"transfer": {}} trailing)",
                               R"({"transfer": {"part_size": 4096,}})"}) {
    CAPTURE(std::string(bad));
    const parsed p = parse(bad);
    CHECK(p.ec == sluice::errc::invalid_config);
    CHECK(p.error.field.empty());
    CHECK(p.error.reason.starts_with("malformed JSON"));
  }
  for (std::string_view root : {"[]", "42", R"("text")", "null", "true"}) {
    CAPTURE(std::string(root));
    const parsed p = parse(root);
    CHECK(p.ec == sluice::errc::invalid_config);
    CHECK(p.error.field.empty());
    CHECK(p.error.reason == "the configuration must be a JSON object");
  }
}

TEST_CASE("the throwing parse_config") {
  const sluice::config c = sluice::parse_config(R"({"transfer": {"parts_in_flight": 8}})");
  CHECK(c.transfer.parts_in_flight == 8);

  CHECK_THROWS_WITH_AS((void)sluice::parse_config(R"({"transfer": {"bogus": 1}})"), "transfer.bogus: unknown field",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)sluice::parse_config(R"({"transfer": {"part_size": 1024}})"),
                       "transfer.part_size: must be between 4 KiB and 5 GiB", std::invalid_argument);
  CHECK_THROWS_AS((void)sluice::parse_config("[1, 2"), std::invalid_argument);
}

TEST_CASE("load_config of a missing file names the file") {
  const auto missing = std::filesystem::temp_directory_path() / "sluice-config-test-does-not-exist.json";
  std::error_code ignored;
  std::filesystem::remove(missing, ignored);
  sluice::error_code ec;
  sluice::config_error error;
  const sluice::config c = sluice::load_config(missing, ec, error);
  CHECK(ec == sluice::errc::invalid_config);
  CHECK(error.field == missing.string());
  CHECK(error.reason == "cannot read the file: No such file or directory");
  check_defaults(c);
}

TEST_CASE("load_config reads and validates a file") {
  const temp_file good("sluice-config-test-good.json",
                       R"({"transfer": {"part_size": "16 MiB", "parts_in_flight": 2}})");
  sluice::error_code ec;
  sluice::config_error error;
  const sluice::config c = sluice::load_config(good.path(), ec, error);
  REQUIRE_FALSE(ec);
  CHECK(c.transfer.part_size == 16 * mib);
  CHECK(c.transfer.parts_in_flight == 2);
  CHECK(c.transfer.staging_bytes == 64 * mib);

  const temp_file bad("sluice-config-test-bad.json", R"({"memory_store": {"bogus": 1}})");
  (void)sluice::load_config(bad.path(), ec, error);
  CHECK(ec == sluice::errc::invalid_config);
  CHECK(error.field == "memory_store.bogus");
}

TEST_CASE("parse_size accepts integers with binary units") {
  CHECK(sluice::parse_size("0") == 0u);
  CHECK(sluice::parse_size("4096") == 4096u);
  CHECK(sluice::parse_size("4096B") == 4096u);
  CHECK(sluice::parse_size("4096 B") == 4096u);
  CHECK(sluice::parse_size("8 MiB") == 8 * mib);
  CHECK(sluice::parse_size("8MiB") == 8 * mib);
  CHECK(sluice::parse_size("8   MiB") == 8 * mib);
  CHECK(sluice::parse_size("512KiB") == 512 * kib);
  CHECK(sluice::parse_size("512K") == 512 * kib);
  CHECK(sluice::parse_size("512KB") == 512 * kib);
  CHECK(sluice::parse_size("512 kib") == std::nullopt);
  CHECK(sluice::parse_size("512 k") == 512 * kib);
  CHECK(sluice::parse_size("1GiB") == gib);
  CHECK(sluice::parse_size("1G") == gib);
  CHECK(sluice::parse_size("1 GB") == gib);
  CHECK(sluice::parse_size("2 TiB") == 2 * 1024 * gib);
  CHECK(sluice::parse_size("3T") == 3 * 1024 * gib);
  CHECK(sluice::parse_size("18446744073709551615") == std::numeric_limits<std::uint64_t>::max());
  CHECK(sluice::parse_size("16777215 TiB") == 16777215ULL * 1024 * gib);  // the largest whole TiB count
}

TEST_CASE("parse_size rejects garbage, overflow and negative numbers") {
  for (std::string_view bad : {"",
                               " ",
                               "MiB",
                               " 8 MiB",
                               "-1",
                               "+1",
                               "8 MiBs",
                               "8 MiB ",
                               "8 Mi",
                               "8 iB",
                               "8 XiB",
                               "8 mib",
                               "8 b",
                               "8\tMiB",
                               "8.5 MiB",
                               "0x10",
                               "8 M iB",
                               "8MiB8",
                               "99999999999 TiB",
                               "16777216 TiB",
                               "18446744073709551616",
                               "99999999999999999999999",
                               "18014398509481984 KiB"}) {
    CAPTURE(std::string(bad));
    CHECK(sluice::parse_size(bad) == std::nullopt);
  }
}

TEST_CASE("parse_size reads only the view it is given") {
  const std::string_view text = std::string_view("4096KiB").substr(0, 4);
  CHECK(sluice::parse_size(text) == 4096u);
}

namespace {

using sluice::testing::temp_dir;

constexpr std::string_view not_regular =
    "cannot read the file: not a regular file (a FIFO, socket, device or directory is refused)";

}  // namespace

TEST_CASE("load_config refuses a FIFO at once instead of waiting for a writer") {
  const temp_dir dir("sluice-config-test-fifo");
  const auto fifo = dir.path() / "config.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  sluice::error_code ec;
  sluice::config_error error;
  const auto start = std::chrono::steady_clock::now();
  const sluice::config c = sluice::load_config(fifo, ec, error);  // an ifstream waited here for a writer
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  CHECK(ec == sluice::errc::invalid_config);
  CHECK(error.field == fifo.string());
  CHECK(error.reason == not_regular);
  check_defaults(c);
}

TEST_CASE("load_config refuses devices, a symbolic link to one, and directories") {
  const temp_dir dir("sluice-config-test-devices");
  const auto link = dir.path() / "zero.json";
  std::filesystem::create_symlink("/dev/zero", link);
  for (const std::filesystem::path& path :
       {std::filesystem::path("/dev/zero"), std::filesystem::path("/dev/null"), link, dir.path()}) {
    CAPTURE(path.string());
    sluice::error_code ec;
    sluice::config_error error;
    (void)sluice::load_config(path, ec, error);
    CHECK(ec == sluice::errc::invalid_config);
    CHECK(error.field == path.string());
    CHECK(error.reason == not_regular);
  }
}

TEST_CASE("load_config follows a symbolic link to a regular file") {
  const temp_dir dir("sluice-config-test-link");
  {
    std::ofstream out(dir.path() / "real.json");
    out << R"({"transfer": {"parts_in_flight": 3}})";
  }
  std::filesystem::create_symlink(dir.path() / "real.json", dir.path() / "config.json");
  sluice::error_code ec;
  sluice::config_error error;
  const sluice::config c = sluice::load_config(dir.path() / "config.json", ec, error);
  REQUIRE_FALSE(ec);
  CHECK(c.transfer.parts_in_flight == 3);
}

TEST_CASE("read_config_file holds at most max_config_file_bytes") {
  const temp_dir dir("sluice-config-test-size");
  const auto file = dir.path() / "config.json";
  const auto write = [&](std::size_t size) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << "{}" << std::string(size - 2, ' ');
  };
  sluice::error_code ec;
  sluice::config_error error;
  write(sluice::max_config_file_bytes);
  CHECK(sluice::read_config_file(file, ec, error).size() == sluice::max_config_file_bytes);
  CHECK_FALSE(ec);
  (void)sluice::load_config(file, ec, error);
  CHECK_FALSE(ec);

  write(sluice::max_config_file_bytes + 1);
  CHECK(sluice::read_config_file(file, ec, error).empty());
  CHECK(ec == sluice::errc::invalid_config);
  CHECK(error.field == file.string());
  CHECK(error.reason == "larger than 1 MiB, the most a configuration file may hold");
}

TEST_CASE("read_regular_file bounds a file that reports no size (procfs) by reading, not by fstat") {
  sluice::error_code ec;
  // /proc/self/status is a regular file of st_size 0 holding about 1 KiB.
  CHECK(sluice::detail::read_regular_file("/proc/self/status", 16, ec).empty());
  CHECK(ec == sluice::detail::file_errc::too_large);
  const std::string whole = sluice::detail::read_regular_file("/proc/self/status", 1 << 20, ec);
  CHECK_FALSE(ec);
  CHECK(whole.find("Name:") == 0);
}
