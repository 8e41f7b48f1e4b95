// SPDX-License-Identifier: Apache-2.0
// The S3 server's configuration: server_config::validate and parse_server_config.
#include <sluice/s3/server.hpp>

#include "common/json_fields.hpp"

#include <simdjson.h>

#include <charconv>

namespace sluice::s3 {

std::optional<config_error> server_config::validate() const {
  if (users.empty() && !allow_anonymous) return config_error{"users", "at least one user, or allow_anonymous"};
  for (const auto& u : users) {
    if (u.access_key_id.empty() || u.secret_access_key.empty()) {
      return config_error{"users", "every user needs an access key id and a secret"};
    }
  }
  if (max_header_bytes < 1024) return config_error{"max_header_bytes", "must be at least 1 KiB"};
  if (max_connections == 0) return config_error{"max_connections", "must be at least 1"};
  if (max_connections_per_address == 0) return config_error{"max_connections_per_address", "must be at least 1"};
  if (io_threads == 0) return config_error{"io_threads", "must be at least 1"};
  if (rdma_threads == 0) return config_error{"rdma_threads", "must be at least 1"};
  if (read_timeout.count() <= 0 || idle_timeout.count() <= 0)
    return config_error{"read_timeout", "timeouts must be positive"};
  if (shutdown_grace.count() < 0) return config_error{"shutdown_grace", "must not be negative"};
  if (upload_expiry.count() < 0) return config_error{"upload_expiry", "must not be negative (0: off)"};
  if (max_object_bytes == 0) return config_error{"max_object_bytes", "must be greater than 0"};
  if (!plain_http && !tls) return config_error{"plain_http", "a server without plain HTTP needs a TLS listener"};
  if (access_log.target == access_log_target::file && access_log.path.empty()) {
    return config_error{"access_log", "a file access log needs a path"};
  }
  if (tls && (tls->certificate_chain.empty() || tls->private_key.empty())) {
    return config_error{"tls", "needs a certificate chain and a private key (PEM files)"};
  }
  return std::nullopt;
}

namespace {

/// "host:port" → its parts; nullopt when there is no colon or the port is not a number.
std::optional<std::pair<std::string, std::uint16_t>> host_port(std::string_view text) {
  const auto colon = text.rfind(':');
  std::uint16_t port = 0;
  if (colon == std::string_view::npos ||
      std::from_chars(text.data() + colon + 1, text.data() + text.size(), port).ec != std::errc{}) {
    return std::nullopt;
  }
  return std::pair{std::string(text.substr(0, colon)), port};
}

sluice::detail::json::field_reader users_field(std::vector<user>& users) {
  return [&users](sluice::detail::json::element value) -> std::optional<std::string> {
    simdjson::dom::array all;
    if (value.get(all) != simdjson::SUCCESS) return "expected an array of users";
    std::size_t index = 0;
    for (auto u : all) {
      std::string_view ak;
      std::string_view sk;
      if (u["access_key_id"].get(ak) != simdjson::SUCCESS || u["secret_access_key"].get(sk) != simdjson::SUCCESS) {
        return "users[" + std::to_string(index) + "] needs access_key_id and secret_access_key strings";
      }
      users.push_back({std::string(ak), std::string(sk)});
      ++index;
    }
    return std::nullopt;
  };
}

sluice::detail::json::field_reader strings_field(std::vector<std::string>& into) {
  return [&into](sluice::detail::json::element value) -> std::optional<std::string> {
    simdjson::dom::array all;
    if (value.get(all) != simdjson::SUCCESS) return "expected an array of strings";
    for (auto one : all) {
      std::string_view text;
      if (one.get(text) != simdjson::SUCCESS) return "expected an array of strings";
      into.emplace_back(text);
    }
    return std::nullopt;
  };
}

}  // namespace

server_config parse_server_config(std::string_view json, error_code& ec, config_error& error) {
  server_config config;
  auto fail = [&](config_error e) {
    error = std::move(e);
    ec = sluice::errc::invalid_config;
    return server_config{};
  };
  simdjson::dom::parser parser;
  sluice::detail::json::element root;
  if (auto e = sluice::detail::json::parse(parser, json, root)) return fail(std::move(*e));
  if (!root.is_object()) return fail({"", "the configuration must be a JSON object"});
  if (simdjson::dom::element inner; root["server"].get(inner) == simdjson::SUCCESS && inner.is_object()) root = inner;

  using namespace sluice::detail::json;
  std::uint64_t read_timeout_s = static_cast<std::uint64_t>(config.read_timeout.count());
  std::uint64_t idle_timeout_s = static_cast<std::uint64_t>(config.idle_timeout.count());
  std::uint64_t shutdown_grace_s = static_cast<std::uint64_t>(config.shutdown_grace.count());
  std::uint64_t upload_expiry_s = static_cast<std::uint64_t>(config.upload_expiry.count());
  const field_table fields{
      {"listen", text_field([&](std::string_view text) -> std::optional<std::string> {
         auto parts = host_port(text);
         if (!parts) return "expected \"host:port\"";
         config.listen_address = std::move(parts->first);
         config.port = parts->second;
         return std::nullopt;
       })},
      {"region", text_field([&](std::string_view text) -> std::optional<std::string> {
         config.region = std::string(text);
         return std::nullopt;
       })},
      {"anonymous", flag_field(config.allow_anonymous)},
      {"users", users_field(config.users)},
      {"virtual_host_suffixes", strings_field(config.virtual_host_suffixes)},
      {"access_log", text_field([&](std::string_view text) -> std::optional<std::string> {
         if (text.empty()) return "expected \"off\", \"stderr\" or a path";
         config.access_log.target = text == "off"      ? access_log_target::off
                                    : text == "stderr" ? access_log_target::standard_error
                                                       : access_log_target::file;
         if (config.access_log.target == access_log_target::file) config.access_log.path = std::string(text);
         return std::nullopt;
       })},
      {"sendfile", choice_field(config.sendfile, {{"remote", http_sendfile::remote},
                                                  {"always", http_sendfile::always},
                                                  {"never", http_sendfile::never}})},
      {"access_log_format",
       choice_field(config.access_log.format, {{"text", access_log_format::text}, {"json", access_log_format::json}})},
      {"admin_listen", text_field([&](std::string_view text) -> std::optional<std::string> {
         if (text == "off") {
           config.admin_listen.reset();
           return std::nullopt;
         }
         auto parts = host_port(text);
         if (!parts) return "expected \"host:port\" or \"off\"";
         config.admin_listen = admin_listener{std::move(parts->first), parts->second};
         return std::nullopt;
       })},
      {"max_object_bytes", size_field(config.max_object_bytes)},
      {"max_connections", count_field(config.max_connections)},
      {"max_connections_per_address", count_field(config.max_connections_per_address)},
      {"read_timeout_s", count_field(read_timeout_s)},
      {"idle_timeout_s", count_field(idle_timeout_s)},
      {"shutdown_grace_s", count_field(shutdown_grace_s)},
      {"upload_expiry_s", count_field(upload_expiry_s)},
      {"io_threads", count_field(config.io_threads)},
      {"gateway", {}},  // gateway_store's settings (parse_gateway_config)
  };
  if (auto e = read_fields(root, "", fields)) return fail(std::move(*e));
  config.read_timeout = std::chrono::seconds(read_timeout_s);
  config.idle_timeout = std::chrono::seconds(idle_timeout_s);
  config.shutdown_grace = std::chrono::seconds(shutdown_grace_s);
  config.upload_expiry = std::chrono::seconds(upload_expiry_s);
  // Whole-configuration rules (at least one user, ...) are checked when the server is built,
  // after the caller merged in what else it knows (the CLI's --access-key, say).
  ec = {};
  return config;
}

}  // namespace sluice::s3
