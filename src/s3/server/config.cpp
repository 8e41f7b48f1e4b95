// The S3 server's configuration: server_config::validate and parse_server_config.
#include <sluice/s3/server.hpp>

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

server_config parse_server_config(std::string_view json, error_code& ec, config_error& error) {
  server_config config;
  auto fail = [&](std::string field, std::string reason) {
    error = {std::move(field), std::move(reason)};
    ec = sluice::errc::invalid_config;
    return server_config{};
  };
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto err = parser.parse(simdjson::padded_string(json)).get(root); err != simdjson::SUCCESS) {
    return fail("", std::string("malformed JSON: ") + simdjson::error_message(err));
  }
  simdjson::dom::object top;
  if (root.get(top) != simdjson::SUCCESS) return fail("", "the configuration must be a JSON object");
  if (simdjson::dom::object inner; top["server"].get(inner) == simdjson::SUCCESS) top = inner;
  for (auto member : top) {
    const std::string key(member.key);
    const simdjson::dom::element value = member.value;
    std::string_view text;
    std::uint64_t number = 0;
    bool flag = false;
    if (key == "listen") {
      if (value.get(text) != simdjson::SUCCESS || text.rfind(':') == std::string_view::npos) {
        return fail(key, "expected \"host:port\"");
      }
      const auto colon = text.rfind(':');
      config.listen_address = std::string(text.substr(0, colon));
      std::uint16_t port = 0;
      if (std::from_chars(text.data() + colon + 1, text.data() + text.size(), port).ec != std::errc{}) {
        return fail(key, "invalid port");
      }
      config.port = port;
    } else if (key == "region") {
      if (value.get(text) != simdjson::SUCCESS) return fail(key, "expected a string");
      config.region = std::string(text);
    } else if (key == "anonymous") {
      if (value.get(flag) != simdjson::SUCCESS) return fail(key, "expected true or false");
      config.allow_anonymous = flag;
    } else if (key == "users") {
      simdjson::dom::array users;
      if (value.get(users) != simdjson::SUCCESS) return fail(key, "expected an array of users");
      std::size_t index = 0;
      for (auto u : users) {
        const std::string where = "users[" + std::to_string(index++) + "]";
        std::string_view ak;
        std::string_view sk;
        if (u["access_key_id"].get(ak) != simdjson::SUCCESS || u["secret_access_key"].get(sk) != simdjson::SUCCESS) {
          return fail(where, "needs access_key_id and secret_access_key strings");
        }
        config.users.push_back({std::string(ak), std::string(sk)});
      }
    } else if (key == "virtual_host_suffixes") {
      simdjson::dom::array suffixes;
      if (value.get(suffixes) != simdjson::SUCCESS) return fail(key, "expected an array of strings");
      for (auto one : suffixes) {
        if (one.get(text) != simdjson::SUCCESS) return fail(key, "expected an array of strings");
        config.virtual_host_suffixes.emplace_back(text);
      }
    } else if (key == "access_log") {
      if (value.get(text) != simdjson::SUCCESS || text.empty())
        return fail(key, "expected \"off\", \"stderr\" or a path");
      config.access_log.target = text == "off"      ? access_log_target::off
                                 : text == "stderr" ? access_log_target::standard_error
                                                    : access_log_target::file;
      if (config.access_log.target == access_log_target::file) config.access_log.path = std::string(text);
    } else if (key == "sendfile") {
      if (value.get(text) != simdjson::SUCCESS || (text != "remote" && text != "always" && text != "never")) {
        return fail(key, "expected \"remote\", \"always\" or \"never\"");
      }
      config.sendfile = text == "remote"   ? http_sendfile::remote
                        : text == "always" ? http_sendfile::always
                                           : http_sendfile::never;
    } else if (key == "access_log_format") {
      if (value.get(text) != simdjson::SUCCESS || (text != "text" && text != "json")) {
        return fail(key, "expected \"text\" or \"json\"");
      }
      config.access_log.format = text == "json" ? access_log_format::json : access_log_format::text;
    } else if (key == "admin_listen") {
      if (value.get(text) != simdjson::SUCCESS) return fail(key, "expected \"host:port\" or \"off\"");
      if (text == "off") {
        config.admin_listen.reset();
        continue;
      }
      const auto colon = text.rfind(':');
      std::uint16_t port = 0;
      if (colon == std::string_view::npos ||
          std::from_chars(text.data() + colon + 1, text.data() + text.size(), port).ec != std::errc{}) {
        return fail(key, "expected \"host:port\" or \"off\"");
      }
      config.admin_listen = admin_listener{std::string(text.substr(0, colon)), port};
    } else if (key == "max_object_bytes") {
      if (value.get(number) == simdjson::SUCCESS) {
        config.max_object_bytes = number;
      } else if (value.get(text) == simdjson::SUCCESS && parse_size(text)) {
        config.max_object_bytes = *parse_size(text);
      } else {
        return fail(key, "expected a size");
      }
    } else if (key == "max_connections" || key == "max_connections_per_address" || key == "read_timeout_s" ||
               key == "idle_timeout_s" || key == "io_threads") {
      if (value.get(number) != simdjson::SUCCESS) return fail(key, "expected a non-negative integer");
      if (key == "max_connections") config.max_connections = number;
      if (key == "max_connections_per_address") config.max_connections_per_address = number;
      if (key == "read_timeout_s") config.read_timeout = std::chrono::seconds(number);
      if (key == "idle_timeout_s") config.idle_timeout = std::chrono::seconds(number);
      if (key == "io_threads") config.io_threads = number;
    } else if (key == "gateway") {
      continue;  // gateway_store's settings (parse_gateway_config)
    } else {
      return fail(key, "unknown field");
    }
  }
  // Whole-configuration rules (at least one user, ...) are checked when the server is built,
  // after the caller merged in what else it knows (the CLI's --access-key, say).
  ec = {};
  return config;
}

}  // namespace sluice::s3
