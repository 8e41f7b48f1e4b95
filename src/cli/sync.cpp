// SPDX-License-Identifier: Apache-2.0
// `sluice sync SOURCE TARGET`: copies what is missing or different on the target, as `aws s3 sync`
// decides it: a different size, or a source newer than the target (a file's mtime against an
// object's LastModified, in whole seconds; a download sets the file's mtime to LastModified), or
// between two prefixes a different ETag (a copy of a multipart source, whose ETag is the MD5 of
// its bytes, by its time); --size-only compares sizes alone. --delete removes what the source
// does not have; --dry-run prints the plan.
#include "plan.hpp"

#include <sluice/s3/error.hpp>

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

namespace sluice::cli {

namespace {

namespace fs = std::filesystem;

std::chrono::seconds whole_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::floor<std::chrono::seconds>(t.time_since_epoch());
}

int fail(const std::string& what, const std::string& why) {
  std::fprintf(stderr, "sluice sync: %s: %s\n", what.c_str(), why.c_str());
  return 1;
}

std::map<std::string, sluice::object_info> by_relative_key(const std::vector<sluice::object_info>& objects,
                                                           const std::string& prefix, const client_options& o) {
  std::map<std::string, sluice::object_info> out;
  for (const auto& object : objects) {
    std::string relative = object.key.substr(prefix.size());
    if (!relative.empty() && !relative.ends_with('/') && selected(o, relative))
      out.emplace(std::move(relative), object);
  }
  return out;
}

// Local directory → prefix.
void plan_upload(const client_options& o, const std::vector<local_entry>& files,
                 const std::map<std::string, sluice::object_info>& remote, const s3_url& target,
                 std::vector<job_item>& items) {
  const std::string prefix = directory_prefix(target.key);
  std::set<std::string> seen;
  for (const local_entry& e : files) {
    seen.insert(e.relative);
    const auto there = remote.find(e.relative);
    const bool same = there != remote.end() && there->second.size == e.size &&
                      (o.size_only || whole_seconds(e.modified) <= whole_seconds(there->second.last_modified));
    if (!same)
      items.push_back({job_item::kind::upload, e.path, {}, {target.bucket, prefix + e.relative}, e.size, {}, {}});
  }
  if (!o.delete_extra) return;
  for (const auto& [relative, object] : remote) {
    if (!seen.contains(relative))
      items.push_back({job_item::kind::remove, {}, {}, {target.bucket, object.key}, 0, {}, {}});
  }
}

// Prefix → local directory.
void plan_download(const client_options& o, const std::map<std::string, sluice::object_info>& remote,
                   const s3_url& source, const std::string& root, std::vector<job_item>& items,
                   std::vector<std::string>& failures) {
  std::set<std::string> wanted;
  for (const auto& [relative, object] : remote) {
    std::string why;
    const auto local = local_target(root, relative, why);
    const s3_url key{source.bucket, object.key};
    if (!local) {
      if (!why.empty()) failures.push_back(printable_key(url_text(key)) + ": " + why);
      continue;
    }
    wanted.insert(relative);
    std::error_code ec;
    const auto status = fs::status(*local, ec);
    bool same = false;
    if (!ec && fs::is_regular_file(status)) {
      const auto size = fs::file_size(*local, ec);
      const auto modified = to_system(fs::last_write_time(*local, ec));
      same =
          !ec && size == object.size && (o.size_only || whole_seconds(object.last_modified) <= whole_seconds(modified));
    }
    if (!same) {
      items.push_back(
          {job_item::kind::download, *local, key, {}, object.size, object.attributes.etag, object.last_modified});
    }
  }
  if (!o.delete_extra) return;
  std::vector<std::string> ignored;
  for (const local_entry& e : walk_local(root, o, ignored)) {
    if (!wanted.contains(e.relative)) items.push_back({job_item::kind::remove_local, e.path, {}, {}, 0, {}, {}});
  }
}

// Whether `target` can be a server-side copy of `source` whose ETag differs only in kind: a
// CopyObject gives a multipart source ("…-N") the MD5 of its bytes. Then its time decides, as
// between a file and an object: a copy made after the source's last change is current.
bool copied_from(const sluice::object_info& target, const sluice::object_info& source) {
  const auto multipart = [](const std::string& etag) { return etag.find('-') != std::string::npos; };
  return multipart(source.attributes.etag) && !multipart(target.attributes.etag) &&
         whole_seconds(target.last_modified) >= whole_seconds(source.last_modified);
}

// Prefix → prefix.
void plan_copy(const client_options& o, const std::map<std::string, sluice::object_info>& from,
               const std::map<std::string, sluice::object_info>& to, const s3_url& source, const s3_url& target,
               std::vector<job_item>& items) {
  const std::string prefix = directory_prefix(target.key);
  for (const auto& [relative, object] : from) {
    const auto there = to.find(relative);
    const bool same =
        there != to.end() && there->second.size == object.size &&
        (o.size_only || there->second.attributes.etag == object.attributes.etag || copied_from(there->second, object));
    if (!same) {
      items.push_back({job_item::kind::copy,
                       {},
                       {source.bucket, object.key},
                       {target.bucket, prefix + relative},
                       object.size,
                       object.attributes.etag,
                       {}});
    }
  }
  if (!o.delete_extra) return;
  for (const auto& [relative, object] : to) {
    if (!from.contains(relative))
      items.push_back({job_item::kind::remove, {}, {}, {target.bucket, object.key}, 0, {}, {}});
  }
}

}  // namespace

int sync_command(const client_options& o, made_client& made) {
  const std::string& from = o.paths.at(0);
  const std::string& to = o.paths.at(1);
  const auto source = parse_s3(from);
  const auto target = parse_s3(to);
  if (!source && !target) return fail(from + " " + to, "one of SOURCE and TARGET must be s3://BUCKET[/PREFIX]");
  s3::client& client = *made.client;
  std::vector<job_item> items;
  std::vector<std::string> failures;
  sluice::error_code ec;
  const auto remote_of = [&](const s3_url& url) {
    const std::string prefix = directory_prefix(url.key);
    return by_relative_key(list_remote(client, url.bucket, prefix, ec), prefix, o);
  };
  if (!source) {
    std::error_code dir_ec;
    if (!fs::is_directory(from, dir_ec)) return fail(from, "is not a directory");
    const auto files = walk_local(from, o, failures);
    const auto remote = remote_of(*target);
    if (ec) return fail(printable_key(to), describe(ec, made.config));
    plan_upload(o, files, remote, *target, items);
  } else if (!target) {
    const auto remote = remote_of(*source);
    if (ec) return fail(printable_key(from), describe(ec, made.config));
    plan_download(o, remote, *source, to, items, failures);
  } else {
    const auto left = remote_of(*source);
    if (ec) return fail(printable_key(from), describe(ec, made.config));
    const auto right = remote_of(*target);
    if (ec) return fail(printable_key(to), describe(ec, made.config));
    plan_copy(o, left, right, *source, *target, items);
  }
  return run_job(client, std::move(items), job_options_of(o, "sync"), std::move(failures));
}

}  // namespace sluice::cli
