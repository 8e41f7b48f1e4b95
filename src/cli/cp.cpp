// SPDX-License-Identifier: Apache-2.0
// `sluice cp` (local → S3, S3 → local, S3 → S3; -r; - as stdin or stdout), `sluice cat`, and rm
// and rb of many objects: each plans a list of job_items and hands it to run_job (one client,
// --jobs in flight). The streams run here, a window at a time.
#include "plan.hpp"

#include <sluice/s3/error.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::cli {

namespace fs = std::filesystem;

std::chrono::system_clock::time_point to_system(fs::file_time_type t) {
  return std::chrono::time_point_cast<std::chrono::system_clock::duration>(fs::file_time_type::clock::to_sys(t));
}

namespace {

bool is_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

bool write_full(int fd, const std::byte* data, std::size_t n) {
  for (std::size_t done = 0; done < n;) {
    const ssize_t w = ::write(fd, data + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<std::size_t>(w);
  }
  return true;
}

int fail(const char* command, const std::string& what, const std::string& why) {
  std::fprintf(stderr, "sluice %s: %s: %s\n", command, what.c_str(), why.c_str());
  return 1;
}

// `cp - s3://b/k`: stdin as one object, streamed (s3::client::async_put_stream): one PUT when it
// ends within the first part, else a multipart upload with parts_in_flight parts in memory at
// most. SIGINT or SIGTERM cancels it, and the client aborts the upload: no object, no upload left.
int upload_stdin(const client_options& o, made_client& made, const s3_url& to) {
  s3::client& client = *made.client;
  s3::put_options put;
  put.attributes.content_type = o.content_type;
  put.via = s3::transfer_via::http;
  std::uint64_t bytes = 0;
  put.progress = [&bytes](std::uint64_t done, std::uint64_t) { bytes = std::max(bytes, done); };
  boost::asio::io_context io;
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  int interrupted = 0;
  signals.async_wait([&](const sluice::error_code& ec, int signal_number) {
    if (ec) return;
    interrupted = signal_number;
    client.cancel();
  });
  sluice::error_code ec;
  std::string etag;
  client.async_put_stream(to.bucket, to.key, STDIN_FILENO, std::move(put),
                          boost::asio::bind_executor(io, [&](sluice::error_code e, std::string tag) {
                            ec = e;
                            etag = std::move(tag);
                            signals.cancel();
                          }));
  io.run();
  if (interrupted != 0) {
    std::fprintf(stderr, "sluice cp: %s: interrupted by %s: nothing written, the upload aborted\n",
                 url_text(to).c_str(), interrupted == SIGINT ? "SIGINT" : "SIGTERM");
    return 128 + interrupted;
  }
  if (ec) {
    const bool local = ec.category() == boost::system::system_category();
    return fail("cp", local ? "stdin" : url_text(to), local ? ec.message() : describe(ec, made.config));
  }
  if (o.json) {
    json_line()
        .text("op", "upload")
        .text("source", "-")
        .text("target", url_text(to))
        .number("bytes", bytes)
        .text("etag", etag)
        .null("error")
        .print();
  }
  return 0;
}

}  // namespace

namespace {

// An object to stdout, a window at a time, each GET conditional on the HEAD's ETag.
int stream_to_stdout(const char* command, made_client& made, const s3_url& from) {
  s3::client& client = *made.client;
  sluice::error_code ec;
  const sluice::object_info info = head_explained(client, from, ec);
  if (ec) return fail(command, printable_key(url_text(from)), describe(ec, made.config));
  const std::uint64_t window = std::min<std::uint64_t>(std::max<std::uint64_t>(info.size, 1),
                                                       client.config().part_size * client.config().parts_in_flight);
  auto buffer = std::make_unique_for_overwrite<std::byte[]>(static_cast<std::size_t>(window));
  for (std::uint64_t at = 0; at < info.size;) {
    const std::uint64_t n = std::min(window, info.size - at);
    s3::get_options get(sluice::byte_range{at, n});
    get.via = s3::transfer_via::http;
    get.if_match = info.attributes.etag;
    const std::uint64_t got =
        client.get_object(from.bucket, from.key, sluice::region{buffer.get(), static_cast<std::size_t>(n)}, get, ec);
    if (!ec && got != n) ec = s3::errc::precondition_failed;
    if (ec) return fail(command, printable_key(url_text(from)), describe(ec, made.config));
    if (!write_full(STDOUT_FILENO, buffer.get(), static_cast<std::size_t>(n))) {
      return fail(command, "stdout", std::strerror(errno));  // NOLINT(concurrency-mt-unsafe)
    }
    at += n;
  }
  return 0;
}

}  // namespace

std::vector<local_entry> walk_local(const std::string& root, const client_options& o,
                                    std::vector<std::string>& failures) {
  std::vector<local_entry> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
  if (ec) {
    failures.push_back(root + ": " + ec.message());
    return out;
  }
  for (fs::recursive_directory_iterator end; it != end; it.increment(ec)) {
    if (ec) {
      failures.push_back(root + ": " + ec.message());
      break;
    }
    const fs::directory_entry& entry = *it;
    std::error_code type_ec;
    if (entry.is_directory(type_ec) && !entry.is_symlink(type_ec)) {
      // skip_permission_denied passes over what cannot be listed: said here instead.
      if (::access(entry.path().c_str(), R_OK | X_OK) != 0) {
        failures.push_back(entry.path().string() + ": " + std::strerror(errno));  // NOLINT(concurrency-mt-unsafe)
      }
      continue;
    }
    if (!entry.is_regular_file(type_ec)) continue;  // follows a symbolic link to a file
    std::string relative = fs::relative(entry.path(), root, type_ec).generic_string();
    if (!selected(o, relative)) continue;
    local_entry e;
    e.path = entry.path().string();
    e.relative = std::move(relative);
    e.size = entry.file_size(type_ec);
    e.modified = to_system(entry.last_write_time(type_ec));
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(), [](const local_entry& a, const local_entry& b) { return a.relative < b.relative; });
  return out;
}

std::string directory_prefix(std::string key) {
  if (!key.empty() && !key.ends_with('/')) key += '/';
  return key;
}

std::vector<sluice::object_info> list_remote(s3::client& client, const std::string& bucket, const std::string& prefix,
                                             sluice::error_code& ec) {
  s3::list_options options;
  options.prefix = prefix;
  return client.list_all_objects(bucket, options, ec).objects;
}

std::optional<std::string> local_target(const std::string& root, std::string_view relative, std::string& why) {
  why.clear();
  if (relative.empty() || relative.ends_with('/')) return std::nullopt;  // a folder marker
  std::string path = root;
  if (!path.ends_with('/')) path += '/';
  for (std::size_t at = 0; at <= relative.size();) {
    const std::size_t slash = std::min(relative.find('/', at), relative.size());
    const std::string_view part = relative.substr(at, slash - at);
    if (part.empty() || part == "." || part == "..") {
      why = part.empty() ? "its key has an empty path segment (// or a leading /)"
                         : "its key has a '" + std::string(part) + "' segment";
      why += ": refused, it could be written outside " + root;
      return std::nullopt;
    }
    at = slash + 1;
  }
  path += relative;
  // A directory on the way that is a symbolic link out of root (made by someone else) is refused too.
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(root, ec);
  const fs::path parent = fs::weakly_canonical(fs::path(path).parent_path(), ec);
  if (ec || std::mismatch(base.begin(), base.end(), parent.begin(), parent.end()).first != base.end()) {
    why = "a directory on its way leads outside " + root + ": refused";
    return std::nullopt;
  }
  return path;
}

job_options job_options_of(const client_options& o, const char* command) {
  job_options j;
  j.command = command;
  j.jobs = std::max<std::size_t>(1, o.jobs);
  j.json = o.json;
  j.progress = progress_wanted(o) && !o.json;
  j.dry_run = o.dry_run;
  j.via = o.via == "rdma"   ? s3::transfer_via::rdma
          : o.via == "http" ? s3::transfer_via::http
                            : s3::transfer_via::automatic;
  j.content_type = o.content_type;
  return j;
}

int cp_command(const client_options& o, made_client& made) {
  const std::string& from = o.paths.at(0);
  const std::string& to = o.paths.at(1);
  const auto source = parse_s3(from);
  auto target = parse_s3(to);
  if (from == "-" && target) {
    if (target->key.empty() || target->key.ends_with('/')) return fail("cp", to, "stdin needs a KEY not ending in /");
    return upload_stdin(o, made, *target);
  }
  if (source && to == "-") return stream_to_stdout("cp", made, *source);
  if (!source && !target) return fail("cp", from + " " + to, "one of SOURCE and TARGET must be s3://BUCKET[/KEY]");
  if (source && source->key.empty() && !o.recursive) return fail("cp", from, "a bucket needs -r");

  s3::client& client = *made.client;
  std::vector<job_item> items;
  std::vector<std::string> failures;
  if (!source) {  // local → S3
    if (is_dir(from)) {
      if (!o.recursive) return fail("cp", from, "is a directory (use -r)");
      const std::string prefix = directory_prefix(target->key);
      for (local_entry& e : walk_local(from, o, failures)) {
        items.push_back({job_item::kind::upload, e.path, {}, {target->bucket, prefix + e.relative}, e.size, {}, {}});
      }
    } else {
      std::error_code ec;
      const std::uint64_t size = fs::file_size(from, ec);
      if (target->key.empty() || target->key.ends_with('/')) target->key += base_name(from);
      items.push_back({job_item::kind::upload, from, {}, *target, ec ? 0 : size, {}, {}});
    }
  } else if (!o.recursive) {  // one object: to a file, a directory or another key
    sluice::error_code ec;
    const sluice::object_info info = head_explained(client, *source, ec);
    if (ec) return fail("cp", printable_key(from), describe(ec, made.config));
    if (target) {
      if (target->key.empty() || target->key.ends_with('/')) target->key += base_name(source->key);
      items.push_back({job_item::kind::copy, {}, *source, *target, info.size, info.attributes.etag, {}});
    } else {
      std::string local = to;
      if (is_dir(local) || local.ends_with('/')) {
        std::string why;
        const auto inside = local_target(local, base_name(source->key), why);
        if (!inside) return fail("cp", printable_key(from), why.empty() ? "the key names a folder" : why);
        local = *inside;
      }
      items.push_back(
          {job_item::kind::download, local, *source, {}, info.size, info.attributes.etag, info.last_modified});
    }
  } else {  // every object under a prefix
    const std::string prefix = directory_prefix(source->key);
    sluice::error_code ec;
    const auto objects = list_remote(client, source->bucket, prefix, ec);
    if (ec) return fail("cp", printable_key(from), describe(ec, made.config));
    for (const sluice::object_info& object : objects) {
      const std::string relative = object.key.substr(prefix.size());
      if (!selected(o, relative)) continue;
      const s3_url key{source->bucket, object.key};
      if (target) {
        items.push_back({job_item::kind::copy,
                         {},
                         key,
                         {target->bucket, directory_prefix(target->key) + relative},
                         object.size,
                         object.attributes.etag,
                         {}});
        continue;
      }
      std::string why;
      const auto local = local_target(to, relative, why);
      if (!local) {
        if (!why.empty()) failures.push_back(printable_key(url_text(key)) + ": " + why);
        continue;
      }
      items.push_back(
          {job_item::kind::download, *local, key, {}, object.size, object.attributes.etag, object.last_modified});
    }
  }
  return run_job(client, std::move(items), job_options_of(o, "cp"), std::move(failures));
}

int cat_command(const client_options& o, made_client& made) {
  for (const std::string& path : o.paths) {
    const auto url = parse_s3(path);
    if (const int code = stream_to_stdout("cat", made, *url); code != 0) return code;
  }
  return 0;
}

int rm_command(const client_options& o, made_client& made) {
  s3::client& client = *made.client;
  if (!o.recursive) {
    int code = 0;
    for (const std::string& path : o.paths) {
      const auto url = parse_s3(path);
      sluice::error_code ec;
      if (o.dry_run) {
        std::printf("(dry run) delete %s\n", printable_key(path).c_str());
        continue;
      }
      client.delete_object(url->bucket, url->key, ec);
      if (ec) {
        code = fail("rm", printable_key(path), describe(ec, made.config));
      } else {
        std::printf("delete: %s\n", printable_key(path).c_str());
      }
    }
    return code;
  }
  std::vector<job_item> items;
  std::vector<std::string> failures;
  for (const std::string& path : o.paths) {
    const auto url = parse_s3(path);
    const std::string prefix = directory_prefix(url->key);
    sluice::error_code ec;
    const auto objects = list_remote(client, url->bucket, prefix, ec);
    if (ec) failures.push_back(printable_key(path) + ": " + describe(ec, made.config));
    for (const sluice::object_info& object : objects) {
      if (!selected(o, object.key.substr(prefix.size()))) continue;
      items.push_back({job_item::kind::remove, {}, {}, {url->bucket, object.key}, 0, {}, {}});
    }
  }
  return run_job(client, std::move(items), job_options_of(o, "rm"), std::move(failures));
}

int rb_command(const client_options& o, made_client& made) {
  s3::client& client = *made.client;
  int code = 0;
  for (const std::string& path : o.paths) {
    const auto url = parse_s3(path);
    if (o.force) {
      client_options all = o;
      all.paths = {path};
      all.recursive = true;
      all.include.clear();
      all.exclude.clear();
      all.json = false;
      if (const int removed = rm_command(all, made); removed != 0) {
        code = removed;
        continue;
      }
    }
    sluice::error_code ec;
    client.delete_bucket(url->bucket, ec);
    if (ec) {
      code = fail("rb", path, describe(ec, made.config));
    } else {
      std::printf("remove_bucket: %s\n", path.c_str());
    }
  }
  return code;
}

}  // namespace sluice::cli
