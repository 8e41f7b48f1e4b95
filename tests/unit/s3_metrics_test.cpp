// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/metrics.hpp>

#include <sluice/memory_store.hpp>
#include <sluice/s3/server.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

}  // namespace

TEST_CASE("every metric has # HELP and # TYPE") {
  const sluice::s3::server_metrics metrics;
  const std::string text = metrics.render(3);
  for (const auto* name : {"sluice_requests_total counter", "sluice_request_errors_total counter",
                           "sluice_bytes_total counter", "sluice_request_duration_seconds histogram",
                           "sluice_rdma_declines_total counter", "sluice_open_connections gauge"}) {
    CHECK(text.find(std::string("# TYPE ") + name + "\n") != std::string::npos);
  }
  CHECK(text.find("# HELP sluice_requests_total ") != std::string::npos);
  CHECK(has_line(text, "sluice_open_connections 3"));
  CHECK(has_line(text, R"(sluice_bytes_total{direction="in",path="http"} 0)"));
  CHECK(text.back() == '\n');
}

TEST_CASE("requests count by operation and status, errors by S3 code") {
  sluice::s3::server_metrics metrics;
  using sluice::s3::operation;
  metrics.record(operation::get_object, 200, "", 50us);
  metrics.record(operation::get_object, 200, "", 300us);
  metrics.record(operation::get_object, 404, "NoSuchKey", 2ms);
  metrics.record(operation::put_object, 418, "SomethingElse", 20s);
  metrics.add_bytes(sluice::s3::byte_direction::out, sluice::s3::byte_path::rdma, 1 << 20);
  metrics.rdma_declined(sluice::s3::rdma_decline_reason::provider);
  const std::string text = metrics.render(0);
  CHECK(has_line(text, R"(sluice_requests_total{operation="GetObject",code="200"} 2)"));
  CHECK(has_line(text, R"(sluice_requests_total{operation="GetObject",code="404"} 1)"));
  CHECK(has_line(text, R"(sluice_requests_total{operation="PutObject",code="other"} 1)"));
  CHECK(has_line(text, R"(sluice_request_errors_total{operation="GetObject",code="NoSuchKey"} 1)"));
  CHECK(has_line(text, R"(sluice_request_errors_total{operation="PutObject",code="Other"} 1)"));
  CHECK(has_line(text, R"(sluice_bytes_total{direction="out",path="rdma"} 1048576)"));
  CHECK(has_line(text, R"(sluice_rdma_declines_total{reason="provider"} 1)"));
  CHECK(text.find("HeadObject") == std::string::npos);  // series appear once they count
}

TEST_CASE("histogram buckets are cumulative and end in +Inf equal to _count") {
  sluice::s3::server_metrics metrics;
  using sluice::s3::operation;
  metrics.record(operation::get_object, 200, "", 50us);   // le 0.0001
  metrics.record(operation::get_object, 200, "", 100us);  // le 0.0001 (bounds are inclusive)
  metrics.record(operation::get_object, 200, "", 300us);  // le 0.0005
  metrics.record(operation::get_object, 200, "", 120s);   // +Inf only
  const std::string text = metrics.render(0);
  CHECK(has_line(text, R"(sluice_request_duration_seconds_bucket{operation="GetObject",le="0.0001"} 2)"));
  CHECK(has_line(text, R"(sluice_request_duration_seconds_bucket{operation="GetObject",le="0.00025"} 2)"));
  CHECK(has_line(text, R"(sluice_request_duration_seconds_bucket{operation="GetObject",le="0.0005"} 3)"));
  CHECK(has_line(text, R"(sluice_request_duration_seconds_bucket{operation="GetObject",le="60"} 3)"));
  CHECK(has_line(text, R"(sluice_request_duration_seconds_bucket{operation="GetObject",le="+Inf"} 4)"));
  CHECK(has_line(text, R"(sluice_request_duration_seconds_count{operation="GetObject"} 4)"));
  CHECK(has_line(text, R"(sluice_request_duration_seconds_sum{operation="GetObject"} 120.00045)"));
}

TEST_CASE("label values escape quotes, backslashes and newlines") {
  std::string out;
  sluice::s3::append_label_value(out, "a\"b\\c\nd");
  CHECK(out == R"("a\"b\\c\nd")");
}

TEST_CASE("counts from many threads add up across the shards") {
  sluice::s3::server_metrics metrics;
  std::vector<std::thread> threads;
  for (int t = 0; t < 12; ++t) {
    threads.emplace_back([&metrics] {
      for (int i = 0; i < 1000; ++i) {
        metrics.record(sluice::s3::operation::get_object, 200, "", 1ms);
        metrics.add_bytes(sluice::s3::byte_direction::out, sluice::s3::byte_path::http, 10);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const std::string text = metrics.render(0);
  CHECK(has_line(text, R"(sluice_requests_total{operation="GetObject",code="200"} 12000)"));
  CHECK(has_line(text, R"(sluice_bytes_total{direction="out",path="http"} 120000)"));
  CHECK(has_line(text, R"(sluice_request_duration_seconds_bucket{operation="GetObject",le="+Inf"} 12000)"));
  CHECK(has_line(text, R"(sluice_request_duration_seconds_sum{operation="GetObject"} 12)"));
}

TEST_CASE("metrics sources append their families after the server's own") {
  const sluice::s3::server_metrics metrics;
  using sluice::s3::metric_type;
  std::vector<sluice::s3::metrics_source> sources;
  sources.emplace_back([](sluice::s3::metrics_writer& out) {
    out.family("host_cache_bytes", metric_type::gauge, "Bytes cached.\nSecond line, a \\ backslash.");
    out.sample(42);
    out.family("host_hits_total", metric_type::counter, "Hits by provider.");
    out.sample(1, {{"provider", "tcp;ofi_rxm"}});
    out.sample(2, {{"provider", "a\"b"}, {"lane", "0"}});
  });
  sources.emplace_back(nullptr);  // an empty function is skipped
  sources.emplace_back([](sluice::s3::metrics_writer& out) {
    out.sample(7);                                            // before any family: skipped
    out.family("0bad name", metric_type::gauge, "Invalid.");  // skipped with its samples
    out.sample(8);
    out.family("host_ok", metric_type::gauge, "Valid.");
    out.sample(9, {{"bad-label", "x"}});  // an invalid label name: skipped
    out.sample(10);
  });
  const std::string text = metrics.render(0, sources);
  const auto own = text.find("sluice_open_connections 0\n");
  const auto first = text.find("# HELP host_cache_bytes");
  REQUIRE(own != std::string::npos);
  REQUIRE(first != std::string::npos);
  CHECK(own < first);
  CHECK(text.find("# HELP host_cache_bytes Bytes cached.\\nSecond line, a \\\\ backslash.\n") != std::string::npos);
  CHECK(has_line(text, "# TYPE host_cache_bytes gauge"));
  CHECK(has_line(text, "host_cache_bytes 42"));
  CHECK(has_line(text, "# TYPE host_hits_total counter"));
  CHECK(has_line(text, R"(host_hits_total{provider="tcp;ofi_rxm"} 1)"));
  CHECK(has_line(text, R"(host_hits_total{provider="a\"b",lane="0"} 2)"));
  CHECK(text.find("0bad name") == std::string::npos);
  CHECK(text.find("bad-label") == std::string::npos);
  CHECK(text.find(" 7\n") == std::string::npos);
  CHECK(text.find(" 8\n") == std::string::npos);
  CHECK(text.find(" 9\n") == std::string::npos);
  CHECK(has_line(text, "host_ok 10"));
  CHECK(text.back() == '\n');
}

TEST_CASE("a metrics source that throws loses what it wrote, and the others stay") {
  const sluice::s3::server_metrics metrics;
  std::vector<sluice::s3::metrics_source> sources;
  sources.emplace_back([](sluice::s3::metrics_writer& out) {
    out.family("host_partial", sluice::s3::metric_type::gauge, "Half written.");
    out.sample(1);
    throw std::runtime_error("plane closed\nfor good");
  });
  sources.emplace_back([](sluice::s3::metrics_writer& out) {
    out.family("host_after", sluice::s3::metric_type::gauge, "Still here.");
    out.sample(2);
  });
  const std::string text = metrics.render(0, sources);
  CHECK(text.find("host_partial") == std::string::npos);
  CHECK(has_line(text, "# a metrics source failed: plane closed for good"));
  CHECK(has_line(text, "host_after 2"));
}

TEST_CASE("a server's /metrics carries its config's metrics sources at every scrape") {
  sluice::memory_store store;
  sluice::s3::server_config config;
  config.port = 0;
  config.users = {{"AK", "SK"}};
  config.io_threads = 2;
  config.admin_listen = sluice::s3::admin_listener{"127.0.0.1", 0};
  auto scrapes = std::make_shared<std::atomic<std::uint64_t>>(0);
  config.metrics_sources.emplace_back([scrapes](sluice::s3::metrics_writer& out) {
    out.family("host_scrapes_total", sluice::s3::metric_type::counter, "Times this source ran.");
    out.sample(++*scrapes);
  });
  sluice::s3::server server(store, config);
  server.listen();
  const auto scrape = [&] {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket socket(io);
    socket.connect(server.admin_endpoint());
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n";
    boost::asio::write(socket, boost::asio::buffer(request));
    std::string answer;
    boost::system::error_code ec;
    boost::asio::read(socket, boost::asio::dynamic_buffer(answer), ec);  // to the end: the server closes
    return answer;
  };
  const std::string first = scrape();
  CHECK(first.starts_with("HTTP/1.1 200"));
  CHECK(has_line(first, "# TYPE host_scrapes_total counter"));
  CHECK(has_line(first, "host_scrapes_total 1"));
  CHECK(has_line(scrape(), "host_scrapes_total 2"));
  server.stop();
}
