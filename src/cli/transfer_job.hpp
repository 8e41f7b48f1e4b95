// SPDX-License-Identifier: Apache-2.0
// The job runner of cp, sync, rm -r and rb --force (transfer_job.cpp): a list of items (upload,
// download, copy, delete), a bounded number in flight on one s3::client through its asynchronous
// operations, their completions run on this thread's io_context (no thread per file). Downloads
// go to a temporary file beside the target, renamed when complete; SIGINT and SIGTERM cancel what
// is in flight, remove those files and print what completed. Internal to the tool.
#pragma once

#include "client_common.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::cli {

/// One object to move or delete.
struct job_item {
  enum class kind { upload, download, copy, remove, remove_local };
  kind op = kind::upload;
  std::string local;  ///< upload: the source file; download: the target; remove_local: the file
  s3_url source;      ///< download, copy: the object read
  s3_url target;      ///< upload, copy: the object written; remove: the object deleted
  std::uint64_t size = 0;
  std::string etag;  ///< download, copy: the listing's ETag, required of every GET (If-Match)
  std::chrono::system_clock::time_point modified{};  ///< download: the local file's mtime
};

/// How a job runs and reports.
struct job_options {
  const char* command = "cp";
  std::size_t jobs = 16;
  bool json = false;      ///< a JSON line per item and one for the summary
  bool progress = false;  ///< the progress line on stderr
  bool dry_run = false;   ///< print what would be done, do nothing
  s3::transfer_via via = s3::transfer_via::automatic;
  std::string content_type;
};

/// Runs `items`, `options.jobs` at once, on `client`. `failed_early` are failures found while
/// planning (an unsafe key, an unreadable directory), each "WHAT: why", counted in the summary.
/// The exit code: 0 when every item completed, 1 when one failed, 130 after SIGINT (143 SIGTERM).
[[nodiscard]] int run_job(s3::client& client, std::vector<job_item> items, const job_options& options,
                          std::vector<std::string> failed_early);

/// What an item names for a person: its source and target ("a.txt -> s3://b/a.txt").
[[nodiscard]] std::string describe_item(const job_item& item);

}  // namespace sluice::cli
