// The `sluice` command-line tool.
//   sluice serve --root DIR [--listen 127.0.0.1:9000] [--region R]
//   [--anonymous]
//                [--access-key AK --secret-key SK]
// Credentials: flags, else AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (the CLI
// reads the environment; the library never does).
#include <sluice/s3/fs_store.hpp>
#include <sluice/s3/server.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <pthread.h>

namespace {

struct arguments {
  std::vector<std::string_view> positional;
  std::vector<std::pair<std::string_view, std::string_view>> options;
  [[nodiscard]] std::optional<std::string_view> get(std::string_view name) const {
    for (const auto& [k, v] : options) {
      if (k == name) return v;
    }
    return std::nullopt;
  }
  [[nodiscard]] bool flag(std::string_view name) const { return get(name).has_value(); }
};

// --name value, --name=value, or a bare --flag (value "") when the next word is
// an option or absent.
arguments parse(int argc, char** argv, int first) {
  arguments a;
  for (int i = first; i < argc; ++i) {
    std::string_view word = argv[i];
    if (word.starts_with("--")) {
      word.remove_prefix(2);
      if (auto eq = word.find('='); eq != std::string_view::npos) {
        a.options.emplace_back(word.substr(0, eq), word.substr(eq + 1));
      } else if (i + 1 < argc && !std::string_view(argv[i + 1]).starts_with("--")) {
        a.options.emplace_back(word, argv[++i]);
      } else {
        a.options.emplace_back(word, "");
      }
    } else {
      a.positional.push_back(word);
    }
  }
  return a;
}

std::string env_or(const char* name, std::string_view fallback) {
  // The CLI reads the environment once, before any thread starts (the library
  // never does).
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
  return v != nullptr ? std::string(v) : std::string(fallback);
}

int usage() {
  std::fprintf(stderr,
               "usage: sluice serve --root DIR [--config FILE] [--listen "
               "HOST:PORT] [--region R] [--anonymous]\n"
               "                    [--access-key AK --secret-key SK]\n");
  return 2;
}

int serve(const arguments& args) {
  const auto root = args.get("root");
  if (!root || root->empty()) return usage();
  sluice::s3::server_config config;
  if (auto file = args.get("config")) {
    std::ifstream in{std::string(*file)};
    std::stringstream text;
    text << in.rdbuf();
    sluice::error_code ec;
    sluice::config_error error;
    if (!in) {
      std::fprintf(stderr, "sluice serve: cannot read %.*s\n", static_cast<int>(file->size()), file->data());
      return 1;
    }
    config = sluice::s3::parse_server_config(text.str(), ec, error);
    if (ec) {
      std::fprintf(stderr, "sluice serve: %.*s: %s\n", static_cast<int>(file->size()), file->data(),
                   error.message().c_str());
      return 1;
    }
  }
  const std::string listen(args.get("listen").value_or(config.listen_address + ":" + std::to_string(config.port)));
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return usage();
  config.listen_address = listen.substr(0, colon);
  config.port = static_cast<std::uint16_t>(std::stoul(listen.substr(colon + 1)));
  if (auto region = args.get("region")) config.region = std::string(*region);
  config.allow_anonymous = args.flag("anonymous");
  const std::string access = std::string(args.get("access-key").value_or(env_or("AWS_ACCESS_KEY_ID", "")));
  const std::string secret = std::string(args.get("secret-key").value_or(env_or("AWS_SECRET_ACCESS_KEY", "")));
  if (!access.empty()) config.users.push_back({access, secret});
  if (config.virtual_host_suffixes.empty()) config.virtual_host_suffixes = {"localhost"};

  // Block the stop signals in every thread; this one waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  sluice::error_code ec;
  auto store = sluice::s3::fs_store::open({.root = std::string(*root)}, ec);
  if (ec) {
    std::fprintf(stderr, "sluice serve: cannot open store at %.*s: %s\n", static_cast<int>(root->size()), root->data(),
                 ec.message().c_str());
    return 1;
  }
  try {
    sluice::s3::server<sluice::s3::fs_store> server(*store, config);
    server.listen(ec);
    if (ec) {
      std::fprintf(stderr, "sluice serve: cannot listen on %s: %s\n", listen.c_str(), ec.message().c_str());
      return 1;
    }
    const auto endpoint = server.local_endpoint();
    std::printf("sluice serve: listening on %s:%u, store %.*s\n", endpoint.address().to_string().c_str(),
                static_cast<unsigned>(endpoint.port()), static_cast<int>(root->size()), root->data());
    std::fflush(stdout);
    int received = 0;
    sigwait(&signals, &received);
    std::printf("sluice serve: stopping (signal %d)\n", received);
    server.stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice serve: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string_view command = argv[1];
  const arguments args = parse(argc, argv, 2);
  if (command == "serve") return serve(args);
  return usage();
}
