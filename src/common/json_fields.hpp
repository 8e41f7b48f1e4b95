// SPDX-License-Identifier: Apache-2.0
// The one configuration loader: a JSON object's members read through a table of named fields
// (simdjson's DOM). The core's parse_config, the server's parse_server_config and the gateway's
// parse_gateway_config are each a table of these. Internal (src/common/), never installed.
#pragma once

#include <sluice/config.hpp>

#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::detail::json {

using element = simdjson::dom::element;

/// Stores a member's value, or says why it cannot ("expected ...").
using field_reader = std::function<std::optional<std::string>(element)>;
/// A section's fields by name. A name read elsewhere maps to an empty reader (skipped).
using field_table = std::vector<std::pair<std::string_view, field_reader>>;

/// Parses `json` into `root` (kept by `parser`), or says why not.
inline std::optional<config_error> parse(simdjson::dom::parser& parser, std::string_view json, element& root) {
  if (auto err = parser.parse(simdjson::padded_string(json)).get(root); err != simdjson::SUCCESS) {
    return config_error{"", std::string("malformed JSON: ") + simdjson::error_message(err)};
  }
  return std::nullopt;
}

/// Reads the members of `section` through `fields`; a name not in the table is an error, named
/// `prefix` + name ("gateway." + "cache_bytes").
inline std::optional<config_error> read_fields(element section, const std::string& prefix, const field_table& fields) {
  simdjson::dom::object members;
  if (section.get(members) != simdjson::SUCCESS) {
    return config_error{prefix.empty() ? std::string() : prefix.substr(0, prefix.size() - 1), "expected an object"};
  }
  for (auto member : members) {
    // Named copies, not structured bindings: lambdas capture them (clang 14 cannot capture bindings).
    const std::string_view key = member.key;
    const element value = member.value;
    auto it = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.first == key; });
    if (it == fields.end()) return config_error{prefix + std::string(key), "unknown field"};
    if (!it->second) continue;
    if (auto reason = it->second(value)) return config_error{prefix + std::string(key), std::move(*reason)};
  }
  return std::nullopt;
}

/// A number of bytes: an integer, or a string such as "512 KiB" (parse_size).
inline field_reader size_field(std::uint64_t& target) {
  return [&target](element value) -> std::optional<std::string> {
    if (value.is_uint64()) {
      target = value.get_uint64().value_unsafe();
      return std::nullopt;
    }
    if (value.is_string()) {
      if (auto parsed = parse_size(value.get_string().value_unsafe())) {
        target = *parsed;
        return std::nullopt;
      }
      return "expected a size such as 4096, \"512 KiB\" or \"8 MiB\"";
    }
    return "expected a non-negative integer or a size string";
  };
}

/// An integer in [least, most].
template <class Integer>
field_reader count_field(Integer& target, std::uint64_t least = 0,
                         std::uint64_t most = std::numeric_limits<Integer>::max()) {
  return [&target, least, most](element value) -> std::optional<std::string> {
    if (!value.is_uint64()) return "expected a non-negative integer";
    const std::uint64_t v = value.get_uint64().value_unsafe();
    if (v < least || v > most) return "expected " + std::to_string(least) + ".." + std::to_string(most);
    target = static_cast<Integer>(v);
    return std::nullopt;
  };
}

/// Whole seconds in [least, most] (at most a year by default).
inline field_reader seconds_field(std::chrono::seconds& target, std::uint64_t least = 0,
                                  std::uint64_t most = 366ULL * 24 * 3600) {
  return [&target, least, most](element value) -> std::optional<std::string> {
    if (!value.is_uint64()) return "expected a whole number of seconds";
    const std::uint64_t v = value.get_uint64().value_unsafe();
    if (v < least || v > most) return "expected " + std::to_string(least) + ".." + std::to_string(most) + " seconds";
    target = std::chrono::seconds(v);
    return std::nullopt;
  };
}

inline field_reader string_field(std::string& target) {
  return [&target](element value) -> std::optional<std::string> {
    if (!value.is_string()) return "expected a string";
    target = std::string(value.get_string().value_unsafe());
    return std::nullopt;
  };
}

inline field_reader flag_field(bool& target) {
  return [&target](element value) -> std::optional<std::string> {
    if (!value.is_bool()) return "expected true or false";
    target = value.get_bool().value_unsafe();
    return std::nullopt;
  };
}

/// A string read by `take`, which stores it or says why it cannot.
inline field_reader text_field(std::function<std::optional<std::string>(std::string_view)> take) {
  return [take = std::move(take)](element value) -> std::optional<std::string> {
    if (!value.is_string()) return "expected a string";
    return take(value.get_string().value_unsafe());
  };
}

/// One of the strings in `choices`, stored as its value.
template <class Value>
field_reader choice_field(Value& target, std::vector<std::pair<std::string_view, Value>> choices) {
  return [&target, choices = std::move(choices)](element value) -> std::optional<std::string> {
    if (value.is_string()) {
      const std::string_view text = value.get_string().value_unsafe();
      for (const auto& [name, v] : choices) {
        if (name == text) {
          target = v;
          return std::nullopt;
        }
      }
    }
    std::string expected = "expected";
    for (std::size_t i = 0; i < choices.size(); ++i) {
      expected += (i == 0 ? " \"" : i + 1 == choices.size() ? " or \"" : ", \"") + std::string(choices[i].first) + "\"";
    }
    return expected;
  };
}

}  // namespace sluice::detail::json
