// SPDX-License-Identifier: Apache-2.0
// Fuzz target: HTTP request parsing (Beast's parser, as the server configures it) followed by
// S3 routing and the SigV4 header parse, over arbitrary bytes. Must never crash, hang or leak.
#include <sluice/s3/router.hpp>
#include <sluice/s3/sigv4.hpp>

#include <boost/beast/http.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace http = boost::beast::http;
  http::request_parser<http::empty_body> parser;
  parser.header_limit(16 * 1024);
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  boost::system::error_code ec;
  parser.put(boost::asio::buffer(data, size), ec);
  if (ec || !parser.is_header_done()) return 0;
  const auto& msg = parser.get();
  const std::string method(msg.method_string());
  const std::string target(msg.target());
  const std::string host(msg[http::field::host]);
  const std::string suffixes[] = {"localhost", "s3.example.com"};
  sluice::error_code route_error;
  const auto route =
      sluice::s3::parse_route(method, target, host, suffixes, msg.find("x-amz-copy-source") != msg.end(), route_error);
  if (!route_error && route.key.size() > 1024) std::abort();  // the router must enforce the key limit
  sluice::s3::request_view view{method, target, {}};
  for (const auto& field : msg) {
    view.headers.emplace_back(std::string_view(field.name_string().data(), field.name_string().size()),
                              std::string_view(field.value().data(), field.value().size()));
  }
  sluice::error_code auth_error;
  (void)sluice::s3::parse_authorization(view, auth_error);
  return 0;
}
