// SPDX-License-Identifier: Apache-2.0
// What the client commands share (client_common.cpp, profile.cpp): the client built from the
// command line, the profile and the environment; errors said for a person; --json lines; keys
// made safe to print; the one-transfer progress bar. Internal to the tool.
#pragma once

#include "cli.hpp"

#include <sluice/s3/client.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::cli {

namespace s3 = sluice::s3;

struct s3_url {
  std::string bucket;
  std::string key;  // may be empty
};

/// s3://BUCKET[/KEY] as an s3_url, or nullopt.
[[nodiscard]] std::optional<s3_url> parse_s3(std::string_view text);

/// "s3://bucket/key" (or "s3://bucket" for an empty key).
[[nodiscard]] std::string url_text(const s3_url& url);

/// A profile's settings from ~/.aws/credentials and ~/.aws/config (profile.cpp).
struct aws_profile {
  std::string name;  ///< the profile read ("default" when none was named)
  std::string access_key;
  std::string secret_key;
  std::string region;
  std::string endpoint_url;
  bool named = false;  ///< --profile or AWS_PROFILE named it: it must exist
  bool found = false;  ///< a section of that name was in one of the files
};

/// Reads `name`'s section (empty: AWS_PROFILE, else "default") from AWS_SHARED_CREDENTIALS_FILE
/// (~/.aws/credentials) and AWS_CONFIG_FILE (~/.aws/config, "[profile NAME]" or "[default]").
[[nodiscard]] aws_profile read_aws_profile(const std::string& name);

/// The client a command runs with: the configuration from the command line, the environment and
/// the profile, validated. nullopt after printing why (exit_code then says 1 or 2).
struct made_client {
  std::unique_ptr<s3::client> client;
  s3::client_config config;
};
[[nodiscard]] std::optional<made_client> make_client(const client_options& o, const char* name, bool for_transfer,
                                                     int& exit_code);

/// What an error means, for a person: the S3 code with a hint, the timeout with the address and
/// what was waited for, or the system's message.
[[nodiscard]] std::string describe(const sluice::error_code& ec, const s3::client_config& config);

/// HEAD of an object; a NoSuchKey (HEAD answers carry no body) is checked against the bucket, so
/// that a missing bucket is said as NoSuchBucket.
[[nodiscard]] sluice::object_info head_explained(s3::client& client, const s3_url& url, sluice::error_code& ec);

/// host:port of an endpoint URL ("127.0.0.1:9000", "s3.example:443").
[[nodiscard]] std::string endpoint_address(std::string_view endpoint);

/// A key as it is printed: control characters, DEL, backslash and bytes that are not UTF-8
/// written as \xNN (\\ for a backslash), so that a key can neither end the line early nor send
/// escape sequences to the terminal; printable UTF-8 as it is.
[[nodiscard]] std::string printable_key(std::string_view key);

/// "12.5 MiB" (binary units).
[[nodiscard]] std::string human_bytes(double bytes);

/// The last part of a path, without trailing slashes.
[[nodiscard]] std::string base_name(std::string_view path);

/// ISO 8601 in UTC, as S3 writes times: 2024-05-01T12:00:00.000Z.
[[nodiscard]] std::string iso_time(std::chrono::system_clock::time_point t);

/// "2024-05-01 12:00:00" in UTC.
[[nodiscard]] std::string format_time(std::chrono::system_clock::time_point t);

/// Whether the progress line is drawn: stdout and stderr are terminals and --no-progress is absent.
[[nodiscard]] bool progress_wanted(const client_options& o);

/// One JSON object on one line (--json), member by member.
class json_line {
 public:
  json_line& text(std::string_view name, std::string_view value);
  json_line& number(std::string_view name, std::uint64_t value);
  json_line& seconds(std::string_view name, double value);
  json_line& boolean(std::string_view name, bool value);
  json_line& null(std::string_view name);
  /// Prints the object and a newline on stdout.
  void print();

 private:
  void member(std::string_view name);
  std::string out_ = "{";
};

/// A one-line progress bar on stderr for one transfer, redrawn at most ten times a second.
class progress_bar {
 public:
  progress_bar(std::string label, bool enabled) : label_(std::move(label)), enabled_(enabled) {}
  progress_bar(const progress_bar&) = delete;
  progress_bar& operator=(const progress_bar&) = delete;
  ~progress_bar() { finish(); }

  void update(std::uint64_t done, std::uint64_t total);
  void finish();

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

/// --include / --exclude: whether a path relative to the source is copied (an --include match
/// wins over an --exclude match; no --exclude match: copied). Patterns are fnmatch(3) globs in
/// which * also matches /.
[[nodiscard]] bool selected(const client_options& o, std::string_view relative);

// The commands of many objects and of streams, each with the client made for it: cp (cp.cpp),
// sync (sync.cpp), cat, and rm and rb of several URLs, -r, --force (cp.cpp).
[[nodiscard]] int cp_command(const client_options& o, made_client& made);
[[nodiscard]] int sync_command(const client_options& o, made_client& made);
[[nodiscard]] int cat_command(const client_options& o, made_client& made);
[[nodiscard]] int rm_command(const client_options& o, made_client& made);
[[nodiscard]] int rb_command(const client_options& o, made_client& made);
// `sluice uploads ls|abort` (uploads.cpp).
[[nodiscard]] int uploads_command(s3::client& client, const client_options& o, const s3_url& url);

}  // namespace sluice::cli
