#include <sluice/s3/metrics.hpp>

#include <doctest/doctest.h>

#include <chrono>
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
