// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/metrics.hpp; included by src/s3/s3.cpp.
#include <sluice/s3/error.hpp>
#include <sluice/s3/metrics.hpp>

#include <algorithm>
#include <charconv>
#include <exception>

namespace sluice::s3 {

namespace metrics_impl {

constexpr auto relaxed = std::memory_order_relaxed;

// The slot of s3 error code `code` (0: none of s3::errc).
std::size_t error_slot(std::string_view code) noexcept {
  for (int i = 1; i < 64; ++i) {
    if (code_string(static_cast<errc>(i)) == code) return static_cast<std::size_t>(i);
  }
  return 0;
}

// The shortest text that reads back as `value` ("0.00025", not "0.00025000000000000001").
void append_double(std::string& out, double value) {
  char buf[400];  // fixed notation of any double
  const auto result = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::fixed);
  out.append(buf, result.ptr);
}

void append_header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

// A metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), or with `colon` false a label name.
bool valid_name(std::string_view name, bool colon) noexcept {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
    if (!letter && (i == 0 || c < '0' || c > '9')) return false;
  }
  return true;
}

}  // namespace metrics_impl

void metrics_writer::family(std::string_view name, metric_type type, std::string_view help) {
  name_.clear();
  if (!metrics_impl::valid_name(name, true)) return;
  name_ = name;
  // # HELP text escapes only backslashes and line breaks.
  std::string escaped;
  for (const char c : help) {
    if (c == '\\') {
      escaped += "\\\\";
    } else if (c == '\n') {
      escaped += "\\n";
    } else {
      escaped += c;
    }
  }
  metrics_impl::append_header(*out_, name, type == metric_type::counter ? "counter" : "gauge", escaped);
}

void metrics_writer::sample(std::uint64_t value, std::initializer_list<metric_label> labels) {
  if (name_.empty()) return;
  for (const metric_label& label : labels) {
    if (!metrics_impl::valid_name(label.name, false)) return;
  }
  std::string& out = *out_;
  out += name_;
  if (labels.size() > 0) {
    char separator = '{';
    for (const metric_label& label : labels) {
      out += separator;
      out += label.name;
      out += '=';
      append_label_value(out, label.value);
      separator = ',';
    }
    out += '}';
  }
  out += ' ';
  out += std::to_string(value);
  out += '\n';
}

void append_label_value(std::string& out, std::string_view value) {
  out += '"';
  for (const char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out += '"';
}

std::size_t server_metrics::this_shard() noexcept {
  static std::atomic<std::size_t> next{0};
  thread_local const std::size_t mine = next.fetch_add(1, metrics_impl::relaxed) % shard_count;
  return mine;
}

void server_metrics::record(operation op, unsigned status, std::string_view error,
                            std::chrono::microseconds duration) noexcept {
  using metrics_impl::relaxed;
  const auto index = static_cast<std::size_t>(op);
  if (index >= operation_count) return;
  per_operation& o = shards_[this_shard()].operations[index];
  std::size_t slot = statuses.size() - 1;
  for (std::size_t i = 0; i + 1 < statuses.size(); ++i) {
    if (statuses[i] == status) {
      slot = i;
      break;
    }
  }
  o.by_status[slot].fetch_add(1, relaxed);
  if (!error.empty()) o.by_error[metrics_impl::error_slot(error)].fetch_add(1, relaxed);
  std::size_t bucket = 0;
  while (bucket < duration_bucket_us.size() && duration.count() > duration_bucket_us[bucket]) ++bucket;
  o.buckets[bucket].fetch_add(1, relaxed);
  o.sum_us.fetch_add(static_cast<std::uint64_t>(std::max<std::int64_t>(0, duration.count())), relaxed);
}

void server_metrics::add_bytes(byte_direction direction, byte_path path, std::uint64_t n) noexcept {
  if (n == 0) return;
  shards_[this_shard()].bytes[static_cast<std::size_t>(direction) * 3 + static_cast<std::size_t>(path)].fetch_add(
      n, metrics_impl::relaxed);
}

void server_metrics::rdma_declined(rdma_decline_reason reason) noexcept {
  declines_[static_cast<std::size_t>(reason)].fetch_add(1, metrics_impl::relaxed);
}

std::string server_metrics::render(std::size_t open_connections, std::span<const metrics_source> sources) const {
  using metrics_impl::relaxed;
  std::string out;
  out.reserve(8192);
  const auto op_name = [](std::size_t i) { return operation_name(static_cast<operation>(i)); };
  // A counter summed over the shards.
  const auto sum = [this](const auto& pick) {
    std::uint64_t total = 0;
    for (const shard& one : shards_) total += pick(one).load(relaxed);
    return total;
  };

  metrics_impl::append_header(out, "sluice_requests_total", "counter",
                              "S3 requests answered, by operation and HTTP status (0: the client went away).");
  for (std::size_t i = 0; i < operation_count; ++i) {
    for (std::size_t s = 0; s < statuses.size(); ++s) {
      const std::uint64_t n = sum([&](const shard& one) -> const counter& { return one.operations[i].by_status[s]; });
      if (n == 0) continue;
      out += "sluice_requests_total{operation=";
      append_label_value(out, op_name(i));
      out += ",code=\"";
      out += s + 1 == statuses.size() ? std::string("other") : std::to_string(statuses[s]);
      out += "\"} ";
      out += std::to_string(n);
      out += '\n';
    }
  }
  metrics_impl::append_header(out, "sluice_request_errors_total", "counter",
                              "S3 requests answered with an error, by operation and S3 error code.");
  for (std::size_t i = 0; i < operation_count; ++i) {
    for (std::size_t e = 0; e < error_count; ++e) {
      const std::uint64_t n = sum([&](const shard& one) -> const counter& { return one.operations[i].by_error[e]; });
      if (n == 0) continue;
      out += "sluice_request_errors_total{operation=";
      append_label_value(out, op_name(i));
      out += ",code=";
      append_label_value(out, e == 0 ? std::string_view("Other") : code_string(static_cast<errc>(e)));
      out += "} ";
      out += std::to_string(n);
      out += '\n';
    }
  }
  metrics_impl::append_header(out, "sluice_bytes_total", "counter",
                              "Payload bytes moved, by direction (in: PUT, out: GET) and path.");
  static constexpr std::array<std::string_view, 2> directions = {"in", "out"};
  static constexpr std::array<std::string_view, 3> paths = {"http", "rdma", "grant"};
  for (std::size_t d = 0; d < directions.size(); ++d) {
    for (std::size_t p = 0; p < paths.size(); ++p) {
      out += "sluice_bytes_total{direction=\"";
      out += directions[d];
      out += "\",path=\"";
      out += paths[p];
      out += "\"} ";
      out += std::to_string(sum([&](const shard& one) -> const counter& { return one.bytes[d * 3 + p]; }));
      out += '\n';
    }
  }
  metrics_impl::append_header(out, "sluice_request_duration_seconds", "histogram",
                              "Time from a request's header to its answer's last byte, by operation.");
  for (std::size_t i = 0; i < operation_count; ++i) {
    std::array<std::uint64_t, duration_buckets.size() + 1> counts{};
    std::uint64_t total = 0;
    for (std::size_t b = 0; b < counts.size(); ++b) {
      total += counts[b] = sum([&](const shard& one) -> const counter& { return one.operations[i].buckets[b]; });
    }
    if (total == 0) continue;
    std::string label = "operation=";
    append_label_value(label, op_name(i));
    std::uint64_t cumulative = 0;
    for (std::size_t b = 0; b < counts.size(); ++b) {
      cumulative += counts[b];
      out += "sluice_request_duration_seconds_bucket{";
      out += label;
      out += ",le=\"";
      if (b < duration_buckets.size()) {
        metrics_impl::append_double(out, duration_buckets[b]);
      } else {
        out += "+Inf";
      }
      out += "\"} ";
      out += std::to_string(cumulative);
      out += '\n';
    }
    out += "sluice_request_duration_seconds_sum{" + label + "} ";
    metrics_impl::append_double(
        out,
        static_cast<double>(sum([&](const shard& one) -> const counter& { return one.operations[i].sum_us; })) / 1e6);
    out += "\nsluice_request_duration_seconds_count{" + label + "} " + std::to_string(total) + '\n';
  }
  metrics_impl::append_header(
      out, "sluice_rdma_declines_total", "counter",
      "x-amz-rdma-token requests answered over HTTP instead (x-amz-rdma-reply: 501), by reason.");
  static constexpr std::array<std::string_view, 3> reasons = {"no_plane", "provider", "plane"};
  for (std::size_t r = 0; r < reasons.size(); ++r) {
    out += "sluice_rdma_declines_total{reason=\"";
    out += reasons[r];
    out += "\"} ";
    out += std::to_string(declines_[r].load(relaxed));
    out += '\n';
  }
  metrics_impl::append_header(out, "sluice_open_connections", "gauge", "Client connections open now (HTTP and HTTPS).");
  out += "sluice_open_connections " + std::to_string(open_connections) + '\n';
  for (const metrics_source& source : sources) {
    if (!source) continue;
    const std::size_t before = out.size();
    metrics_writer writer(out);
    try {
      source(writer);
    } catch (const std::exception& e) {
      out.resize(before);
      out += "# a metrics source failed: ";
      for (const char c : std::string_view(e.what())) out += c == '\n' ? ' ' : c;
      out += '\n';
    }
  }
  return out;
}

}  // namespace sluice::s3
