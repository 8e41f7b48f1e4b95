// SPDX-License-Identifier: Apache-2.0
// The single-object client commands of `sluice` against any S3 endpoint (sluice::s3::client):
// mb, put, get (over HTTP or RDMA), ls, stat, presign, rm and rb of one URL each; and the
// dispatch of every client command (cp, sync, cat and rm -r, rb --force run in cp.cpp and sync.cpp).
#include "client_common.hpp"

#include <sluice/s3/sigv4.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::cli {

namespace {

// "rdma 1073741824 bytes in 128 requests, http 0 bytes"
std::string describe_paths(const s3::transfer_report& r) {
  std::string text = "rdma " + std::to_string(r.rdma_bytes) + " bytes in " + std::to_string(r.rdma_requests) +
                     " requests, http " + std::to_string(r.http_bytes) + " bytes in " +
                     std::to_string(r.http_requests) + " requests";
  if (r.declined > 0) text += ", " + std::to_string(r.declined) + " declined by the server";
  return text;
}

// The --json line of a finished get or put: what moved, and which way (the transfer report).
void print_transfer(std::string_view op, const s3_url& where, const std::string& file, std::uint64_t bytes,
                    std::string_view etag, std::chrono::steady_clock::time_point started,
                    const s3::transfer_report& paths, const s3::rdma_client_plane* plane) {
  json_line line;
  line.text("op", op).text("bucket", where.bucket).text("key", where.key).text("file", file).number("bytes", bytes);
  line.text("etag", etag)
      .seconds("seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  line.number("rdma_bytes", paths.rdma_bytes).number("rdma_requests", paths.rdma_requests);
  line.number("http_bytes", paths.http_bytes).number("http_requests", paths.http_requests);
  line.number("declined", paths.declined);
  if (plane != nullptr) {
    line.text("rdma_provider", plane->provider());
  } else {
    line.null("rdma_provider");
  }
  line.print();
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
    writing = std::async(std::launch::async, [fd, data = buffer.get(), n, at] { return write_all(fd, data, n, at); });
    written = at + n;
  }
  wait_for_write();
  return ec ? 0 : written;
}

int get_command(s3::client& client, const s3_url& from, std::string target, bool show_progress, s3::transfer_via via,
                bool json) {
  const auto started = std::chrono::steady_clock::now();
  const std::string source = "s3://" + from.bucket + "/" + from.key;
  auto fail = [&](const sluice::error_code& ec) {
    std::fprintf(stderr, "sluice get: %s: %s\n", source.c_str(), describe(ec, client.config()).c_str());
    return 1;
  };
  if (target.empty()) target = base_name(from.key);
  std::error_code fs_ec;
  if (std::filesystem::is_directory(target, fs_ec)) target += (target.ends_with('/') ? "" : "/") + base_name(from.key);
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
    const sluice::object_info info = head_explained(client, from, ec);
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
    if (json) {
      print_transfer("get", from, target, bytes, info.attributes.etag, started, paths, client.config().rdma.get());
      return 0;
    }
    std::printf("download: %s to %s (%llu bytes; %s)\n", source.c_str(), target.c_str(),
                static_cast<unsigned long long>(bytes), describe_paths(paths).c_str());
    return 0;
  }
}

int ls_command(s3::client& client, const std::optional<s3_url>& where, bool recursive, bool json) {
  const s3::client_config& endpoint = client.config();
  sluice::error_code ec;
  if (!where) {
    const auto buckets = client.list_buckets(ec);
    if (ec) {
      std::fprintf(stderr, "sluice ls: %s\n", describe(ec, endpoint).c_str());
      return 1;
    }
    for (const auto& b : buckets) {
      if (json) {
        json_line().text("bucket", b.name).text("created", iso_time(b.created)).print();
      } else {
        std::printf("%s %s\n", format_time(b.created).c_str(), b.name.c_str());
      }
    }
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
    for (const auto& prefix : page.common_prefixes) {
      if (json) {
        json_line().text("prefix", prefix).print();
      } else {
        std::printf("%30s %s\n", "PRE", printable_key(prefix).c_str());
      }
    }
    for (const auto& object : page.objects) {
      if (json) {
        json_line()
            .text("key", object.key)
            .number("size", object.size)
            .text("etag", object.attributes.etag)
            .text("last_modified", iso_time(object.last_modified))
            .print();
      } else {
        std::printf("%s %10llu %s\n", format_time(object.last_modified).c_str(),
                    static_cast<unsigned long long>(object.size), printable_key(object.key).c_str());
      }
    }
    if (!page.truncated || page.next_continuation_token.empty()) return 0;
    options.continuation_token = page.next_continuation_token;
  }
}

// `sluice presign`: the path-style GET URL of the object at the endpoint, signed in its query
// (SigV4, only host signed, UNSIGNED-PAYLOAD), valid for `expires` seconds from now. Nothing is sent:
// the URL works for whoever holds it, as aws s3 presign's does.
int presign_command(const s3::client_config& config, const s3_url& object, std::uint64_t expires) {
  // validate() took the endpoint: http:// or https://, then host[:port], no path, maybe one '/'.
  std::string_view origin = config.endpoint;
  if (origin.ends_with('/')) origin.remove_suffix(1);
  const std::string_view authority = origin.substr(origin.find("://") + 3);  // the Host header, port included
  const std::string path = "/" + s3::uri_encode(object.bucket, true) + "/" + s3::uri_encode(object.key, false);
  const std::string query = s3::presign("GET", authority, path, "", config.creds, config.region,
                                        std::chrono::system_clock::now(), std::chrono::seconds(expires));
  std::printf("%.*s%s?%s\n", static_cast<int>(origin.size()), origin.data(), path.c_str(), query.c_str());
  return 0;
}

// `sluice stat`: what HEAD says of each object, as text or one --json line each.
int stat_command(s3::client& client, const client_options& o) {
  int code = 0;
  for (const std::string& path : o.paths) {
    const auto url = parse_s3(path);
    sluice::error_code ec;
    const sluice::object_info info = head_explained(client, *url, ec);
    if (ec) {
      std::fprintf(stderr, "sluice stat: %s: %s\n", printable_key(path).c_str(), describe(ec, client.config()).c_str());
      code = 1;
      continue;
    }
    const auto& a = info.attributes;
    if (o.json) {
      json_line line;
      line.text("bucket", url->bucket).text("key", url->key).number("size", info.size).text("etag", a.etag);
      line.text("last_modified", iso_time(info.last_modified)).text("content_type", a.content_type);
      for (const auto& [name, value] : a.metadata) line.text("x-amz-meta-" + name, value);
      line.print();
      continue;
    }
    std::printf("%s\n  size:          %llu\n  etag:          %s\n  last modified: %s\n", printable_key(path).c_str(),
                static_cast<unsigned long long>(info.size), a.etag.c_str(), iso_time(info.last_modified).c_str());
    if (!a.content_type.empty()) std::printf("  content type:  %s\n", a.content_type.c_str());
    for (const auto& [name, value] : a.metadata) {
      std::printf("  x-amz-meta-%s: %s\n", printable_key(name).c_str(), printable_key(value).c_str());
    }
  }
  return code;
}

// `sluice mb`: each bucket in turn.
int mb_command(s3::client& client, const client_options& o) {
  int code = 0;
  for (const std::string& path : o.paths) {
    const auto url = parse_s3(path);
    sluice::error_code ec;
    client.create_bucket(url->bucket, ec);
    if (ec) {
      std::fprintf(stderr, "sluice mb: %s: %s\n", path.c_str(), describe(ec, client.config()).c_str());
      code = 1;
    } else {
      std::printf("make_bucket: %s\n", path.c_str());
    }
  }
  return code;
}

int put_command(s3::client& client, const client_options& o, s3_url url, s3::transfer_via via) {
  const std::string& file = o.file;
  if (url.key.empty() || url.key.ends_with('/')) url.key += base_name(file);
  const std::string where = url_text(url);
  const s3::client_config& config = client.config();
  const auto started = std::chrono::steady_clock::now();
  std::error_code size_ec;
  const std::uint64_t bytes = std::filesystem::file_size(file, size_ec);  // for --json; a missing file fails below
  std::string etag;
  s3::transfer_report paths;
  sluice::error_code ec;
  {
    progress_bar bar("put " + where, progress_wanted(o));
    s3::put_options options;
    options.attributes.content_type = o.content_type;
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
      etag = client.put_object(url.bucket, url.key, source, std::move(options), ec);
      ::munmap(mapping, static_cast<std::size_t>(st.st_size));
    } else {
      etag = client.put_object(url.bucket, url.key, std::filesystem::path(file), std::move(options), ec);
    }
    if (fd >= 0) ::close(fd);
  }
  if (ec) {
    const bool local = ec.category() == boost::system::system_category();
    std::fprintf(stderr, "sluice put: %s: %s\n", local ? file.c_str() : where.c_str(), describe(ec, config).c_str());
    return 1;
  }
  if (o.json) {
    print_transfer("put", url, file, size_ec ? 0 : bytes, etag, started, paths, config.rdma.get());
    return 0;
  }
  std::printf("upload: %s to %s (etag %s; %s)\n", file.c_str(), where.c_str(), etag.c_str(),
              describe_paths(paths).c_str());
  return 0;
}

constexpr std::array<const char*, 12> command_names = {"mb",      "rb", "put",  "get", "ls",   "rm",
                                                       "presign", "cp", "sync", "cat", "stat", "uploads"};

}  // namespace

int run_client(const client_options& o) {
  const client_command command = o.command;
  const char* const name = command_names[static_cast<std::size_t>(command)];
  const bool transfer = command == client_command::get || command == client_command::put;
  int code = 0;
  std::optional<made_client> made = make_client(o, name, transfer, code);
  if (!made) return code;
  s3::client& client = *made->client;
  // The command line's shape was checked (args.cpp): the URL parses, with a key where one is due.
  const std::optional<s3_url> url = parse_s3(o.url);
  const s3::transfer_via via = o.via == "rdma"   ? s3::transfer_via::rdma
                               : o.via == "http" ? s3::transfer_via::http
                                                 : s3::transfer_via::automatic;
  switch (command) {
    case client_command::mb: return mb_command(client, o);
    case client_command::rb: return rb_command(o, *made);
    case client_command::rm: return rm_command(o, *made);
    case client_command::ls: return ls_command(client, url, o.recursive, o.json);
    case client_command::stat: return stat_command(client, o);
    case client_command::cat: return cat_command(o, *made);
    case client_command::cp: return cp_command(o, *made);
    case client_command::sync: return sync_command(o, *made);
    case client_command::presign: return presign_command(made->config, *url, o.expires);
    case client_command::get: return get_command(client, *url, o.file, progress_wanted(o), via, o.json);
    case client_command::put: return put_command(client, o, *url, via);
    case client_command::uploads: return uploads_command(client, o, *url);
  }
  return 2;
}

}  // namespace sluice::cli
