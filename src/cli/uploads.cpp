// SPDX-License-Identifier: Apache-2.0
// `sluice uploads ls|abort`: the multipart uploads in progress under a prefix (ListMultipartUploads),
// and aborting one, or all of them under a prefix (AbortMultipartUpload), which removes their parts.
#include "client_common.hpp"

#include <cstdio>

namespace sluice::cli {

int uploads_command(s3::client& client, const client_options& o, const s3_url& url) {
  const s3::client_config& endpoint = client.config();
  sluice::error_code ec;
  if (o.action == "abort" && !o.all) {
    client.abort_multipart_upload(url.bucket, url.key, o.upload_id, ec);
    if (ec) {
      std::fprintf(stderr, "sluice uploads abort: %s %s: %s\n", printable_key(url_text(url)).c_str(),
                   printable_key(o.upload_id).c_str(), describe(ec, endpoint).c_str());
      return 1;
    }
    std::printf("abort: %s %s\n", printable_key(url_text(url)).c_str(), o.upload_id.c_str());
    return 0;
  }
  const std::vector<upload_info> uploads = client.list_multipart_uploads(url.bucket, url.key, ec);
  if (ec) {
    std::fprintf(stderr, "sluice uploads %s: %s: %s\n", o.action.c_str(), printable_key(url_text(url)).c_str(),
                 describe(ec, endpoint).c_str());
    return 1;
  }
  if (o.action == "ls") {
    for (const upload_info& u : uploads) {
      if (o.json) {
        json_line().text("key", u.key).text("upload_id", u.upload_id).text("initiated", iso_time(u.initiated)).print();
      } else {
        std::printf("%s %s %s\n", format_time(u.initiated).c_str(), printable_key(u.upload_id).c_str(),
                    printable_key(u.key).c_str());
      }
    }
    return 0;
  }
  // abort --all: one after the other; an upload that is gone meanwhile (completed, aborted) is not
  // a failure.
  int code = 0;
  std::size_t aborted = 0;
  for (const upload_info& u : uploads) {
    client.abort_multipart_upload(url.bucket, u.key, u.upload_id, ec);
    if (ec && ec != s3::errc::no_such_upload) {
      std::fprintf(stderr, "sluice uploads abort: s3://%s/%s %s: %s\n", url.bucket.c_str(),
                   printable_key(u.key).c_str(), printable_key(u.upload_id).c_str(), describe(ec, endpoint).c_str());
      code = 1;
      continue;
    }
    ++aborted;
    std::printf("abort: s3://%s/%s %s\n", url.bucket.c_str(), printable_key(u.key).c_str(),
                printable_key(u.upload_id).c_str());
  }
  std::printf("uploads abort: %zu of %zu aborted\n", aborted, uploads.size());
  return code;
}

}  // namespace sluice::cli
