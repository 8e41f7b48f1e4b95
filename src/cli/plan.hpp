// SPDX-License-Identifier: Apache-2.0
// What cp and sync plan with (cp.cpp): the files under a local directory, the objects under a
// prefix, and the local path of a key, refused when it would leave the target directory.
// Internal to the tool.
#pragma once

#include "transfer_job.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::cli {

/// A regular file under a local directory.
struct local_entry {
  std::string path;      ///< as the walk reached it (the root joined with `relative`)
  std::string relative;  ///< with / between its parts
  std::uint64_t size = 0;
  std::chrono::system_clock::time_point modified{};
};

/// The regular files under `root` (symbolic links to files followed, to directories not), in
/// order, that --include/--exclude select. A directory that cannot be read is a failure in
/// `failures` ("DIR: why"); the walk goes on.
[[nodiscard]] std::vector<local_entry> walk_local(const std::string& root, const client_options& o,
                                                  std::vector<std::string>& failures);

/// `key` with a / added unless empty or already there: the prefix of a "directory".
[[nodiscard]] std::string directory_prefix(std::string key);

/// Every object under `prefix` of `bucket` (all pages); ec on failure.
[[nodiscard]] std::vector<sluice::object_info> list_remote(s3::client& client, const std::string& bucket,
                                                           const std::string& prefix, sluice::error_code& ec);

/// The local path for the part `relative` of a key below `root`, or nullopt with `why` set when
/// writing it could leave `root` (a part that is empty, "." or "..": keys with //, a leading /,
/// ../; or a directory on the way that is a symbolic link out of root). A key ending in / (a
/// folder marker) is nullopt with `why` empty: nothing to write.
[[nodiscard]] std::optional<std::string> local_target(const std::string& root, std::string_view relative,
                                                      std::string& why);

/// A file's time as the system clock's.
[[nodiscard]] std::chrono::system_clock::time_point to_system(std::filesystem::file_time_type t);

/// The job options of a command line.
[[nodiscard]] job_options job_options_of(const client_options& o, const char* command);

}  // namespace sluice::cli
