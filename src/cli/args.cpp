// SPDX-License-Identifier: Apache-2.0
// The command line of `sluice` (cli.hpp): one CLI::App with a subcommand per command. Every
// usage error exits 2 with a message that names the problem, the command's usage line and
// where its --help is; an unknown option close to a known one gets "did you mean --X?".
#include "cli.hpp"

#include <sluice/config.hpp>
#include <sluice/s3/sigv4.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

namespace sluice::cli {

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

std::optional<std::pair<std::string, std::uint16_t>> host_port(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::uint16_t port = 0;
  const auto [end, problem] = std::from_chars(text.data() + colon + 1, text.data() + text.size(), port);
  if (problem != std::errc{} || end != text.data() + text.size() || colon + 1 == text.size()) return std::nullopt;
  return std::pair{std::string(text.substr(0, colon)), port};
}

std::optional<std::pair<std::string, std::string>> split_s3_url(std::string_view text) {
  if (!text.starts_with("s3://")) return std::nullopt;
  text.remove_prefix(5);
  const auto slash = text.find('/');
  std::pair<std::string, std::string> url{std::string(text.substr(0, slash)),
                                          slash == std::string_view::npos ? "" : std::string(text.substr(slash + 1))};
  if (url.first.empty()) return std::nullopt;
  return url;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Values: CLI11 validators without a description of their own (the option's type name says it).

CLI::Validator check(std::function<std::string(const std::string&)> problem) {
  return {[problem = std::move(problem)](std::string& value) { return problem(value); }, ""};
}

CLI::Validator address(bool or_off) {
  return check([or_off](const std::string& value) -> std::string {
    if ((or_off && value == "off") || host_port(value)) return {};
    return "'" + value + "' is not HOST:PORT" + (or_off ? " or off" : "");
  });
}

CLI::Validator one_of(std::vector<std::string> choices) {
  return check([choices = std::move(choices)](const std::string& value) -> std::string {
    if (std::find(choices.begin(), choices.end(), value) != choices.end()) return {};
    std::string text = "'" + value + "' is not one of ";
    for (std::size_t i = 0; i < choices.size(); ++i) text += (i == 0 ? "" : ", ") + choices[i];
    return text;
  });
}

enum class url_shape { bucket, object, file_object, any };  // file_object: a key that names a file, not ending in /

CLI::Validator s3_url(url_shape shape) {
  return check([shape](const std::string& value) -> std::string {
    const auto url = split_s3_url(value);
    if (shape == url_shape::bucket && (!url || !url->second.empty())) return "'" + value + "' is not s3://BUCKET";
    if (shape == url_shape::object && (!url || url->second.empty())) return "'" + value + "' is not s3://BUCKET/KEY";
    if (shape == url_shape::file_object && (!url || url->second.empty() || url->second.ends_with('/'))) {
      return "'" + value + "' is not s3://BUCKET/KEY (a KEY not ending in /)";
    }
    if (!url) return "'" + value + "' is not s3://BUCKET[/KEY]";
    return {};
  });
}

// ---------------------------------------------------------------------------------------------
// Suggestions for an unknown option or command.

// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
// neighbouring letters each count one.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// The candidate `word` most likely meant: the fewest edits, at most two and at most half the
// word's letters, else one of the two a prefix of the other (at least three letters); or empty.
std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_score = std::numeric_limits<std::size_t>::max();
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    std::size_t score = std::numeric_limits<std::size_t>::max();
    if (distance <= 2 && distance * 2 <= word.size()) {
      score = distance;
    } else if (std::min(word.size(), candidate.size()) >= 3 &&
               (candidate.starts_with(word) || word.starts_with(candidate))) {
      score = 3;
    }
    if (score < best_score) {
      best_score = score;
      best = candidate;
    }
  }
  return best;
}

// The long option names of `app`, without their dashes.
std::vector<std::string> long_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) out.push_back(name);
  }
  return out;
}

// What is wrong with `word`, left over on the command line of `where` (root: the whole tool).
std::string problem_with(const std::string& word, const CLI::App& where, const CLI::App& root) {
  if (!word.starts_with("-")) {
    if (&where != &root) return "unexpected argument '" + word + "'";
    std::vector<std::string> commands;
    for (const CLI::App* sub : root.get_subcommands([](const CLI::App*) { return true; })) {
      commands.push_back(sub->get_name());
    }
    const std::string guess = closest(word, commands);
    return "unknown command '" + word + "'" + (guess.empty() ? "" : " (did you mean '" + guess + "'?)");
  }
  if (!word.starts_with("--")) return "unknown option " + word;
  const std::string name = word.substr(2, word.find('=') - 2);
  std::string text = "unknown option --" + name;
  if (const std::string guess = closest(name, long_names(where)); !guess.empty()) {
    return text + " (did you mean --" + guess + "?)";
  }
  // An option of other commands: say which.
  std::string others;
  for (const CLI::App* sub : root.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub == &where) continue;
    const auto names = long_names(*sub);
    if (std::find(names.begin(), names.end(), name) != names.end())
      others += (others.empty() ? "" : ", ") + sub->get_name();
  }
  if (!others.empty()) text += " (an option of sluice " + others + ")";
  return text;
}

// Help and usage lines as sluice prints them.
std::shared_ptr<CLI::Formatter> make_formatter() {
  auto formatter = std::make_shared<CLI::Formatter>();
  formatter->label("Usage", "usage");
  formatter->label("SUBCOMMAND", "COMMAND");
  formatter->column_width(36);
  return formatter;
}

// The failure message of every usage error: what is wrong, the usage line, where --help is.
std::string failure_message(const CLI::App* root, const CLI::Error& error) {
  const auto selected = root->get_subcommands();
  const CLI::App& where = selected.empty() ? *root : *selected.front();
  const std::string command = selected.empty() ? "sluice" : "sluice " + where.get_name();
  std::vector<const CLI::App*> apps{root};
  if (&where != root) apps.push_back(&where);
  std::vector<std::string> problems;
  for (const CLI::App* app : apps) {
    for (const std::string& word : app->remaining(false)) problems.push_back(problem_with(word, where, *root));
  }
  // Left-over words explain an ExtrasError, and "a subcommand is required" when they hold an
  // unknown command; any other error is said too.
  const bool no_command = selected.empty() && dynamic_cast<const CLI::RequiredError*>(&error) != nullptr;
  if (no_command && problems.empty()) {
    problems.emplace_back(
        "a command is needed: cp, sync, ls, rm, mb, rb, cat, stat, put, get, presign, uploads or serve");
  } else if (problems.empty() || (!no_command && dynamic_cast<const CLI::ExtrasError*>(&error) == nullptr)) {
    problems.emplace_back(error.what());
  }
  std::string out;
  for (const std::string& problem : problems) {
    out += command;
    out += ": ";
    out += problem;
    out += '\n';
  }
  out += make_formatter()->make_usage(&where, command);
  out += "Run '" + command + " --help' for more.\n";
  return out;
}

// ---------------------------------------------------------------------------------------------
// The commands.

// An option that sets `target` only when given (nullopt: the default, or the config file's, stands).
template <class T>
CLI::Option* optional_option(CLI::App& app, const std::string& name, std::optional<T>& target,
                             const std::string& help) {
  return app.add_option_function<T>(
      name, [&target](const T& value) { target = value; }, help);
}

// serve: how long requests in flight may finish after SIGTERM, and multipart uploads may idle.
void add_serve_lifetimes(CLI::App& serve, serve_options& o) {
  optional_option(serve, "--shutdown-grace", o.shutdown_grace,
                  "Seconds SIGTERM or SIGINT lets requests in flight finish before cutting them (default 30)")
      ->type_name("SECONDS")
      ->check(CLI::Range(0, 86400));
  optional_option(serve, "--upload-expiry", o.upload_expiry,
                  "Abort multipart uploads idle this many seconds (default 604800: 7 days; 0: never)")
      ->type_name("SECONDS")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{3650} * 86400));
}

void add_serve(CLI::App& app, serve_options& o) {
  const auto is_size = check([](const std::string& value) -> std::string {
    if (parse_size(value)) return {};
    return "'" + value + "' is not a size (0, 256 MiB, 1GiB, 1048576)";
  });
  CLI::App& serve =
      *app.add_subcommand("serve", "Serve a directory over S3, with RDMA and same-host grants")->group("Commands");
  serve.add_option("--root", o.root, "The store's directory")->required()->type_name("DIR");
  optional_option(serve, "--config", o.config_file, "Server settings (JSON; docs/s3.md); SIGHUP reloads its users")
      ->type_name("FILE");
  optional_option(serve, "--listen", o.listen, "S3 over HTTP here (default 127.0.0.1:9000); off: HTTPS only")
      ->type_name("HOST:PORT|off")
      ->check(address(true));
  optional_option(serve, "--region", o.region, "Refuse requests signed for another region")->type_name("R");
  serve.add_flag("--anonymous", o.anonymous, "Unsigned requests act as the first user");
  serve.add_flag("--no-sigv2", o.no_sigv2, "Refuse AWS Signature Version 2 with 403 (SigV4 only)");
  serve.add_option("--access-key", o.access_key, "A user's access key")->type_name("AK")->envname("AWS_ACCESS_KEY_ID");
  serve.add_option("--secret-key", o.secret_key, "Its secret")->type_name("SK")->envname("AWS_SECRET_ACCESS_KEY");
  serve.add_option("--fabric", o.fabric, "RDMA providers (default auto: hardware and tcp, never shm)")
      ->type_name("auto|shm|tcp|verbs|efa|off");
  serve
      .add_option("--fabric-connect-timeout", o.fabric_connect_timeout,
                  "Seconds an RDMA transfer waits for its peer's first completion before it gives up "
                  "(default 5)")
      ->type_name("SECONDS")
      ->check(CLI::Range(0.001, 3600.0));
  serve
      .add_option_function<std::string>(
          "--fabric-registration-cache",
          [&o](const std::string& value) { o.fabric_registration_cache = parse_size(value); },
          "Bytes of GET sources kept registered per provider for the next GET of the same object "
          "(default 1 GiB; 0: register each GET's bytes for it alone)")
      ->type_name("SIZE")
      ->check(is_size);
  serve
      .add_option_function<std::string>(
          "--pinned-budget", [&o](const std::string& value) { o.pinned_budget = parse_size(value); },
          "Host memory pinned at once by every cache that pins (the CUDA grants' registered page "
          "cache, the fabric plane's kept registrations): beyond it the least recently used go, "
          "else nothing more is pinned (default a quarter of RAM)")
      ->type_name("SIZE")
      ->check(is_size);
  serve
      .add_option_function<std::string>(
          "--small-object-cache", [&o](const std::string& value) { o.small_object_cache = parse_size(value); },
          "Memory for the bytes of objects up to 64 KiB, read at their first GET and kept while current "
          "(default 64 MiB; 0: read every GET from the file)")
      ->type_name("SIZE")
      ->check(is_size);
  optional_option(
      serve, "--grant-socket", o.grant_socket,
      "Same-host grants (memfd, CUDA IPC) on this Unix socket (default: $XDG_RUNTIME_DIR/sluice/sluice-PORT.sock, "
      "else /tmp/sluice-UID/sluice-PORT.sock, in a 0700 directory of this user; a PATH given here is mode 0666)")
      ->type_name("PATH|off");
  serve.add_flag("--grant-register-on-write,!--no-grant-register-on-write", o.grant_register_on_write,
                 "CUDA builds: register a new object version of 8 MiB or more (PUT, CompleteMultipartUpload, "
                 "CopyObject) with CUDA in the background when it is written, so that its first GET into GPU "
                 "memory finds it registered (default on)");
  optional_option(serve, "--grant-copy-threads", o.grant_copy_threads,
                  "CUDA builds: CPU threads that copy cold objects into GPU memory while the rest registers "
                  "(default: half the cores, at most 8; 0: registration only)")
      ->type_name("0..64")
      ->check(check([](const std::string& value) -> std::string {
        std::size_t n = 0;
        const auto [end, problem] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (problem == std::errc{} && end == value.data() + value.size() && n <= 64) return {};
        return "'" + value + "' is not a count from 0 to 64";
      }));
  auto* cert = optional_option(serve, "--tls-cert", o.tls_cert, "Also serve HTTPS with this certificate chain")
                   ->type_name("PEM");
  auto* key = optional_option(serve, "--tls-key", o.tls_key, "Its private key (unencrypted)")->type_name("PEM");
  cert->needs(key);
  key->needs(cert);
  optional_option(serve, "--tls-listen", o.tls_listen, "HTTPS here (default: the --listen host, port 9443)")
      ->type_name("HOST:PORT")
      ->check(address(false))
      ->needs(cert);
  optional_option(serve, "--access-log", o.access_log,
                  "One line per request to stderr or FILE (appended; reopened on SIGHUP); default off")
      ->type_name("off|stderr|FILE")
      ->check(check([](const std::string& value) { return value.empty() ? std::string("empty") : std::string(); }));
  optional_option(serve, "--access-log-format", o.access_log_format, "text (default) or json")
      ->type_name("text|json")
      ->check(one_of({"text", "json"}));
  optional_option(serve, "--admin-listen", o.admin_listen,
                  "GET /metrics, /health and /ready here (plain HTTP, no auth); default off")
      ->type_name("HOST:PORT|off")
      ->check(address(true));
  add_serve_lifetimes(serve, o);
  auto* upstream = optional_option(serve, "--upstream", o.upstream,
                                   "Gateway: serve this S3 service, --root caching its objects (docs/gateway.md)")
                       ->type_name("URL")
                       ->group("Gateway");
  // Not tied to --upstream: the upstream may come from --config's "gateway" object, and the keys
  // from the environment.
  serve.add_option("--upstream-access-key", o.upstream_access_key, "The upstream's access key")
      ->type_name("AK")
      ->envname("SLUICE_UPSTREAM_ACCESS_KEY_ID")
      ->group("Gateway");
  serve.add_option("--upstream-secret-key", o.upstream_secret_key, "Its secret")
      ->type_name("SK")
      ->envname("SLUICE_UPSTREAM_SECRET_ACCESS_KEY")
      ->group("Gateway");
  optional_option(serve, "--upstream-region", o.upstream_region, "The region upstream requests are signed for")
      ->type_name("R")
      ->group("Gateway")
      ->needs(upstream);
  optional_option(serve, "--upstream-ca-bundle", o.upstream_ca_bundle, "CAs to trust for an https upstream")
      ->type_name("PEM")
      ->group("Gateway")
      ->needs(upstream);
  serve
      .add_option_function<std::string>(
          "--cache-bytes", [&o](const std::string& value) { o.cache_bytes = parse_size(value); },
          "Bytes of cached objects kept at most (default 16 GiB), least recently used evicted first")
      ->type_name("SIZE")
      ->group("Gateway")
      ->needs(upstream)
      ->check(check([](const std::string& value) -> std::string {
        const auto n = parse_size(value);
        if (n && *n >= mib) return {};
        return "'" + value + "' is not a size of at least 1 MiB (8 MiB, 64GiB, 1048576)";
      }));
  optional_option(serve, "--revalidate-after", o.revalidate_after,
                  "Serve a cached object this many seconds without asking the upstream (default 0: ask every time)")
      ->type_name("SECONDS")
      ->group("Gateway")
      ->needs(upstream);
  serve.add_flag("--stale-if-error", o.stale_if_error, "Serve cached objects while the upstream cannot be reached")
      ->group("Gateway")
      ->needs(upstream);
  optional_option(serve, "--upstream-timeout", o.upstream_timeout,
                  "Seconds one upstream request may take before the upstream counts as unreachable (default 60)")
      ->type_name("SECONDS")
      ->group("Gateway")
      ->needs(upstream)
      ->check(CLI::Range(1, 3600));
  serve.footer(
      "--fabric shm: libfabric's shm checks no keys or ranges, so every local process that can sign a\n"
      "request can read and write the memory of any other shm peer: only for hosts whose local users\n"
      "all trust each other. A list (shm,tcp) opens several.\n"
      "SIGHUP reloads the users of --config FILE (connections stay open) and reopens the access log.\n"
      "SIGTERM or SIGINT stops accepting and lets requests in flight finish for --shutdown-grace;\n"
      "a second one cuts them at once.");
}

void add_connection(CLI::App& command, client_options& o) {
  command
      .add_option("--endpoint", o.endpoint,
                  "The S3 server (https://HOST[:PORT] for TLS; default: AWS_ENDPOINT_URL, the profile's "
                  "endpoint_url, http://127.0.0.1:9000)")
      ->type_name("URL")
      ->group("Connection");
  command
      .add_option("--profile", o.profile,
                  "The profile of ~/.aws/credentials and ~/.aws/config (default: AWS_PROFILE, default)")
      ->type_name("NAME")
      ->group("Connection");
  command.add_flag("--no-sign-request", o.no_sign_request, "Send unsigned (anonymous) requests")->group("Connection");
  command
      .add_option("--connect-timeout", o.connect_timeout,
                  "Seconds to open a connection (TCP and TLS) before giving up (default 10)")
      ->type_name("SECONDS")
      ->check(CLI::Range(0.001, 86400.0))
      ->group("Connection");
  command
      .add_option("--timeout", o.timeout,
                  "Seconds a request may go without moving a byte (no answer, a stalled body) before it fails "
                  "(default 60)")
      ->type_name("SECONDS")
      ->check(CLI::Range(0.001, 86400.0))
      ->group("Connection");
  command.add_option("--ca-bundle", o.ca_bundle, "https: the CAs to trust (default: the system's)")
      ->type_name("PEM")
      ->group("Connection");
  command.add_option("--access-key", o.access_key, "Access key")
      ->type_name("AK")
      ->envname("AWS_ACCESS_KEY_ID")
      ->group("Connection");
  command.add_option("--secret-key", o.secret_key, "Secret key")
      ->type_name("SK")
      ->envname("AWS_SECRET_ACCESS_KEY")
      ->group("Connection");
  command
      .add_option("--region", o.region,
                  "Signing region (default: AWS_REGION, AWS_DEFAULT_REGION, the profile's, us-east-1)")
      ->type_name("R")
      ->group("Connection");
  command.add_flag("--no-progress", o.no_progress, "No progress bar (drawn only on a terminal)");
}

void add_transfer(CLI::App& command, client_options& o) {
  command
      .add_option("--via", o.via,
                  "How the bytes move: auto = RDMA on a hardware provider (verbs, efa; or the --fabric named) "
                  "when the server takes it, else HTTP, and only HTTP to an https:// endpoint; or only one")
      ->type_name("auto|rdma|http")
      ->capture_default_str()
      ->check(one_of({"auto", "rdma", "http"}));
  command.add_option("--fabric", o.fabric, "The RDMA provider (auto: with --via auto, hardware ones only)")
      ->type_name("auto|shm|tcp|verbs|efa")
      ->capture_default_str();
  command.add_flag("--json", o.json,
                   "One JSON object on stdout: bucket, key, file, bytes, etag, seconds, rdma/http bytes and requests");
}

struct client_spec {
  client_command command;
  const char* name;
  const char* description;
};

constexpr std::array<client_spec, 12> client_specs = {{
    {client_command::cp, "cp",
     "Copy files and objects: local <-> S3, S3 -> S3; -r for a directory or prefix; - for stdin/stdout"},
    {client_command::sync, "sync",
     "Copy what is missing or changed (size, mtime or ETag); --delete what the source lacks"},
    {client_command::mb, "mb", "Make buckets"},
    {client_command::rb, "rb", "Remove empty buckets (--force: delete their objects first)"},
    {client_command::put, "put", "Upload a file (KEY ending in / or left out: the file's name is added)"},
    {client_command::get, "get", "Download an object to FILE.partial, then rename it to FILE"},
    {client_command::ls, "ls", "List the buckets, or a bucket's keys under a prefix"},
    {client_command::rm, "rm", "Delete objects (-r: every object under a prefix)"},
    {client_command::cat, "cat", "Write objects to stdout"},
    {client_command::stat, "stat", "Show an object's size, ETag, time, type and metadata (HEAD)"},
    {client_command::presign, "presign", "Print a presigned GET URL of an object (SigV4 query, nothing sent)"},
    {client_command::uploads, "uploads",
     "List the multipart uploads in progress under a prefix (ls), or abort them and remove their parts (abort)"},
}};

// cp, sync, rm -r: how many at once, and which.
void add_many(CLI::App& command, client_options& o, bool filters) {
  command.add_option("--jobs,-j", o.jobs, "Objects in flight at once, on one connection pool (default 16)")
      ->type_name("N")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1024}));
  command.add_flag("--dry-run", o.dry_run, "Print what would be done, do nothing");
  if (!filters) return;
  command
      .add_option("--include", o.include, "Copy paths that match this glob even when an --exclude matches (repeatable)")
      ->type_name("GLOB")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  command
      .add_option("--exclude", o.exclude, "Leave out paths (relative to the source) that match this glob (repeatable)")
      ->type_name("GLOB")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

CLI::Validator location() {
  return check([](const std::string& value) -> std::string {
    if (value.starts_with("s3://") && !split_s3_url(value)) return "'" + value + "' is not s3://BUCKET[/KEY]";
    return value.empty() ? "an empty path" : "";
  });
}

CLI::App& add_client(CLI::App& app, const client_spec& spec, client_options& o) {
  CLI::App& command = *app.add_subcommand(spec.name, spec.description)->group("Commands");
  switch (spec.command) {
    case client_command::mb:
    case client_command::rb:
      command.add_option("URL", o.paths, "s3://BUCKET ...")
          ->type_name("")
          ->required()
          ->check(s3_url(url_shape::bucket));
      if (spec.command == client_command::rb) {
        command.add_flag("--force", o.force, "Delete every object of the bucket first");
        command.add_option("--jobs,-j", o.jobs, "Deletes in flight at once (default 16)")
            ->type_name("N")
            ->check(CLI::Range(std::size_t{1}, std::size_t{1024}));
      }
      break;
    case client_command::cp:
    case client_command::sync:
      command.add_option("SOURCE", o.file, "A file or directory, s3://BUCKET[/KEY or PREFIX], or - (cp: stdin)")
          ->type_name("")
          ->required()
          ->check(location());
      command.add_option("TARGET", o.url, "A file or directory, s3://BUCKET[/KEY or PREFIX], or - (cp: stdout)")
          ->type_name("")
          ->required()
          ->check(location());
      if (spec.command == client_command::cp) {
        command.add_flag("--recursive,-r", o.recursive, "Every file under a directory, every object under a prefix");
      } else {
        command.add_flag("--delete", o.delete_extra, "Delete what the target has and the source does not");
        command.add_flag("--size-only", o.size_only, "Compare sizes only, not times or ETags");
      }
      add_many(command, o, true);
      command.add_option("--content-type", o.content_type, "Content-Type of the objects written")->type_name("T");
      command.add_option("--via", o.via, "How the bytes move: over HTTP for now (put and get take --via rdma)")
          ->type_name("auto|http")
          ->capture_default_str()
          ->check(one_of({"auto", "http"}));
      command.add_flag("--json", o.json,
                       "One JSON line per object (op, source, target, bytes, etag, seconds, error) and a summary line");
      break;
    case client_command::cat:
    case client_command::stat:
      command.add_option("URL", o.paths, "s3://BUCKET/KEY ...")
          ->type_name("")
          ->required()
          ->check(s3_url(url_shape::object));
      if (spec.command == client_command::stat) {
        command.add_flag("--json", o.json,
                         "One JSON object per line: bucket, key, size, etag, last_modified, content_type");
      }
      break;
    case client_command::put:
      command.add_option("FILE", o.file, "The file to upload")->type_name("")->required();
      command.add_option("URL", o.url, "s3://BUCKET[/KEY]")->type_name("")->required()->check(s3_url(url_shape::any));
      command.add_option("--content-type", o.content_type, "The object's Content-Type")->type_name("T");
      add_transfer(command, o);
      break;
    case client_command::get:
      command.add_option("URL", o.url, "s3://BUCKET/KEY")
          ->type_name("")
          ->required()
          ->check(s3_url(url_shape::file_object));
      command.add_option("FILE", o.file, "The target file or directory (default: the key's name)")->type_name("");
      add_transfer(command, o);
      break;
    case client_command::ls:
      command.add_option("URL", o.url, "s3://BUCKET[/PREFIX] (none: the buckets)")
          ->type_name("")
          ->check(s3_url(url_shape::any));
      command.add_flag("--recursive", o.recursive, "Every key under the prefix, not folded at /");
      command.add_flag("--json", o.json,
                       "One JSON object per line: key, size, etag, last_modified; prefix; or bucket, created");
      break;
    case client_command::rm:
      command.add_option("URL", o.paths, "s3://BUCKET/KEY ... (-r: s3://BUCKET[/PREFIX])")
          ->type_name("")
          ->required()
          ->check(s3_url(url_shape::any));
      command.add_flag("--recursive,-r", o.recursive, "Every object under the prefix");
      add_many(command, o, true);
      command.add_flag("--json", o.json, "-r: one JSON line per object deleted and a summary line");
      command.callback([&o] {
        for (const std::string& path : o.paths) {
          if (const auto url = split_s3_url(path); !o.recursive && url && url->second.empty()) {
            throw CLI::ValidationError("URL", "'" + path + "' names no key (-r deletes every object under a prefix)");
          }
        }
      });
      break;
    case client_command::uploads:
      command.add_option("ACTION", o.action, "ls: list them; abort: abort one (URL, UPLOAD_ID) or --all")
          ->type_name("ls|abort")
          ->required()
          ->check(one_of({"ls", "abort"}));
      command.add_option("URL", o.url, "s3://BUCKET[/PREFIX] (ls, abort --all) or s3://BUCKET/KEY (abort)")
          ->type_name("")
          ->required()
          ->check(s3_url(url_shape::any));
      command.add_option("UPLOAD_ID", o.upload_id, "abort: the upload's id, as uploads ls prints it")->type_name("");
      command.add_flag("--all", o.all, "abort: every upload whose key starts with the URL's prefix");
      command.add_flag("--json", o.json, "ls: one JSON object per line: key, upload_id, initiated");
      command.callback([&o] {
        const auto url = split_s3_url(o.url);
        if (o.action == "ls" && (!o.upload_id.empty() || o.all)) {
          throw CLI::ValidationError("ls", "takes s3://BUCKET[/PREFIX] only (no UPLOAD_ID, no --all)");
        }
        if (o.action == "abort" && o.all && !o.upload_id.empty()) {
          throw CLI::ValidationError("UPLOAD_ID", "--all aborts every upload under the prefix: give no UPLOAD_ID");
        }
        if (o.action == "abort" && !o.all && (o.upload_id.empty() || !url || url->second.empty())) {
          throw CLI::ValidationError("abort", "needs s3://BUCKET/KEY UPLOAD_ID, or --all s3://BUCKET[/PREFIX]");
        }
      });
      break;
    case client_command::presign:
      command.add_option("URL", o.url, "s3://BUCKET/KEY")->type_name("")->required()->check(s3_url(url_shape::object));
      command.add_option("--expires", o.expires, "Seconds the URL stays valid (1..604800, default 3600)")
          ->type_name("S")
          ->check(CLI::Range(std::uint64_t{1}, sluice::s3::max_presigned_expiry));
      break;
  }
  add_connection(command, o);
  return command;
}

std::string env_or(const char* name, std::string fallback) {
  // The CLI reads the environment once, before any thread starts (the library never does).
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
  return value != nullptr && *value != '\0' ? std::string(value) : std::move(fallback);
}

}  // namespace

command_line parse_command_line(int argc, const char* const* argv) {
  CLI::App app("sluice: storage to GPU memory over S3, RDMA and same-host grants", "sluice");
  app.formatter(make_formatter());
  app.failure_message(failure_message);
  app.require_subcommand(1);
  app.set_version_flag("--version,-V", "sluice " SLUICE_VERSION_STRING);  // project(VERSION) in CMakeLists.txt
  // An option given twice: the last one counts (as with a shell alias that sets a default).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  serve_options serve;
  add_serve(app, serve);
  client_options client;
  std::vector<std::pair<const CLI::App*, client_command>> commands;
  commands.reserve(client_specs.size());
  for (const client_spec& spec : client_specs) commands.emplace_back(&add_client(app, spec, client), spec.command);
  // After the subcommands: they would inherit it.
  app.footer(
      "Credentials: --access-key and --secret-key, else AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, else the\n"
      "profile (--profile, AWS_PROFILE, default) of ~/.aws/credentials and ~/.aws/config.\n"
      "'sluice COMMAND --help' shows a command's options.");

  // `sluice help [COMMAND]` is `sluice [COMMAND] --help`.
  std::vector<const char*> args(argv, argv + argc);
  if (args.size() >= 2 && std::string_view(args[1]) == "help") {
    args.erase(args.begin() + 1);
    args.insert(args.begin() + std::min<std::ptrdiff_t>(2, static_cast<std::ptrdiff_t>(args.size())), "--help");
  }
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help printed, or the failure message
  }
  for (const auto& [command, which] : commands) {
    if (!command->parsed()) continue;
    client.command = which;
    if (client.region.empty()) client.region = env_or("AWS_REGION", env_or("AWS_DEFAULT_REGION", ""));
    if (which == client_command::cp || which == client_command::sync) {
      client.paths = {client.file, client.url};
      client.url.clear();
      client.file.clear();
    }

    return client;
  }
  return serve;
}

}  // namespace sluice::cli
