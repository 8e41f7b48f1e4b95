// The `sluice` command-line tool.
//   sluice serve --root DIR [--listen 127.0.0.1:9000] [--region R] [--anonymous] [--no-sigv2]
//                [--access-key AK --secret-key SK] [--fabric auto|shm|tcp|verbs|efa|off]
//   sluice mb|rb s3://B, put FILE s3://B/K, get s3://B/K [FILE], ls [s3://B[/PREFIX]], rm s3://B/K
//                [--endpoint URL] [--ca-bundle PEM] [--access-key AK --secret-key SK] [--region R]
//                [--via auto|rdma|http] [--fabric auto|shm|tcp|...] (get, put)
// Credentials: flags, else AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (the CLI reads the
// environment; the library never does).
#include <sluice/names.hpp>
#include <sluice/s3/client.hpp>
#include <sluice/s3/fs_store.hpp>
#include <sluice/s3/local_plane.hpp>
#include <sluice/s3/server.hpp>

#ifdef SLUICE_CLI_WITH_CUDA
#include <sluice/cuda/grant.hpp>
#endif
#ifdef SLUICE_CLI_WITH_FABRIC
#include <sluice/fabric/s3_plane.hpp>
#endif

#include <boost/asio/ssl/error.hpp>

#include <array>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

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

// --name value, --name=value, or a bare --flag (value "") when the next word is an option or absent.
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
  // The CLI reads the environment once, before any thread starts (the library never does).
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
  return v != nullptr ? std::string(v) : std::string(fallback);
}

// --fabric: a short name or a libfabric provider name, or several separated by commas.
std::string provider_name(std::string_view choice) {
  std::string out;
  for (std::size_t at = 0; at <= choice.size();) {
    const std::size_t comma = std::min(choice.find(',', at), choice.size());
    const std::string_view one = choice.substr(at, comma - at);
    out += out.empty() ? "" : ",";
    out += one == "tcp" ? "tcp;ofi_rxm" : one == "verbs" ? "verbs;ofi_rxm" : std::string(one);
    at = comma + 1;
  }
  return out;
}

bool is_loopback_host(std::string_view host) {
  return host == "localhost" || host.starts_with("127.") || host == "::1" || host == "[::1]";
}

// The host part of http://host[:port][/...] or https://host[:port][/...].
std::string host_of(std::string_view url) {
  if (const auto scheme = url.find("://"); scheme != std::string_view::npos) url.remove_prefix(scheme + 3);
  url = url.substr(0, url.find('/'));
  if (url.starts_with('[')) return std::string(url.substr(0, url.find(']') + 1));
  return std::string(url.substr(0, url.rfind(':')));
}

int usage() {
  std::fprintf(stderr,
               "usage: sluice serve --root DIR [--config FILE] [--listen HOST:PORT] [--region R] [--anonymous]\n"
               "                    [--access-key AK --secret-key SK] [--fabric auto|shm|tcp|verbs|efa|off]\n"
               "                    [--grant-socket PATH|off] [--tls-cert PEM --tls-key PEM [--tls-listen HOST:PORT]]\n"
               "                    [--no-sigv2] [--access-log off|stderr|FILE] [--access-log-format text|json]\n"
               "                    [--admin-listen HOST:PORT]\n"
               "  --fabric auto      opens the hardware providers and tcp; never shm (a list: shm,tcp)\n"
               "  --fabric shm       libfabric's shm: it does not check keys or ranges, so every local\n"
               "                     process that can sign a request can read and write the memory of any\n"
               "                     other shm peer. Only for hosts whose local users all trust each other.\n"
               "  --grant-socket     where same-host clients grant exactly their buffers (memfd, CUDA IPC);\n"
               "                     default /tmp/sluice-PORT.sock\n"
               "  --grant-copy-threads N  CPU threads that copy part of a cold object into a client's GPU\n"
               "                     memory through pinned buffers while the rest registers (default 4;\n"
               "                     0: registration only, less CPU, slower first GETs)\n"
               "  --tls-cert, --tls-key  also serve HTTPS (TLS 1.2/1.3) with this certificate chain and key\n"
               "                     (PEM) on --tls-listen (default: the --listen host, port 9443);\n"
               "                     --listen off serves HTTPS only\n"
               "  --no-sigv2         refuse AWS Signature Version 2 (HMAC-SHA1 headers and AWSAccessKeyId\n"
               "                     URLs, as the AWS CLI v1 presigns) with 403; SigV4 only\n"
               "  --access-log       one line per request to stderr or FILE (appended; reopened on SIGHUP);\n"
               "                     default off. --access-log-format: text (default) or json\n"
               "  --admin-listen     serve GET /metrics (Prometheus), /health and /ready on HOST:PORT\n"
               "                     (plain HTTP, no auth: bind it to a private address); default off\n"
               "  SIGHUP             reloads the users of --config FILE (connections stay open)\n");
  return 2;
}

// A non-negative decimal count, or nullopt.
[[maybe_unused]] std::optional<unsigned long> parse_count(std::string_view text) {
  unsigned long n = 0;
  const auto [end, problem] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (problem != std::errc{} || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return n;
}

// The default same-host grant socket of a server on `port`; clients on this host look there.
std::string default_grant_socket(std::uint16_t port) {
  return port != 0 ? "/tmp/sluice-" + std::to_string(port) + ".sock"
                   : "/tmp/sluice-pid" + std::to_string(::getpid()) + ".sock";
}

// The server configuration of the --config file, or nullopt after saying why not.
std::optional<sluice::s3::server_config> read_server_config(std::string_view file) {
  std::ifstream in{std::string(file)};
  std::stringstream text;
  text << in.rdbuf();
  sluice::error_code ec;
  sluice::config_error error;
  if (!in) {
    std::fprintf(stderr, "sluice serve: cannot read %.*s\n", static_cast<int>(file.size()), file.data());
    return std::nullopt;
  }
  auto config = sluice::s3::parse_server_config(text.str(), ec, error);
  if (ec) {
    std::fprintf(stderr, "sluice serve: %.*s: %s\n", static_cast<int>(file.size()), file.data(),
                 error.message().c_str());
    return std::nullopt;
  }
  return config;
}

// "HOST:PORT" split, or nullopt.
std::optional<std::pair<std::string, std::uint16_t>> host_port(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::uint16_t port = 0;
  const auto [end, problem] = std::from_chars(text.data() + colon + 1, text.data() + text.size(), port);
  if (problem != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return std::pair{std::string(text.substr(0, colon)), port};
}

int serve(const arguments& args) {
  const auto root = args.get("root");
  if (!root || root->empty()) return usage();
  sluice::s3::server_config config;
  if (auto file = args.get("config")) {
    auto read = read_server_config(*file);
    if (!read) return 1;
    config = std::move(*read);
  }
  if (const auto log = args.get("access-log")) {
    if (log->empty()) return usage();
    config.access_log.target = *log == "off"      ? sluice::s3::access_log_target::off
                               : *log == "stderr" ? sluice::s3::access_log_target::standard_error
                                                  : sluice::s3::access_log_target::file;
    config.access_log.path = std::string(*log);
  }
  if (const auto format = args.get("access-log-format")) {
    if (*format != "text" && *format != "json") return usage();
    config.access_log.format =
        *format == "json" ? sluice::s3::access_log_format::json : sluice::s3::access_log_format::text;
  }
  if (const auto admin = args.get("admin-listen")) {
    if (*admin == "off") {
      config.admin_listen.reset();
    } else if (const auto where = host_port(*admin)) {
      config.admin_listen = sluice::s3::admin_listener{where->first, where->second};
    } else {
      return usage();
    }
  }
  const std::string listen(args.get("listen").value_or(config.listen_address + ":" + std::to_string(config.port)));
  if (listen == "off") {
    config.plain_http = false;
  } else {
    const auto colon = listen.rfind(':');
    if (colon == std::string::npos) return usage();
    config.listen_address = listen.substr(0, colon);
    config.port = static_cast<std::uint16_t>(std::stoul(listen.substr(colon + 1)));
  }
  const auto tls_cert = args.get("tls-cert");
  const auto tls_key = args.get("tls-key");
  if (tls_cert.has_value() != tls_key.has_value()) {
    std::fprintf(stderr, "sluice serve: --tls-cert and --tls-key go together\n");
    return 2;
  }
  if (tls_cert) {
    sluice::s3::tls_listener tls;
    tls.certificate_chain = std::string(*tls_cert);
    tls.private_key = std::string(*tls_key);
    tls.listen_address = config.listen_address;
    const std::string tls_listen(args.get("tls-listen").value_or(config.listen_address + ":9443"));
    const auto colon = tls_listen.rfind(':');
    if (colon == std::string::npos) return usage();
    tls.listen_address = tls_listen.substr(0, colon);
    tls.port = static_cast<std::uint16_t>(std::stoul(tls_listen.substr(colon + 1)));
    config.tls = std::move(tls);
  }
  if (auto region = args.get("region")) config.region = std::string(*region);
  config.allow_anonymous = args.flag("anonymous");
  if (args.flag("no-sigv2")) config.sigv2 = false;  // AWS Signature Version 2: 403 AccessDenied
  const std::string access = std::string(args.get("access-key").value_or(env_or("AWS_ACCESS_KEY_ID", "")));
  const std::string secret = std::string(args.get("secret-key").value_or(env_or("AWS_SECRET_ACCESS_KEY", "")));
  if (!access.empty()) config.users.push_back({access, secret});
  if (config.virtual_host_suffixes.empty()) config.virtual_host_suffixes = {"localhost"};

  // Block the stop signals in every thread; this one waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  sluice::error_code ec;
  // The RDMA data plane: every provider that opens here with "auto", one named, or none.
  const std::string fabric_choice(args.get("fabric").value_or("auto"));
  std::string rdma_status = "off";
  if (fabric_choice != "off") {
#ifdef SLUICE_CLI_WITH_FABRIC
    sluice::fabric::server_plane_config plane;
    plane.fabric.provider = provider_name(fabric_choice);
    if (config.listen_address != "0.0.0.0" && config.listen_address != "::") plane.fabric.node = config.listen_address;
    auto rdma = sluice::fabric::server_plane::open(plane, ec);
    if (ec && fabric_choice != "auto") {
      std::fprintf(stderr, "sluice serve: --fabric %s: %s\n", fabric_choice.c_str(), ec.message().c_str());
      return 1;
    }
    if (ec) {
      rdma_status = "off (no libfabric provider opened: " + ec.message() + ")";
    } else {
      config.rdma = rdma;
      rdma_status.clear();
      for (const auto& name : rdma->providers()) rdma_status += (rdma_status.empty() ? "" : ", ") + name;
    }
    ec = {};
#else
    if (fabric_choice != "auto") {
      std::fprintf(stderr, "sluice serve: --fabric %s: this build has no libfabric\n", fabric_choice.c_str());
      return 1;
    }
    rdma_status = "off (built without libfabric)";
#endif
  }
  // Same-host grants: a client on this host grants exactly its buffers (memfd, CUDA IPC) over
  // this socket, and its tokens name those grants. Tried before libfabric for every token.
  const std::string grant_choice(args.get("grant-socket").value_or(default_grant_socket(config.port)));
  std::string grant_status = "off";
  if (grant_choice != "off") {
    sluice::s3::local_server_plane_config grants;
    grants.socket_path = grant_choice;
    for (const auto& u : config.users) grants.users.push_back({u.access_key_id, u.secret_access_key});
    std::string kinds = "memfd";
#ifdef SLUICE_CLI_WITH_CUDA
    // Device memory of clients on this host, by CUDA IPC, when this process sees a GPU.
    sluice::error_code cuda_ec;
    sluice::cuda::grant_opener_config opener;
    if (const auto threads = args.get("grant-copy-threads")) {
      const auto n = parse_count(*threads);
      if (!n || *n > 64) {
        std::fprintf(stderr, "sluice serve: --grant-copy-threads must be 0..64\n");
        return 2;
      }
      opener.copy_threads = static_cast<std::size_t>(*n);
    }
    grants.device = sluice::cuda::make_grant_opener(opener, cuda_ec);
    if (grants.device) {
      kinds += sluice::cuda::stats_of(*grants.device).registration_context
                   ? ", cuda-ipc"
                   : ", cuda-ipc without a registration context: first GETs register and copy in turn";
    } else {
      kinds += ", no cuda-ipc: " + cuda_ec.message();
    }
#endif
    auto local = sluice::s3::local_server_plane::open(grants, ec);
    if (ec) {
      std::fprintf(stderr, "sluice serve: --grant-socket %s: %s\n", grant_choice.c_str(), ec.message().c_str());
      return 1;
    }
    grant_status = grant_choice + " (" + kinds + ")";
    std::vector<std::shared_ptr<sluice::s3::rdma_server_plane>> planes{local};
    if (config.rdma) planes.push_back(config.rdma);
    config.rdma = std::make_shared<sluice::s3::rdma_server_planes>(std::move(planes));
  }
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
    std::printf("sluice serve: rdma: %s\n", rdma_status.c_str());
    std::printf("sluice serve: grants: %s\n", grant_status.c_str());
    if (config.tls) {  // before the "listening on" line, which says the server is ready
      const auto tls = server.tls_endpoint();
      std::printf("sluice serve: https on %s:%u (%s)\n", tls.address().to_string().c_str(),
                  static_cast<unsigned>(tls.port()), config.tls->certificate_chain.c_str());
    }
    if (config.admin_listen) {
      const auto admin = server.admin_endpoint();
      std::printf("sluice serve: admin on %s:%u (/metrics, /health, /ready)\n", admin.address().to_string().c_str(),
                  static_cast<unsigned>(admin.port()));
    }
    if (config.plain_http) {
      const auto endpoint = server.local_endpoint();
      std::printf("sluice serve: listening on %s:%u, store %.*s\n", endpoint.address().to_string().c_str(),
                  static_cast<unsigned>(endpoint.port()), static_cast<int>(root->size()), root->data());
    } else {
      const auto endpoint = server.tls_endpoint();
      std::printf("sluice serve: listening on %s:%u (https only), store %.*s\n", endpoint.address().to_string().c_str(),
                  static_cast<unsigned>(endpoint.port()), static_cast<int>(root->size()), root->data());
    }
    std::fflush(stdout);
    int received = 0;
    // SIGHUP: the users of --config again (with --access-key's), and the access log reopened.
    while (sigwait(&signals, &received) == 0 && received == SIGHUP) {
      sluice::error_code log_error;
      server.reopen_access_log(log_error);
      if (log_error) std::fprintf(stderr, "sluice serve: SIGHUP: access log: %s\n", log_error.message().c_str());
      const auto file = args.get("config");
      if (!file) {
        std::printf("sluice serve: SIGHUP: no --config file, users unchanged\n");
        std::fflush(stdout);
        continue;
      }
      auto reread = read_server_config(*file);
      if (!reread) {
        std::fprintf(stderr, "sluice serve: SIGHUP: users unchanged\n");
        continue;
      }
      if (!access.empty()) reread->users.push_back({access, secret});
      try {
        const std::size_t count = reread->users.size();
        server.set_users(std::move(reread->users));
        std::printf("sluice serve: SIGHUP: %zu users\n", count);
      } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "sluice serve: SIGHUP: %s; users unchanged\n", e.what());
      }
      std::fflush(stdout);
    }
    std::printf("sluice serve: stopping (signal %d)\n", received);
    std::fflush(stdout);
    // A transfer thread can be stuck inside the fabric provider for good: libfabric 1.17's shm
    // spins on a lock in the shared region of a peer that died holding it. Such a thread can
    // never be joined; after a grace period the process exits and the kernel reclaims it all
    // (every object is already published or absent: PUTs write a temporary file and rename).
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::seconds(10));
      std::fprintf(stderr,
                   "sluice serve: stop did not finish in 10 s (a transfer thread is stuck in the fabric "
                   "provider); exiting\n");
      std::_Exit(0);
    }).detach();
    server.stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice serve: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Client commands: mb, rb, put, get, ls, rm against any S3 endpoint (sluice::s3::client).

namespace {

namespace s3 = sluice::s3;

struct s3_url {
  std::string bucket;
  std::string key;  // may be empty
};

// s3://bucket[/key]
std::optional<s3_url> parse_s3_url(std::string_view text) {
  if (!text.starts_with("s3://")) return std::nullopt;
  text.remove_prefix(5);
  const auto slash = text.find('/');
  s3_url url{std::string(text.substr(0, slash)),
             slash == std::string_view::npos ? "" : std::string(text.substr(slash + 1))};
  if (url.bucket.empty()) return std::nullopt;
  return url;
}

struct client_arguments {
  std::vector<std::string> positional;
  std::map<std::string, std::string, std::less<>> options;
  std::set<std::string, std::less<>> flags;
  std::string error;  // set when the command line is wrong

  [[nodiscard]] std::optional<std::string> get(std::string_view name) const {
    auto it = options.find(name);
    if (it == options.end()) return std::nullopt;
    return it->second;
  }
};

// Options that take a value, and flags; anything else starting with "--" is a usage error.
client_arguments parse_client_arguments(int argc, char** argv, int first) {
  static const std::set<std::string, std::less<>> valued = {"endpoint", "ca-bundle",    "access-key", "secret-key",
                                                            "region",   "content-type", "via",        "fabric"};
  static const std::set<std::string, std::less<>> flags = {"recursive", "no-progress"};
  client_arguments a;
  for (int i = first; i < argc; ++i) {
    std::string_view word = argv[i];
    if (!word.starts_with("--") || word == "--") {
      a.positional.emplace_back(word);
      continue;
    }
    word.remove_prefix(2);
    std::string name(word.substr(0, word.find('=')));
    if (flags.contains(name) && word.find('=') == std::string_view::npos) {
      a.flags.insert(name);
    } else if (!valued.contains(name)) {
      a.error = "unknown option --" + name;
    } else if (const auto eq = word.find('='); eq != std::string_view::npos) {
      a.options[name] = std::string(word.substr(eq + 1));
    } else if (i + 1 < argc) {
      a.options[name] = argv[++i];
    } else {
      a.error = "--" + name + " needs a value";
    }
  }
  return a;
}

int client_usage() {
  std::fprintf(stderr,
               "usage: sluice mb s3://BUCKET\n"
               "       sluice rb s3://BUCKET\n"
               "       sluice put FILE s3://BUCKET[/KEY]     (KEY ending in / or left out: FILE's name is added)\n"
               "       sluice get s3://BUCKET/KEY [FILE]     (written to FILE.partial, then renamed)\n"
               "       sluice ls [s3://BUCKET[/PREFIX]] [--recursive]\n"
               "       sluice rm s3://BUCKET/KEY\n"
               "  options: --endpoint URL (default http://127.0.0.1:9000; https://HOST[:PORT] for TLS),\n"
               "           --ca-bundle PEM (https: the CAs to trust; default: the system's store),\n"
               "           --access-key AK, --secret-key SK\n"
               "           (default: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), --region R (default: AWS_REGION,\n"
               "           AWS_DEFAULT_REGION, us-east-1), --content-type T (put), --no-progress,\n"
               "           --via auto|rdma|http (get, put; default auto), --fabric auto|shm|tcp|verbs|efa\n");
  return usage();
}

// What an error means, for a person: the S3 code with a hint, or the system's message.
std::string describe(const sluice::error_code& ec, std::string_view endpoint) {
  if (ec.category() == s3::s3_category()) {
    std::string text = ec.message();
    switch (static_cast<s3::errc>(ec.value())) {
      case s3::errc::no_such_key: text += " (the object does not exist)"; break;
      case s3::errc::no_such_bucket: text += " (the bucket does not exist)"; break;
      case s3::errc::signature_does_not_match: text += " (check the secret key)"; break;
      case s3::errc::invalid_access_key_id: text += " (the server does not know this access key)"; break;
      case s3::errc::access_denied: text += " (not allowed with these credentials)"; break;
      case s3::errc::bucket_not_empty: text += " (delete its objects first)"; break;
      case s3::errc::bucket_already_owned_by_you: text += " (you already own this bucket)"; break;
      case s3::errc::bucket_already_exists: text += " (the name is taken)"; break;
      default: break;
    }
    return text;
  }
  if (ec == boost::asio::error::connection_refused) {
    return ec.message() + " (is an S3 server listening on " + std::string(endpoint) + "?)";
  }
  if (ec.category() == s3::tls_verify_category()) {
    return ec.message() + " (is the server's CA in --ca-bundle, and does its certificate name the host of " +
           std::string(endpoint) + "?)";
  }
  if (ec.category() == boost::asio::error::get_ssl_category()) {
    return "TLS: " + ec.message() + " (is " + std::string(endpoint) + " an HTTPS server?)";
  }
  return ec.message();
}

// A one-line progress bar on stderr, redrawn at most ten times a second; only on a terminal.
class progress_bar {
 public:
  progress_bar(std::string label, bool enabled) : label_(std::move(label)), enabled_(enabled) {}
  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;
  ~progress_bar() { finish(); }

  void update(std::uint64_t done, std::uint64_t total) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    drawn_ = true;
    const double fraction = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
    constexpr int width = 30;
    const int filled = static_cast<int>(fraction * width);
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %s / %s %s/s\x1b[K", label_.c_str(), filled,
                 "##############################", width - filled, "", static_cast<int>(fraction * 100),
                 human(static_cast<double>(done)).c_str(), human(static_cast<double>(total)).c_str(),
                 human(rate).c_str());
    std::fflush(stderr);
  }

  void finish() {
    if (drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

  static std::string human(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    std::size_t unit = 0;
    while (bytes >= 1024 && unit + 1 < std::size(units)) {
      bytes /= 1024;
      ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
    return text;
  }

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

std::string format_time(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm parts{};
  gmtime_r(&seconds, &parts);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &parts);
  return text;
}

std::string base_name(std::string_view path) {
  while (path.size() > 1 && path.ends_with('/')) path.remove_suffix(1);
  const auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// The local address this host uses to reach `host` (a UDP connect sends nothing), so that the
// fabric endpoint is bound on the interface the server can reach (on a host with several, the
// provider's first choice may be another); empty when unknown.
std::string local_address_towards(std::string host) {
  if (host.starts_with('[') && host.ends_with(']')) host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0) return {};
  std::string out;
  for (const addrinfo* a = found; a != nullptr && out.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, static_cast<sockaddr*>(static_cast<void*>(&local)), &length) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      if (local.ss_family == AF_INET) {
        sockaddr_in in{};
        std::memcpy(&in, &local, sizeof in);
        if (::inet_ntop(AF_INET, &in.sin_addr, text, sizeof text) != nullptr) out = text;
      } else if (local.ss_family == AF_INET6) {
        sockaddr_in6 in6{};
        std::memcpy(&in6, &local, sizeof in6);
        if (::inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text) != nullptr) out = text;
      }
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return out;
}

// "rdma 1073741824 bytes in 128 requests, http 0 bytes"
std::string describe_paths(const s3::transfer_report& r) {
  std::string text = "rdma " + std::to_string(r.rdma_bytes) + " bytes in " + std::to_string(r.rdma_requests) +
                     " requests, http " + std::to_string(r.http_bytes) + " bytes in " +
                     std::to_string(r.http_requests) + " requests";
  if (r.declined > 0) text += ", " + std::to_string(r.declined) + " declined by the server";
  return text;
}

// The download in progress, removed by a SIGINT or SIGTERM so that no partial file stays.
char partial_to_remove[4096];

void remove_partial_and_exit(int signal_number) {
  if (partial_to_remove[0] != '\0') ::unlink(partial_to_remove);
  ::_exit(128 + signal_number);
}

// Writes the object `info` describes into `fd`, window by window: each window (parts_in_flight
// parts) is fetched by ranged GETs into one of two reused buffers while the previous one is
// written with pwrite on another thread, every GET with If-Match of the HEAD's ETag. No page of
// the output is written through a mapping (a fault per 4 KiB page inside recvmsg) and memory stays
// at two windows. Returns the bytes written; an object replaced meanwhile is
// s3::errc::precondition_failed.
std::uint64_t download_to_file(s3::client& client, const s3_url& from, const sluice::object_info& info, int fd,
                               s3::transfer_via via, progress_bar& bar, s3::transfer_report& paths,
                               sluice::error_code& ec) {
  const std::uint64_t size = info.size;
  const std::uint64_t window =
      std::min<std::uint64_t>(size, client.config().part_size * client.config().parts_in_flight);
  std::array<std::unique_ptr<std::byte[]>, 2> buffers;
  std::future<int> writing;  // the pwrite of the previous window: 0 or an errno
  std::uint64_t written = 0;
  const auto wait_for_write = [&] {
    if (!writing.valid()) return;
    if (const int error = writing.get(); error != 0 && !ec)
      ec = sluice::error_code(error, boost::system::system_category());
  };
  for (std::uint64_t at = 0, index = 0; at < size && !ec; at += window, ++index) {
    const std::uint64_t n = std::min(window, size - at);
    auto& buffer = buffers[index % 2];
    if (!buffer) buffer = std::make_unique_for_overwrite<std::byte[]>(static_cast<std::size_t>(window));
    s3::get_options options(sluice::byte_range{at, n});
    options.progress = [&bar, at, size](std::uint64_t done, std::uint64_t) { bar.update(at + done, size); };
    options.via = via;
    options.if_match = info.attributes.etag;
    s3::transfer_report report;
    options.report = &report;
    const std::uint64_t got =
        client.get_object(from.bucket, from.key, sluice::region{buffer.get(), n}, std::move(options), ec);
    paths.rdma_bytes += report.rdma_bytes;
    paths.http_bytes += report.http_bytes;
    paths.rdma_requests += report.rdma_requests;
    paths.http_requests += report.http_requests;
    paths.declined += report.declined;
    if (!ec && got != n) ec = s3::errc::precondition_failed;  // shorter than the HEAD said: replaced
    wait_for_write();  // window index - 1 is on disk: its buffer may be fetched into next
    if (ec) break;
    writing = std::async(std::launch::async, [fd, data = buffer.get(), n, at] {
      for (std::uint64_t done = 0; done < n;) {
        const ssize_t w = ::pwrite(fd, data + done, static_cast<std::size_t>(n - done), static_cast<off_t>(at + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? errno : EIO;
        done += static_cast<std::uint64_t>(w);
      }
      return 0;
    });
    written = at + n;
  }
  wait_for_write();
  return ec ? 0 : written;
}

int get_command(s3::client& client, const s3_url& from, std::string target, bool show_progress, s3::transfer_via via) {
  const std::string endpoint = client.config().endpoint;
  const std::string source = "s3://" + from.bucket + "/" + from.key;
  auto fail = [&](const sluice::error_code& ec) {
    std::fprintf(stderr, "sluice get: %s: %s\n", source.c_str(), describe(ec, endpoint).c_str());
    return 1;
  };
  if (target.empty()) target = base_name(from.key);
  std::error_code fs_ec;
  if (std::filesystem::is_directory(target, fs_ec)) target += "/" + base_name(from.key);
  const std::string partial = target + ".partial";
  if (partial.size() >= sizeof partial_to_remove) {
    std::fprintf(stderr, "sluice get: %s: path too long\n", target.c_str());
    return 1;
  }
  std::signal(SIGINT, remove_partial_and_exit);
  std::signal(SIGTERM, remove_partial_and_exit);

  // An object replaced between the HEAD and the GET is fetched again (a few times at most).
  for (int round = 0;; ++round) {
    sluice::error_code ec;
    const sluice::object_info info = client.head_object(from.bucket, from.key, ec);
    if (ec) return fail(ec);
    std::memcpy(partial_to_remove, partial.c_str(), partial.size() + 1);
    const int fd = ::open(partial.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      std::fprintf(stderr, "sluice get: %s: %s\n", partial.c_str(),
                   std::strerror(errno));  // NOLINT(concurrency-mt-unsafe): only this thread reports errors here
      return 1;
    }
    auto abandon = [&](const sluice::error_code& why) {
      ::close(fd);
      ::unlink(partial.c_str());
      partial_to_remove[0] = '\0';
      return fail(why);
    };
    std::uint64_t bytes = 0;
    s3::transfer_report paths;
    {
      progress_bar bar("get " + source, show_progress);
      bytes = download_to_file(client, from, info, fd, via, bar, paths, ec);
    }
    const bool changed = ec == sluice::errc::region_too_small || ec == s3::errc::precondition_failed;
    if (changed && round < 3) {
      ::close(fd);
      ::unlink(partial.c_str());
      continue;
    }
    if (ec) return abandon(ec);
    if (::close(fd) != 0 || ::rename(partial.c_str(), target.c_str()) != 0) {
      const sluice::error_code error(errno, boost::system::system_category());
      ::unlink(partial.c_str());
      partial_to_remove[0] = '\0';
      return fail(error);
    }
    partial_to_remove[0] = '\0';
    std::printf("download: %s to %s (%llu bytes; %s)\n", source.c_str(), target.c_str(),
                static_cast<unsigned long long>(bytes), describe_paths(paths).c_str());
    return 0;
  }
}

/// A key as `ls` prints it: control characters, DEL, backslash and bytes that are not UTF-8
/// written as \xNN (\\ for a backslash), so that a key can neither end the line early nor send
/// escape sequences to the terminal; printable UTF-8 as it is.
std::string printable_key(std::string_view key) {
  std::string out;
  out.reserve(key.size());
  const auto escape = [&](unsigned char b) {
    static constexpr char hex[] = "0123456789abcdef";
    out += "\\x";
    out += hex[b >> 4U];
    out += hex[b & 15U];
  };
  for (std::size_t i = 0; i < key.size();) {
    const auto b = static_cast<unsigned char>(key[i]);
    if (b == '\\') {
      out += "\\\\";
      ++i;
      continue;
    }
    if (b < 0x20 || b == 0x7F) {
      escape(b);
      ++i;
      continue;
    }
    std::size_t n = b < 0x80                 ? 1
                    : b >= 0xC2 && b <= 0xDF ? 2
                    : b >= 0xE0 && b <= 0xEF ? 3
                    : b >= 0xF0 && b <= 0xF4 ? 4
                                             : 0;
    // One whole UTF-8 sequence made of allowed characters passes; anything else byte by byte.
    if (n > 0 && i + n <= key.size() && sluice::is_xml_safe_utf8(key.substr(i, n))) {
      out.append(key.substr(i, n));
      i += n;
    } else {
      escape(b);
      ++i;
    }
  }
  return out;
}

int ls_command(s3::client& client, const std::optional<s3_url>& where, bool recursive) {
  const std::string endpoint = client.config().endpoint;
  sluice::error_code ec;
  if (!where) {
    const auto buckets = client.list_buckets(ec);
    if (ec) {
      std::fprintf(stderr, "sluice ls: %s\n", describe(ec, endpoint).c_str());
      return 1;
    }
    for (const auto& b : buckets) std::printf("%s %s\n", format_time(b.created).c_str(), b.name.c_str());
    return 0;
  }
  s3::list_options options;
  options.prefix = where->key;
  if (!recursive) options.delimiter = "/";
  for (;;) {
    const s3::list_objects_result page = client.list_objects(where->bucket, options, ec);
    if (ec) {
      std::fprintf(stderr, "sluice ls: s3://%s/%s: %s\n", where->bucket.c_str(), where->key.c_str(),
                   describe(ec, endpoint).c_str());
      return 1;
    }
    for (const auto& prefix : page.common_prefixes) std::printf("%30s %s\n", "PRE", printable_key(prefix).c_str());
    for (const auto& object : page.objects) {
      std::printf("%s %10llu %s\n", format_time(object.last_modified).c_str(),
                  static_cast<unsigned long long>(object.size), printable_key(object.key).c_str());
    }
    if (!page.truncated || page.next_continuation_token.empty()) return 0;
    options.continuation_token = page.next_continuation_token;
  }
}

// mb, rb, put, get, ls, rm; nullopt for any other command.
std::optional<int> client_command(std::string_view command, int argc, char** argv) {
  static const std::set<std::string_view> commands = {"mb", "rb", "put", "get", "ls", "rm"};
  if (!commands.contains(command)) return std::nullopt;
  const client_arguments args = parse_client_arguments(argc, argv, 2);
  if (!args.error.empty()) {
    std::fprintf(stderr, "sluice %.*s: %s\n", static_cast<int>(command.size()), command.data(), args.error.c_str());
    return client_usage();
  }
  const auto& p = args.positional;
  // Check the shape of the command before connecting anywhere.
  std::optional<s3_url> url;
  std::string file;
  const auto url_at = [&](std::size_t i) { return i < p.size() ? parse_s3_url(p[i]) : std::nullopt; };
  if (command == "mb" || command == "rb") {
    url = url_at(0);
    if (p.size() != 1 || !url || !url->key.empty()) return client_usage();
  } else if (command == "put") {
    url = url_at(1);
    if (p.size() != 2 || !url) return client_usage();
    file = p[0];
    if (url->key.empty() || url->key.ends_with('/')) url->key += base_name(file);
  } else if (command == "get") {
    url = url_at(0);
    if (p.empty() || p.size() > 2 || !url || url->key.empty() || url->key.ends_with('/')) return client_usage();
    if (p.size() == 2) file = p[1];
  } else if (command == "ls") {
    url = url_at(0);
    if (p.size() > 1 || (p.size() == 1 && !url)) return client_usage();
  } else {  // rm
    url = url_at(0);
    if (p.size() != 1 || !url || url->key.empty()) return client_usage();
  }

  s3::client_config config;
  config.endpoint = args.get("endpoint").value_or("http://127.0.0.1:9000");
  config.ca_bundle = args.get("ca-bundle").value_or("");
  config.creds.access_key_id = args.get("access-key").value_or(env_or("AWS_ACCESS_KEY_ID", ""));
  config.creds.secret_access_key = args.get("secret-key").value_or(env_or("AWS_SECRET_ACCESS_KEY", ""));
  config.region = args.get("region").value_or(env_or("AWS_REGION", env_or("AWS_DEFAULT_REGION", "us-east-1")));
  if (auto error = config.validate()) {
    std::fprintf(stderr, "sluice %.*s: %s\n", static_cast<int>(command.size()), command.data(),
                 error->message().c_str());
    return 2;
  }
  const bool show_progress = ::isatty(STDERR_FILENO) == 1 && !args.flags.contains("no-progress");
  const std::string via_text = args.get("via").value_or("auto");
  const s3::transfer_via via = via_text == "rdma"   ? s3::transfer_via::rdma
                               : via_text == "http" ? s3::transfer_via::http
                                                    : s3::transfer_via::automatic;
  if (via_text != "rdma" && via_text != "http" && via_text != "auto") return client_usage();
  if (via != s3::transfer_via::http && (command == "get" || command == "put")) {
#ifdef SLUICE_CLI_WITH_FABRIC
    sluice::fabric::client_plane_config plane;
    const std::string fabric_choice = args.get("fabric").value_or("auto");
    plane.fabric.provider = provider_name(fabric_choice);
    const std::string host = host_of(config.endpoint);
    const bool local = is_loopback_host(host);
    plane.fabric.node = local ? std::string("127.0.0.1") : local_address_towards(host);
    sluice::error_code plane_ec;
    config.rdma = sluice::fabric::client_plane::open(plane, local, plane_ec);
    if (plane_ec && via == s3::transfer_via::rdma) {
      std::fprintf(stderr, "sluice %.*s: --fabric %s: %s\n", static_cast<int>(command.size()), command.data(),
                   fabric_choice.c_str(), plane_ec.message().c_str());
      return 1;
    }
#else
    if (via == s3::transfer_via::rdma) {
      std::fprintf(stderr, "sluice: --via rdma: this build has no libfabric\n");
      return 1;
    }
#endif
  }
  std::optional<s3::client> made;
  try {
    made.emplace(config);
  } catch (const std::invalid_argument& e) {  // a --ca-bundle that cannot be loaded
    std::fprintf(stderr, "sluice %.*s: %s\n", static_cast<int>(command.size()), command.data(), e.what());
    return 2;
  }
  s3::client& client = *made;
  sluice::error_code ec;
  const std::string where = url ? "s3://" + url->bucket + (url->key.empty() ? "" : "/" + url->key) : "";
  auto report = [&](const char* done_word) {
    if (ec) {
      std::fprintf(stderr, "sluice %.*s: %s: %s\n", static_cast<int>(command.size()), command.data(), where.c_str(),
                   describe(ec, config.endpoint).c_str());
      return 1;
    }
    std::printf("%s: %s\n", done_word, where.c_str());
    return 0;
  };
  if (command == "mb") {
    client.create_bucket(url->bucket, ec);
    return report("make_bucket");
  }
  if (command == "rb") {
    client.delete_bucket(url->bucket, ec);
    return report("remove_bucket");
  }
  if (command == "rm") {
    client.delete_object(url->bucket, url->key, ec);
    return report("delete");
  }
  if (command == "ls") return ls_command(client, url, args.flags.contains("recursive"));
  if (command == "get") return get_command(client, *url, file, show_progress, via);
  // put
  std::string etag;
  s3::transfer_report paths;
  {
    progress_bar bar("put " + where, show_progress);
    s3::put_options options;
    options.attributes.content_type = args.get("content-type").value_or("");
    options.progress = [&bar](std::uint64_t done, std::uint64_t total) { bar.update(done, total); };
    options.via = via;
    options.report = &paths;
    // For RDMA the server reads the file's pages where they are: map it rather than read it.
    const int fd = config.rdma ? ::open(file.c_str(), O_RDONLY | O_CLOEXEC) : -1;
    struct stat st {};
    void* mapping = MAP_FAILED;
    if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      mapping = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    }
    if (mapping != MAP_FAILED) {
      const sluice::region source{mapping, static_cast<std::size_t>(st.st_size), sluice::memory_kind::host_pageable,
                                  -1};
      etag = client.put_object(url->bucket, url->key, source, std::move(options), ec);
      ::munmap(mapping, static_cast<std::size_t>(st.st_size));
    } else {
      etag = client.put_object(url->bucket, url->key, std::filesystem::path(file), std::move(options), ec);
    }
    if (fd >= 0) ::close(fd);
  }
  if (ec) {
    const bool local = ec.category() == boost::system::system_category();
    std::fprintf(stderr, "sluice put: %s: %s\n", local ? file.c_str() : where.c_str(),
                 describe(ec, config.endpoint).c_str());
    return 1;
  }
  std::printf("upload: %s to %s (etag %s; %s)\n", file.c_str(), where.c_str(), etag.c_str(),
              describe_paths(paths).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string_view command = argv[1];
  const arguments args = parse(argc, argv, 2);
  if (command == "serve") return serve(args);
  if (const auto code = client_command(command, argc, argv)) return *code;
  if (command == "help" || command == "--help" || command == "-h") {
    client_usage();
    return 0;
  }
  return client_usage();
}
