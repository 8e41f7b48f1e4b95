// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/server.hpp>

#include <doctest/doctest.h>

#include <string>

namespace {

sluice::s3::server_config parse(const std::string& json, sluice::error_code& ec, sluice::config_error& error) {
  return sluice::s3::parse_server_config(json, ec, error);
}

}  // namespace

TEST_CASE("server config: the access log and the admin listener are off unless set") {
  sluice::error_code ec;
  sluice::config_error error;
  const auto config = parse(R"({"users":[{"access_key_id":"a","secret_access_key":"b"}]})", ec, error);
  REQUIRE(!ec);
  CHECK(config.access_log.target == sluice::s3::access_log_target::off);
  CHECK(!config.admin_listen);
}

TEST_CASE("server config: access_log, access_log_format and admin_listen") {
  sluice::error_code ec;
  sluice::config_error error;
  auto config = parse(
      R"({"access_log":"/var/log/sluice.log","access_log_format":"json","admin_listen":"0.0.0.0:9100"})", ec, error);
  REQUIRE(!ec);
  CHECK(config.access_log.target == sluice::s3::access_log_target::file);
  CHECK(config.access_log.path == "/var/log/sluice.log");
  CHECK(config.access_log.format == sluice::s3::access_log_format::json);
  REQUIRE(config.admin_listen);
  CHECK(config.admin_listen->listen_address == "0.0.0.0");
  CHECK(config.admin_listen->port == 9100);
  config = parse(R"({"access_log":"stderr","admin_listen":"off"})", ec, error);
  REQUIRE(!ec);
  CHECK(config.access_log.target == sluice::s3::access_log_target::standard_error);
  CHECK(!config.admin_listen);
}

TEST_CASE("server config: wrong access log and admin values name their field") {
  for (const char* json : {R"({"access_log":""})", R"({"access_log":3})", R"({"access_log_format":"xml"})",
                           R"({"admin_listen":"nohost"})", R"({"admin_listen":"h:99999"})", R"({"admin_listen":1})"}) {
    sluice::error_code ec;
    sluice::config_error error;
    (void)parse(json, ec, error);
    CHECK_MESSAGE(ec == sluice::errc::invalid_config, json);
    CHECK(!error.field.empty());
  }
}

TEST_CASE("server config: the gateway object is left to parse_gateway_config, other unknown fields fail") {
  sluice::error_code ec;
  sluice::config_error error;
  const auto config = parse(R"({"io_threads": 3, "gateway": {"upstream": "http://u:1"}})", ec, error);
  REQUIRE(!ec);
  CHECK(config.io_threads == 3);
  (void)parse(R"({"io_threads": 3, "gatway": {}})", ec, error);
  CHECK(ec == sluice::errc::invalid_config);
  CHECK(error.field == "gatway");
}

TEST_CASE("server config: sendfile is remote unless set, and names its field when wrong") {
  sluice::error_code ec;
  sluice::config_error error;
  auto config = parse("{}", ec, error);
  REQUIRE(!ec);
  CHECK(config.sendfile == sluice::s3::http_sendfile::remote);
  for (const auto& [json, want] : {std::pair{R"({"sendfile":"always"})", sluice::s3::http_sendfile::always},
                                   std::pair{R"({"sendfile":"never"})", sluice::s3::http_sendfile::never},
                                   std::pair{R"({"sendfile":"remote"})", sluice::s3::http_sendfile::remote}}) {
    config = parse(json, ec, error);
    REQUIRE_MESSAGE(!ec, json);
    CHECK(config.sendfile == want);
  }
  for (const char* json : {R"({"sendfile":true})", R"({"sendfile":"Always"})", R"({"sendfile":""})"}) {
    (void)parse(json, ec, error);
    CHECK_MESSAGE(ec == sluice::errc::invalid_config, json);
    CHECK(error.field == "sendfile");
  }
}

TEST_CASE("server config: shutdown_grace_s and upload_expiry_s, 30 s and 7 days unless set") {
  sluice::error_code ec;
  sluice::config_error error;
  auto config = parse(R"({})", ec, error);
  REQUIRE(!ec);
  CHECK(config.shutdown_grace == std::chrono::seconds(30));
  CHECK(config.upload_expiry == std::chrono::hours(24 * 7));
  config = parse(R"({"shutdown_grace_s":0,"upload_expiry_s":0})", ec, error);
  REQUIRE(!ec);
  CHECK(config.shutdown_grace == std::chrono::seconds(0));
  CHECK(config.upload_expiry == std::chrono::seconds(0));  // off
  const auto problem = config.validate();
  CHECK((!problem || problem->field != "shutdown_grace"));
  (void)parse(R"({"upload_expiry_s":"soon"})", ec, error);
  CHECK(ec);
  CHECK(error.field == "upload_expiry_s");
}
