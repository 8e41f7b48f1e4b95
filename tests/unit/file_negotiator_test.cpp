// SPDX-License-Identifier: Apache-2.0
#include <sluice/file/negotiator.hpp>

#include <sluice/file/transport.hpp>
#include <sluice/host_registrar.hpp>

#include <doctest/doctest.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <fcntl.h>

#include <cerrno>
#include <filesystem>
#include <optional>
#include <system_error>
#include <vector>

#include "conformance/file_fixtures.hpp"
#include "conformance/host_fixtures.hpp"
#include "conformance/negotiator_conformance.hpp"
#include "conformance/transport_conformance.hpp"

namespace {

using sluice::errc;
using sluice::error_code;
using sluice::transfer_request;
using sluice::transfer_result;
using sluice::file::negotiator;

static_assert(sluice::negotiator<negotiator>);

struct negotiated {
  error_code ec;
  std::optional<negotiator::session> session;
};

negotiated negotiate(const negotiator& n, const transfer_request& request) {
  boost::asio::io_context context;
  negotiated out;
  auto copy = n;
  copy.async_negotiate(request, boost::asio::bind_executor(context, [&](error_code ec, negotiator::session s) {
                         out.ec = ec;
                         out.session.emplace(std::move(s));
                       }));
  context.run();
  return out;
}

std::pair<error_code, transfer_result> complete(negotiator::session s, error_code transport, std::uint64_t bytes) {
  boost::asio::io_context context;
  std::pair<error_code, transfer_result> out;
  negotiator n;
  n.async_complete(std::move(s), transport, bytes,
                   boost::asio::bind_executor(context, [&](error_code ec, const transfer_result& r) {
                     out = {ec, r};
                   }));
  context.run();
  return out;
}

bool open_descriptor(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

/// The file negotiator in the negotiator conformance suite, with io_uring reads: files in the
/// temporary directory, the key their path.
struct file_negotiator_fixture {
  using negotiator_type = sluice::file::negotiator;
  using transport_type = sluice::file::uring_transport;
  using registrar_type = sluice::host_registrar;
  static constexpr bool reads_only = true;        // files are read only
  static constexpr bool missing_is_errno = true;  // ENOENT from open
  sluice::object_ref seed(std::span<const std::byte> data) {
    files.push_back(std::make_unique<sluice::testing::file_on_disk>(data));
    return {"", files.back()->path().string()};
  }
  static sluice::object_ref absent() {
    return {"",
            (std::filesystem::temp_directory_path() / ("sluice-no-such-file-" + std::to_string(::getpid()))).string()};
  }
  static sluice::testing::host_buffer make_local(std::size_t size) { return sluice::testing::host_buffer(size); }
  negotiator_type negotiator;
  transport_type transport{sluice::file::uring_config{.queue_depth = 2, .chunk_bytes = 64 * 1024}};
  registrar_type registrar;
  std::vector<std::unique_ptr<sluice::testing::file_on_disk>> files;
};

}  // namespace

TYPE_TO_STRING(file_negotiator_fixture);
TEST_CASE_TEMPLATE_INVOKE(negotiator_conformance, file_negotiator_fixture);

TEST_CASE("file negotiator: opens the file, resolves the range, closes the file when the session ends") {
  const auto data = sluice::testing::random_bytes(10000, 3);
  const sluice::testing::file_on_disk file(data);
  const std::string key = file.path().string();

  auto out = negotiate(negotiator{}, {{{}, key}, {100, 900}, sluice::direction::get});
  REQUIRE_MESSAGE(!out.ec, out.ec.message());
  REQUIRE(out.session->remote().file != nullptr);
  CHECK(out.session->remote().size() == 10000);
  CHECK(out.session->remote().file->path() == file.path());
  CHECK(!out.session->remote().residency);
  CHECK(out.session->span() == sluice::transfer_span{0, 100, 900});
  const int fd = out.session->remote().file->fd();
  CHECK(open_descriptor(fd));
  const auto [ec, result] = complete(std::move(*out.session), {}, 900);
  out.session.reset();
  CHECK(!ec);
  CHECK(result.bytes == 900);
  CHECK(result.negotiator == "file");
  CHECK(!open_descriptor(fd));

  // To the end of the file, and an empty range at its end.
  out = negotiate(negotiator{}, {{{}, key}, {4096, std::nullopt}, sluice::direction::get});
  REQUIRE(!out.ec);
  CHECK(out.session->span() == sluice::transfer_span{0, 4096, 10000 - 4096});
  out = negotiate(negotiator{}, {{{}, key}, {10000, 0}, sluice::direction::get});
  REQUIRE(!out.ec);
  CHECK(out.session->span().length == 0);
}

TEST_CASE("file negotiator: the residency of the range when asked for") {
  const auto data = sluice::testing::random_bytes(3 * 4096 + 5, 4);
  const sluice::testing::file_on_disk file(data);
  const auto out = negotiate(negotiator({.probe_residency = true}),
                             {{{}, file.path().string()}, {4096, 4096 + 5}, sluice::direction::get});
  REQUIRE_MESSAGE(!out.ec, out.ec.message());
  REQUIRE(out.session->remote().residency);
  CHECK(out.session->remote().residency->pages == 2);  // [4096, 8197) touches pages 1 and 2
  CHECK(out.session->remote().residency->fraction() >= 0);
}

TEST_CASE("file negotiator: refuses what it cannot read, before anything moves") {
  const auto data = sluice::testing::random_bytes(4096, 5);
  const sluice::testing::file_on_disk file(data);
  const std::string key = file.path().string();
  const auto missing = std::filesystem::temp_directory_path() / "sluice-file-negotiator-no-such-file";
  CHECK(negotiate(negotiator{}, {{{}, missing.string()}, {}, sluice::direction::get}).ec ==
        std::errc::no_such_file_or_directory);
  CHECK(
      negotiate(negotiator{}, {{{}, std::filesystem::temp_directory_path().string()}, {}, sluice::direction::get}).ec ==
      errc::invalid_argument);  // a directory
  CHECK(negotiate(negotiator{}, {{{}, key}, {0, 4096}, sluice::direction::put}).ec ==
        errc::invalid_argument);  // files are read only
  CHECK(negotiate(negotiator{}, {{"bucket", key}, {}, sluice::direction::get}).ec == errc::invalid_argument);
  CHECK(negotiate(negotiator{}, {{{}, {}}, {}, sluice::direction::get}).ec == errc::invalid_argument);
  CHECK(negotiate(negotiator{}, {{{}, key}, {4097, std::nullopt}, sluice::direction::get}).ec == errc::bad_range);
  CHECK(negotiate(negotiator{}, {{{}, key}, {1, 4096}, sluice::direction::get}).ec == errc::bad_range);
  CHECK(negotiate(negotiator{}, {{{}, key}, {~std::uint64_t{0}, 2}, sluice::direction::get}).ec == errc::bad_range);
}

TEST_CASE("file negotiator: a read that moved fewer bytes than agreed fails") {
  const auto data = sluice::testing::random_bytes(4096, 6);
  const sluice::testing::file_on_disk file(data);
  auto out = negotiate(negotiator{}, {{{}, file.path().string()}, {}, sluice::direction::get});
  REQUIRE(!out.ec);
  CHECK(complete(std::move(*out.session), {}, 4095).first == errc::protocol_violation);
  out = negotiate(negotiator{}, {{{}, file.path().string()}, {}, sluice::direction::get});
  REQUIRE(!out.ec);
  CHECK(complete(std::move(*out.session), errc::bad_range, 0).first == errc::bad_range);  // the transport's error stays
}
