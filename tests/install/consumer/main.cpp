// SPDX-License-Identifier: Apache-2.0
// Uses the installed sluice::core (an in-process path and the JSON config loader, compiled into
// the static library, so this also proves its private dependencies link), sluice::s3 (a ranged
// GET over HTTPS with a private CA against a real `sluice serve`) and sluice::c (the C API's
// version). Usage: consumer [HTTP HTTPS CA WRONG_CA AK SK] (no arguments: the in-process part only).
#include <sluice/sluice.h>
#include <sluice/s3/client.hpp>
#include <sluice/sluice.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace {

int in_process() {
  sluice::memory_store store(
      sluice::parse_config(R"({"memory_store": {"max_bytes": "1 MiB", "max_object_bytes": "64 KiB"}})").memory_store);
  sluice::error_code ec;
  store.create_bucket("consumer", ec);
  sluice::path p{sluice::local_negotiator<sluice::memory_store>{store}, sluice::host_registrar{},
                 sluice::loopback_transport{}};
  std::string in = "installed package works";
  p.put({"consumer", "greeting"}, sluice::host_region(in));
  std::string out(in.size(), '\0');
  const auto result = p.get({"consumer", "greeting"}, sluice::host_region(out));
  if (out != in || result.bytes != in.size()) {
    std::puts("consumer: round trip mismatch");
    return 1;
  }
  std::printf("consumer: %s (%llu bytes via %s/%s)\n", out.c_str(), static_cast<unsigned long long>(result.bytes),
              std::string(result.negotiator).c_str(), std::string(result.transport).c_str());
  return 0;
}

int over_https(char** argv) {
  sluice::s3::client_config config;
  config.endpoint = argv[2];
  config.ca_bundle = argv[3];
  config.creds = {argv[5], argv[6]};
  sluice::s3::client client(config);
  client.create_bucket("cmake-consumer");
  std::string data(100000, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 13 + 1);
  client.put_object("cmake-consumer", "blob", sluice::host_region(std::as_const(data)));
  std::string part(300, '\0');
  const auto bytes =
      client.get_object("cmake-consumer", "blob", sluice::host_region(part), sluice::byte_range{1000, 300});
  if (bytes != 300 || part != data.substr(1000, 300)) {
    std::puts("consumer: the ranged GET over HTTPS read the wrong bytes");
    return 1;
  }
  sluice::s3::client_config wrong = config;
  wrong.ca_bundle = argv[4];
  sluice::s3::client refused(wrong);
  sluice::error_code ec;
  refused.get_object("cmake-consumer", "blob", sluice::host_region(part), sluice::byte_range{0, 300}, ec);
  if (!ec || ec.category() != sluice::s3::tls_verify_category()) {
    std::printf("consumer: the wrong CA was not refused (%s)\n", ec.message().c_str());
    return 1;
  }
  std::printf("consumer: ranged GET over HTTPS ok; wrong CA refused (%s); libsluice_c %s\n", ec.message().c_str(),
              sluice_version());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (const int status = in_process(); status != 0) return status;
  if (argc == 7) return over_https(argv);
  return 0;
}
