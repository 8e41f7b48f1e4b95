// Uses the installed sluice::core: an in-process path and the JSON config loader (compiled
// into the static library, so this also proves its private dependencies link).
#include <sluice/sluice.hpp>

#include <cstdio>
#include <string>

int main() {
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
