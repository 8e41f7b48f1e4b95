// SPDX-License-Identifier: Apache-2.0
// The `sluice` command-line tool, in three parts: the command line (args.cpp, CLI11: every
// subcommand, its options, --help and the usage errors), `sluice serve` (serve.cpp), the
// single-object client commands (commands.cpp), cp, sync and the streams (cp.cpp, sync.cpp, on
// the job runner of transfer_job.cpp), and the multipart uploads in progress (uploads.cpp).
// Internal to the tool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace sluice::cli {

/// `sluice serve`'s command line. Options left out are nullopt: the --config file's value, or
/// the default, stands.
struct serve_options {
  std::string root;
  std::optional<std::string> config_file;
  std::optional<std::string> listen;  ///< HOST:PORT or off
  std::optional<std::string> tls_cert;
  std::optional<std::string> tls_key;
  std::optional<std::string> tls_listen;  ///< HOST:PORT
  std::optional<std::string> region;
  bool anonymous = false;
  bool no_sigv2 = false;
  std::string access_key;  ///< --access-key, else AWS_ACCESS_KEY_ID, else none
  std::string secret_key;  ///< --secret-key, else AWS_SECRET_ACCESS_KEY
  std::string fabric = "auto";
  std::optional<std::uint64_t> fabric_registration_cache;  ///< bytes of GET sources kept registered
  std::optional<std::uint64_t> pinned_budget;       ///< host memory pinned at once by every cache (default RAM / 4)
  std::optional<std::uint64_t> small_object_cache;  ///< bytes of small objects kept in memory (fs_store)
  std::optional<double> fabric_connect_timeout;     ///< seconds a transfer waits for its peer's first completion
  std::optional<std::string> grant_socket;          ///< PATH or off; default s3::default_grant_socket
  std::optional<std::size_t> grant_copy_threads;
  bool grant_register_on_write = true;           ///< CUDA builds: new versions are registered when written
  std::optional<std::string> access_log;         ///< off, stderr or FILE
  std::optional<std::string> access_log_format;  ///< text or json
  std::optional<std::string> admin_listen;       ///< HOST:PORT or off
  std::optional<std::uint32_t> shutdown_grace;   ///< seconds requests in flight get after SIGTERM
  std::optional<std::uint64_t> upload_expiry;    ///< seconds a multipart upload may idle (0: for ever)
  // Gateway mode (--upstream): --root is the cache of an upstream S3 service (gateway_store).
  std::optional<std::string> upstream;  ///< http(s)://HOST[:PORT]
  std::string upstream_access_key;      ///< --upstream-access-key, else SLUICE_UPSTREAM_ACCESS_KEY_ID
  std::string upstream_secret_key;      ///< --upstream-secret-key, else SLUICE_UPSTREAM_SECRET_ACCESS_KEY
  std::optional<std::string> upstream_region;
  std::optional<std::string> upstream_ca_bundle;
  std::optional<std::uint64_t> cache_bytes;       ///< parsed from a size ("64 GiB")
  std::optional<std::uint64_t> revalidate_after;  ///< seconds
  bool stale_if_error = false;
  std::optional<std::uint32_t> upstream_timeout;  ///< seconds of one upstream attempt
};

enum class client_command { mb, rb, put, get, ls, rm, presign, cp, sync, cat, stat, uploads };

/// The command line of a client command; the URLs and files were checked for the command's shape.
struct client_options {
  client_command command = client_command::ls;
  std::string url;                 ///< s3://BUCKET[/KEY]; empty for `ls` of the buckets
  std::string file;                ///< put: the source; get: the target (empty: the key's name)
  std::vector<std::string> paths;  ///< mb, rb, rm, cat, stat: the URLs; cp, sync: SOURCE and TARGET
  std::string endpoint;            ///< --endpoint, else AWS_ENDPOINT_URL, the profile's, http://127.0.0.1:9000
  std::string ca_bundle;
  std::string access_key;        ///< --access-key, else AWS_ACCESS_KEY_ID, else the profile's
  std::string secret_key;        ///< --secret-key, else AWS_SECRET_ACCESS_KEY, else the profile's
  std::string region;            ///< --region, else AWS_REGION, AWS_DEFAULT_REGION, the profile's, us-east-1
  std::string profile;           ///< --profile, else AWS_PROFILE, else default
  bool no_sign_request = false;  ///< anonymous requests, on purpose
  std::string content_type;
  std::string via = "auto";
  std::string fabric = "auto";
  bool recursive = false;
  bool no_progress = false;
  bool json = false;             ///< one JSON object per line on stdout
  std::uint64_t expires = 3600;  ///< presign: seconds the URL is valid (1..604800)
  double connect_timeout = 10;   ///< seconds to open a connection
  double timeout = 60;           ///< seconds a request may go without progress
  std::size_t jobs = 16;         ///< cp, sync, rm -r, rb --force: objects in flight
  std::vector<std::string> include;
  std::vector<std::string> exclude;
  bool dry_run = false;       ///< cp, sync, rm: say what would be done
  bool delete_extra = false;  ///< sync --delete
  bool size_only = false;     ///< sync --size-only
  bool force = false;         ///< rb --force
  std::string action;         ///< uploads: ls or abort
  std::string upload_id;      ///< uploads abort: the upload (none with --all)
  bool all = false;           ///< uploads abort --all: every upload under the URL's prefix
};

/// What the command line asks for: a command, or the exit code when it is settled already
/// (0 after --help, 2 after a usage error, both printed).
using command_line = std::variant<int, serve_options, client_options>;

/// Parses argv with CLI11. Usage errors go to stderr with the command's usage line, naming the
/// unknown option or argument and, for an option close to a known one, "did you mean --X?".
[[nodiscard]] command_line parse_command_line(int argc, const char* const* argv);

/// Runs `sluice serve` until SIGINT or SIGTERM; the exit code.
[[nodiscard]] int serve(const serve_options& options);

/// Runs a client command; the exit code (1: the request failed, 2: a bad configuration).
[[nodiscard]] int run_client(const client_options& options);

/// --fabric: a short name or a libfabric provider name, or several separated by commas
/// ("tcp" is "tcp;ofi_rxm", "verbs" is "verbs;ofi_rxm").
[[nodiscard]] std::string provider_name(std::string_view choice);
/// Writes [data, data + n) at offset `at` of `fd` whole (pwrite, EINTR retried): 0 or an errno.
int write_all(int fd, const std::byte* data, std::uint64_t n, std::uint64_t at);
/// What --via auto opens with --fabric auto: the hardware providers only (verbs, efa).
inline constexpr std::string_view hardware_providers = "verbs;ofi_rxm,efa";

/// "HOST:PORT" split at its last colon, or nullopt.
[[nodiscard]] std::optional<std::pair<std::string, std::uint16_t>> host_port(std::string_view text);

/// s3://BUCKET[/KEY] split: bucket and key (the key may be empty), or nullopt.
[[nodiscard]] std::optional<std::pair<std::string, std::string>> split_s3_url(std::string_view text);

}  // namespace sluice::cli
