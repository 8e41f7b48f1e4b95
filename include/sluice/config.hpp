// SPDX-License-Identifier: Apache-2.0
// Typed configuration: plain structs with defaults, validated before use, and a JSON loader
// that maps a config file onto them and names the field and the reason on bad input.
// The library never reads environment variables; the CLI builds these structs.
#pragma once

#include <sluice/error.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

inline constexpr std::uint64_t kib = 1024;
inline constexpr std::uint64_t mib = 1024 * kib;
inline constexpr std::uint64_t gib = 1024 * mib;

/// Where a configuration went wrong: the field's JSON path ("transfer.part_size") and why.
struct config_error {
  std::string field;
  std::string reason;
  /// "field: reason", for messages.
  [[nodiscard]] std::string message() const { return field.empty() ? reason : field + ": " + reason; }
};

/// How a client path splits and pipelines large transfers.
struct transfer_config {
  std::uint64_t part_size = 8 * mib;       ///< bytes per part (each part is one request)
  std::uint32_t parts_in_flight = 4;       ///< parts moving at once
  std::uint64_t staging_bytes = 64 * mib;  ///< bound on pinned/registered staging memory

  /// Valid when part_size is 4 KiB..5 GiB, parts_in_flight 1..256 and the staging bound
  /// holds at least one part.
  [[nodiscard]] std::optional<config_error> validate() const;
};

/// Bounds of the in-memory object store.
struct memory_store_config {
  std::uint64_t max_bytes = 1 * gib;         ///< all objects plus uploads in progress
  std::uint64_t max_object_bytes = 1 * gib;  ///< one object

  /// Valid when both are non-zero and one object fits in the whole.
  [[nodiscard]] std::optional<config_error> validate() const;
};

/// The root of a sluice configuration file; later tiers add their sections here.
struct config {
  transfer_config transfer;
  memory_store_config memory_store;

  /// Validates every section; the first error names its full field path.
  [[nodiscard]] std::optional<config_error> validate() const;
};

/// Parses and validates a JSON configuration. Fields left out keep their defaults; unknown
/// fields, wrong types, out-of-range values and malformed JSON are errors (errc::invalid_config
/// in `ec`, the field and reason in `error`). Sizes are integers (bytes) or strings with a
/// unit: "8 MiB", "512KiB", "1GiB", "4096".
[[nodiscard]] config parse_config(std::string_view json, error_code& ec, config_error& error);

/// parse_config that throws std::invalid_argument with "field: reason".
[[nodiscard]] config parse_config(std::string_view json);

/// The most bytes a configuration file may hold (read_config_file).
inline constexpr std::uint64_t max_config_file_bytes = 1 * mib;

/// The text of the configuration file `file`: a regular file (symbolic links followed) of at most
/// max_config_file_bytes. A FIFO, device, socket or directory is refused without blocking or
/// reading it (a FIFO would stall the reader until a writer came, /dev/zero never ends); an
/// unreadable, non-regular or larger file is errc::invalid_config in `ec` with the path as
/// `error.field` and why as `error.reason`.
[[nodiscard]] std::string read_config_file(const std::filesystem::path& file, error_code& ec, config_error& error);

/// Reads a file with read_config_file and parses it; an unreadable file is an error with the path
/// as field.
[[nodiscard]] config load_config(const std::filesystem::path& file, error_code& ec, config_error& error);

/// Parses a size: an integer number of bytes, optionally followed by B, KiB, MiB, GiB, TiB
/// (also K/M/G/T, KB/MB/GB/TB as binary units), spaces allowed before the unit.
[[nodiscard]] std::optional<std::uint64_t> parse_size(std::string_view text) noexcept;

}  // namespace sluice
