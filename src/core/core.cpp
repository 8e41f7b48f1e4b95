// Compiled part of sluice::core: configuration validation and the JSON loader (simdjson).
#include <sluice/config.hpp>

#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

namespace sluice {

namespace {

std::optional<config_error> out_of_range(std::string field, std::string reason) {
  return config_error{std::move(field), std::move(reason)};
}

// A field's JSON path relative to its section, made absolute by the caller.
std::optional<config_error> prefixed(std::optional<config_error> error, std::string_view section) {
  if (error) error->field = std::string(section) + "." + error->field;
  return error;
}

}  // namespace

std::optional<config_error> transfer_config::validate() const {
  if (part_size < 4 * kib || part_size > 5 * gib) {
    return out_of_range("part_size", "must be between 4 KiB and 5 GiB");
  }
  if (parts_in_flight < 1 || parts_in_flight > 256) {
    return out_of_range("parts_in_flight", "must be between 1 and 256");
  }
  if (staging_bytes < part_size) {
    return out_of_range("staging_bytes", "must hold at least one part (part_size bytes)");
  }
  return std::nullopt;
}

std::optional<config_error> memory_store_config::validate() const {
  if (max_bytes == 0) return out_of_range("max_bytes", "must be greater than 0");
  if (max_object_bytes == 0) return out_of_range("max_object_bytes", "must be greater than 0");
  if (max_object_bytes > max_bytes) return out_of_range("max_object_bytes", "must not exceed max_bytes");
  return std::nullopt;
}

std::optional<config_error> config::validate() const {
  if (auto e = prefixed(transfer.validate(), "transfer")) return e;
  if (auto e = prefixed(memory_store.validate(), "memory_store")) return e;
  return std::nullopt;
}

std::optional<std::uint64_t> parse_size(std::string_view text) noexcept {
  std::uint64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc{} || ptr == first) return std::nullopt;
  std::string_view unit(ptr, static_cast<std::size_t>(last - ptr));
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  std::uint64_t scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else {
    const char head = static_cast<char>(std::toupper(static_cast<unsigned char>(unit.front())));
    const std::string_view tail = unit.substr(1);
    if (tail != "" && tail != "iB" && tail != "B") return std::nullopt;
    switch (head) {
      case 'K': scale = kib; break;
      case 'M': scale = mib; break;
      case 'G': scale = gib; break;
      case 'T': scale = 1024 * gib; break;
      default: return std::nullopt;
    }
  }
  if (value > std::numeric_limits<std::uint64_t>::max() / scale) return std::nullopt;
  return value * scale;
}

namespace {

using simdjson::dom::element;
using simdjson::dom::object;

// One section's fields: name → reader that stores the value or returns the reason it cannot.
using field_reader = std::function<std::optional<std::string>(element)>;
using field_table = std::vector<std::pair<std::string_view, field_reader>>;

field_reader size_field(std::uint64_t& target) {
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

field_reader count_field(std::uint32_t& target) {
  return [&target](element value) -> std::optional<std::string> {
    if (!value.is_uint64()) return "expected a non-negative integer";
    const std::uint64_t v = value.get_uint64().value_unsafe();
    if (v > std::numeric_limits<std::uint32_t>::max()) return "too large";
    target = static_cast<std::uint32_t>(v);
    return std::nullopt;
  };
}

// Reads the members of `section` through `fields`; unknown names are errors.
std::optional<config_error> read_section(element section, std::string_view path, const field_table& fields) {
  object members;
  if (section.get(members) != simdjson::SUCCESS) return config_error{std::string(path), "expected an object"};
  for (auto member : members) {
    // Named copies, not structured bindings: lambdas capture them (clang 14 cannot capture bindings).
    const std::string_view key = member.key;
    const element value = member.value;
    const std::string field = std::string(path) + "." + std::string(key);
    auto it = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.first == key; });
    if (it == fields.end()) return config_error{field, "unknown field"};
    if (auto reason = it->second(value)) return config_error{field, *reason};
  }
  return std::nullopt;
}

}  // namespace

config parse_config(std::string_view json, error_code& ec, config_error& error) {
  config result;
  auto fail = [&](config_error e) {
    error = std::move(e);
    ec = errc::invalid_config;
    return config{};
  };
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  element root;
  if (auto err = parser.parse(padded).get(root); err != simdjson::SUCCESS) {
    return fail({"", std::string("malformed JSON: ") + simdjson::error_message(err)});
  }
  object top;
  if (root.get(top) != simdjson::SUCCESS) return fail({"", "the configuration must be a JSON object"});

  const std::vector<std::pair<std::string_view, field_table>> sections{
      {"transfer",
       {{"part_size", size_field(result.transfer.part_size)},
        {"parts_in_flight", count_field(result.transfer.parts_in_flight)},
        {"staging_bytes", size_field(result.transfer.staging_bytes)}}},
      {"memory_store",
       {{"max_bytes", size_field(result.memory_store.max_bytes)},
        {"max_object_bytes", size_field(result.memory_store.max_object_bytes)}}},
  };
  for (auto member : top) {
    const std::string_view key = member.key;
    const element value = member.value;
    auto it = std::find_if(sections.begin(), sections.end(), [&](const auto& s) { return s.first == key; });
    if (it == sections.end()) return fail({std::string(key), "unknown section"});
    if (auto e = read_section(value, key, it->second)) return fail(std::move(*e));
  }
  if (auto e = result.validate()) return fail(std::move(*e));
  ec = {};
  error = {};
  return result;
}

config parse_config(std::string_view json) {
  error_code ec;
  config_error error;
  config result = parse_config(json, ec, error);
  if (ec) throw std::invalid_argument(error.message());
  return result;
}

config load_config(const std::filesystem::path& file, error_code& ec, config_error& error) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    error = {file.string(), "cannot open the file"};
    ec = errc::invalid_config;
    return {};
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), ec, error);
}

}  // namespace sluice
