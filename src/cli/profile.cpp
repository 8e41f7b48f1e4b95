// SPDX-License-Identifier: Apache-2.0
// The AWS shared configuration files as users keep them (client_common.hpp): a profile's keys
// from ~/.aws/credentials, its region and endpoint_url from ~/.aws/config. INI as the AWS CLI
// reads it: [NAME] sections in credentials, [profile NAME] (or [default]) in config, "key = value"
// lines, # and ; comments; nested sections (s3 = ...) are skipped.
#include "client_common.hpp"

#include <cstdlib>
#include <fstream>
#include <map>

namespace sluice::cli {

namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read before any thread starts
  return value != nullptr ? std::string(value) : std::string();
}

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r");
  return std::string(text.substr(first, last - first + 1));
}

// The settings of section `wanted` in the INI file `path` (empty map when absent); `found` set
// when the section is there.
std::map<std::string, std::string> read_section(const std::string& path, const std::string& wanted, bool& found) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    const std::string text = trim(line);
    if (text.empty() || text.front() == '#' || text.front() == ';') continue;
    if (text.front() == '[' && text.back() == ']') {
      inside = trim(std::string_view(text).substr(1, text.size() - 2)) == wanted;
      found = found || inside;
      continue;
    }
    if (!inside || line.front() == ' ' || line.front() == '\t') continue;  // a nested setting
    const auto equals = text.find('=');
    if (equals == std::string::npos) continue;
    out[trim(std::string_view(text).substr(0, equals))] = trim(std::string_view(text).substr(equals + 1));
  }
  return out;
}

std::string home_file(const char* variable, const char* name) {
  if (std::string set = env(variable); !set.empty()) return set;
  const std::string home = env("HOME");
  return home.empty() ? std::string() : home + "/.aws/" + name;
}

}  // namespace

aws_profile read_aws_profile(const std::string& name) {
  aws_profile out;
  out.name = name;
  out.named = !name.empty();
  if (out.name.empty()) {
    out.name = env("AWS_PROFILE");
    out.named = !out.name.empty();
  }
  if (out.name.empty()) out.name = "default";
  bool found = false;
  const auto credentials = read_section(home_file("AWS_SHARED_CREDENTIALS_FILE", "credentials"), out.name, found);
  const auto config = read_section(home_file("AWS_CONFIG_FILE", "config"),
                                   out.name == "default" ? "default" : "profile " + out.name, found);
  out.found = found;
  const auto pick = [&](const char* key) {
    if (const auto it = credentials.find(key); it != credentials.end()) return it->second;
    if (const auto it = config.find(key); it != config.end()) return it->second;
    return std::string();
  };
  out.access_key = pick("aws_access_key_id");
  out.secret_key = pick("aws_secret_access_key");
  out.region = pick("region");
  out.endpoint_url = pick("endpoint_url");
  return out;
}

}  // namespace sluice::cli
