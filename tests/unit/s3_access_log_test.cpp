// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/access_log.hpp>

#include <sluice/detail/regular_file.hpp>

#include <doctest/doctest.h>

#include "temp_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

sluice::s3::access_record sample() {
  sluice::s3::access_record r;
  r.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1764044280123));  // 2025-11-25T04:18:00.123Z
  r.remote = "127.0.0.1";
  r.user = "AK";
  r.method = "GET";
  r.bucket = "b";
  r.key = "a key\nwith \"quotes\"";
  r.operation = "GetObject";
  r.status = 200;
  r.bytes_sent = 4096;
  r.path = "http";
  r.duration_us = 57;
  r.request_id = "51c3000001";
  return r;
}

}  // namespace

TEST_CASE("text fields escape separators, line breaks, quotes and '%', empty is '-'") {
  std::string out;
  sluice::s3::append_text_field(out, "a b\n\r\t\"%\x7f\xff/ok");
  CHECK(out == "a%20b%0A%0D%09%22%25%7F%FF/ok");
  out.clear();
  sluice::s3::append_text_field(out, "");
  CHECK(out == "-");
  out.clear();
  sluice::s3::append_text_field(out, "-");
  CHECK(out == "%2D");
}

TEST_CASE("a text line has 15 space-separated fields and one newline, whatever the key") {
  const std::string line = sluice::s3::format_access_line(sample(), sluice::s3::access_log_format::text);
  CHECK(line ==
        "2025-11-25T04:18:00.123Z 127.0.0.1 AK GET b a%20key%0Awith%20%22quotes%22 GetObject 200 - 4096 0 0 http 57 "
        "51c3000001\n");
  auto hostile = sample();
  constexpr char raw[] = "x\n2025-11-25T04:18:00.123Z forged line\r\0 ";  // a NUL inside: keep every byte
  const std::string key(raw, sizeof raw - 1);
  hostile.key = key;
  const std::string forged = sluice::s3::format_access_line(hostile, sluice::s3::access_log_format::text);
  CHECK(std::count(forged.begin(), forged.end(), '\n') == 1);
  CHECK(std::count(forged.begin(), forged.end(), ' ') == 14);
  CHECK(forged.find('\0') == std::string::npos);
}

TEST_CASE("a request not authenticated has user '-' in both formats") {
  auto r = sample();
  r.user = {};
  r.error = "AccessDenied";
  r.status = 403;
  const std::string text = sluice::s3::format_access_line(r, sluice::s3::access_log_format::text);
  CHECK(text.find(" 127.0.0.1 - GET ") != std::string::npos);
  CHECK(text.find(" 403 AccessDenied ") != std::string::npos);
  const std::string json = sluice::s3::format_access_line(r, sluice::s3::access_log_format::json);
  CHECK(json.find(R"("user":"-")") != std::string::npos);
  CHECK(json.find(R"("error":"AccessDenied")") != std::string::npos);
}

TEST_CASE("JSON strings escape quotes, backslashes, control characters and invalid UTF-8") {
  std::string out;
  sluice::s3::append_json_string(out, "q\"b\\n\n\x01\x7f \xc3\xa9 \xff \xe0\x80\x80");
  CHECK(out == "\"q\\\"b\\\\n\\n\\u0001\\u007F \xc3\xa9 \\u00FF \\u00E0\\u0080\\u0080\"");
}

TEST_CASE("a JSON line is one object with every field") {
  const std::string line = sluice::s3::format_access_line(sample(), sluice::s3::access_log_format::json);
  CHECK(line == R"({"time":"2025-11-25T04:18:00.123Z","remote":"127.0.0.1","user":"AK","method":"GET","bucket":"b",)"
                R"("key":"a key\nwith \"quotes\"","operation":"GetObject","status":200,"error":"-","bytes_sent":4096,)"
                R"("bytes_received":0,"bytes_direct":0,"path":"http","duration_us":57,"request_id":"51c3000001"})"
                "\n");
}

TEST_CASE("lines written from many threads to a file never interleave") {
  const auto path = std::filesystem::temp_directory_path() / ("sluice-access-log-test-" + std::to_string(::getpid()));
  std::filesystem::remove(path);
  {
    sluice::error_code ec;
    sluice::s3::access_log log({sluice::s3::access_log_target::file, path, sluice::s3::access_log_format::text}, ec);
    REQUIRE(!ec);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&log, t] {
        const std::string line = std::string(100 + static_cast<std::size_t>(t) * 37, static_cast<char>('a' + t)) + "\n";
        for (int i = 0; i < 2000; ++i) log.write(line);
      });
    }
    for (auto& thread : threads) thread.join();
  }  // destruction flushes
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    REQUIRE(!line.empty());
    CHECK(line.size() == 100 + static_cast<std::size_t>(line[0] - 'a') * 37);
    CHECK(line.find_first_not_of(line[0]) == std::string::npos);
  }
  CHECK(lines == 8000);
  std::filesystem::remove(path);
}

TEST_CASE("an access log file that cannot be opened is an error") {
  sluice::error_code ec;
  sluice::s3::access_log log(
      {sluice::s3::access_log_target::file, "/nonexistent-dir/x/access.log", sluice::s3::access_log_format::json}, ec);
  CHECK(ec);
}

namespace {

using sluice::testing::temp_dir;

std::string contents(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

sluice::s3::access_log_config log_file(const std::filesystem::path& path) {
  return {sluice::s3::access_log_target::file, path, sluice::s3::access_log_format::text};
}

}  // namespace

TEST_CASE("an access log path that is a symbolic link is refused, and its target is not written") {
  const temp_dir dir("sluice-access-log-link");
  const auto target = dir.path() / "target";
  {
    std::ofstream out(target);
    out << "precious\n";
  }
  std::filesystem::create_symlink(target, dir.path() / "access.log");
  std::filesystem::create_symlink(dir.path() / "absent", dir.path() / "dangling.log");
  for (const auto& path : {dir.path() / "access.log", dir.path() / "dangling.log"}) {
    CAPTURE(path.string());
    sluice::error_code ec;
    {
      sluice::s3::access_log log(log_file(path), ec);
      log.write("a line\n");
    }
    CHECK(ec == sluice::detail::file_errc::symbolic_link);
    CHECK(ec.message() == "is a symbolic link (refused: name the file itself)");
  }
  CHECK(contents(target) == "precious\n");
  CHECK_FALSE(std::filesystem::exists(dir.path() / "absent"));  // a dangling link creates nothing
}

TEST_CASE("an access log path that is a FIFO, a device or a directory is refused at once") {
  const temp_dir dir("sluice-access-log-fifo");
  const auto fifo = dir.path() / "access.log";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::filesystem::path& path : {fifo, std::filesystem::path("/dev/null"), dir.path()}) {
    CAPTURE(path.string());
    sluice::error_code ec;
    sluice::s3::access_log log(log_file(path), ec);
    CHECK(ec == sluice::detail::file_errc::not_regular_file);
  }
}

TEST_CASE("reopen refuses a symbolic link put where the rotated log was, and keeps the open file") {
  const temp_dir dir("sluice-access-log-reopen");
  const auto path = dir.path() / "access.log";
  const auto rotated = dir.path() / "access.log.1";
  const auto target = dir.path() / "target";
  sluice::error_code ec;
  sluice::s3::access_log log(log_file(path), ec);
  REQUIRE_FALSE(ec);
  log.write("first\n");
  log.flush();
  std::filesystem::rename(path, rotated);  // logrotate
  { std::ofstream out(target); }
  std::filesystem::create_symlink(target, path);
  log.reopen(ec);
  CHECK(ec == sluice::detail::file_errc::symbolic_link);
  log.write("second\n");
  log.flush();
  CHECK(contents(rotated) == "first\nsecond\n");
  CHECK(contents(target).empty());

  // A regular file there again: the next reopen takes it.
  std::filesystem::remove(path);
  log.reopen(ec);
  CHECK_FALSE(ec);
  log.write("third\n");
  log.flush();
  CHECK(contents(path) == "third\n");
}
