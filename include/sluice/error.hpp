// SPDX-License-Identifier: Apache-2.0
// Error values for everything sluice reports itself. Other origins (S3, libfabric,
// CUDA) have categories of their own in their tiers; all are boost::system::error_code,
// which converts to std::error_code.
#pragma once

#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#include <string>
#include <type_traits>

namespace sluice {

/// The error type of every sluice API (Asio's, so completion handlers need no conversion).
using error_code = boost::system::error_code;
/// Thrown by the throwing overloads of blocking calls.
using system_error = boost::system::system_error;

/// What an error means to a caller, whichever tier raised it: compare any error_code with these
/// (`ec == sluice::condition::not_found`). Each tier's category maps its own values here: the
/// core's errc, s3::errc (NoSuchKey is not_found, RDMANotSupported declined) and every
/// libfabric error (fabric_failed).
enum class condition : int {
  not_found = 1,  ///< the bucket, object or multipart upload does not exist
  declined,       ///< this path was declined or cannot use this memory; another path may serve it
  fabric_failed,  ///< the RDMA data plane failed: a libfabric error, or a transfer the server reported failed
};

namespace detail {

class condition_category_impl final : public boost::system::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "sluice.condition"; }
  [[nodiscard]] std::string message(int value) const override {
    switch (static_cast<condition>(value)) {
      case condition::not_found: return "not found";
      case condition::declined: return "path declined";
      case condition::fabric_failed: return "RDMA data plane failed";
    }
    return "unknown sluice condition";
  }
};

}  // namespace detail

/// The category of sluice::condition values; its name() is "sluice.condition".
inline const boost::system::error_category& condition_category() noexcept {
  static const detail::condition_category_impl category;
  return category;
}

/// Makes `condition` values comparable with any error_code.
inline boost::system::error_condition make_error_condition(condition c) noexcept {
  return {static_cast<int>(c), condition_category()};
}

/// Conditions that originate in sluice itself.
enum class errc : int {
  region_too_small = 1,  ///< the local region cannot hold (or does not hold) the bytes asked for
  bad_range,             ///< the byte range lies outside the object or remote descriptor
  no_such_bucket,        ///< the bucket does not exist
  no_such_object,        ///< the object does not exist
  bucket_exists,         ///< create_bucket on a bucket that exists
  bucket_not_empty,      ///< remove_bucket on a bucket that still holds objects
  invalid_name,          ///< a bucket name or key the store refuses
  unsupported_memory,    ///< the registrar or transport cannot use memory of this kind
  no_device,             ///< a GPU path was asked for on a host with no usable GPU
  declined,              ///< the peer declined this path; the caller may fall back
  invalid_config,        ///< a configuration value failed validation
  invalid_argument,      ///< an argument violates the documented preconditions
  capacity_exceeded,     ///< a configured memory or size bound would be exceeded
  protocol_violation,    ///< the other end broke the agreed protocol
  no_such_upload,        ///< the multipart upload does not exist (or was completed/aborted)
  invalid_part,          ///< a listed part was not uploaded, or its ETag does not match
  invalid_part_order,    ///< parts listed out of ascending order
  unavailable,           ///< a library or driver this path needs is not installed here (libcufile)
  precondition_failed,   ///< a conditional write found another version of the object (or none, or one)
};

namespace detail {

class sluice_category_impl final : public boost::system::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "sluice"; }
  [[nodiscard]] std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::region_too_small: return "memory region too small for the transfer";
      case errc::bad_range: return "byte range outside the object";
      case errc::no_such_bucket: return "no such bucket";
      case errc::no_such_object: return "no such object";
      case errc::bucket_exists: return "bucket already exists";
      case errc::bucket_not_empty: return "bucket not empty";
      case errc::invalid_name: return "invalid bucket name or object key";
      case errc::unsupported_memory: return "memory kind not supported here";
      case errc::no_device: return "no usable GPU device";
      case errc::declined: return "peer declined this path";
      case errc::invalid_config: return "invalid configuration";
      case errc::invalid_argument: return "invalid argument";
      case errc::capacity_exceeded: return "configured capacity exceeded";
      case errc::protocol_violation: return "protocol violation by peer";
      case errc::no_such_upload: return "no such multipart upload";
      case errc::invalid_part: return "invalid part";
      case errc::invalid_part_order: return "parts not in ascending order";
      case errc::unavailable: return "a library or driver this path needs is not available on this host";
      case errc::precondition_failed: return "the object's current version does not meet the write's precondition";
    }
    return "unknown sluice error";
  }
  [[nodiscard]] bool equivalent(int value, const boost::system::error_condition& cond) const noexcept override {
    if (cond.category() != condition_category()) return error_category::equivalent(value, cond);
    const auto e = static_cast<errc>(value);
    switch (static_cast<condition>(cond.value())) {
      case condition::not_found:
        return e == errc::no_such_bucket || e == errc::no_such_object || e == errc::no_such_upload;
      case condition::declined: return e == errc::declined || e == errc::unsupported_memory;
      case condition::fabric_failed: return false;
    }
    return false;
  }
};

}  // namespace detail

/// The category of sluice::errc values; its name() is "sluice".
inline const boost::system::error_category& sluice_category() noexcept {
  static const detail::sluice_category_impl category;
  return category;
}

/// Makes `errc` values usable wherever an error_code is expected.
inline error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), sluice_category()}; }

namespace detail {

/// Throws `system_error` when `ec` holds an error: the body of every throwing overload.
inline void throw_on_error(const error_code& ec, const char* what) {
  if (ec) throw system_error(ec, what);
}

}  // namespace detail
}  // namespace sluice

template <>
struct boost::system::is_error_code_enum<sluice::errc> : std::true_type {};
template <>
struct boost::system::is_error_condition_enum<sluice::condition> : std::true_type {};
