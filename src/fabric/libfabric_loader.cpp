// SPDX-License-Identifier: Apache-2.0
// libfabric_available (include/sluice/fabric/domain.hpp) and, in a build with SLUICE_DLOPEN_FABRIC
// (the default), libfabric loaded with dlopen when the first endpoint opens rather than by the
// dynamic linker at start: Debian's libfabric.so.1 pulls in libpsm_infinipath and libpsm2, whose
// constructors sleep ~200 ms, which a program that never opens a fabric (`sluice --help`, `ls`,
// an HTTP `get`) should not pay. Most of libfabric's API is inline in its headers, calling
// through the ops tables of objects the provider made; the few exported functions sluice calls
// are defined here and forwarded to libfabric.so.1's. A command that adds a call to another
// exported function gets an undefined reference when linking: add it to `entry_points`.
#include <sluice/fabric/domain.hpp>

#if SLUICE_DLOPEN_FABRIC
#include <rdma/fi_errno.h>

#include <dlfcn.h>

#include <new>
#include <string>
#include <utility>
#endif

namespace sluice::fabric {

#if SLUICE_DLOPEN_FABRIC
namespace {

/// libfabric.so.1 and the entry points sluice calls, resolved once (a function-local static);
/// `error` says why not when any is missing (then none is used).
struct libfabric_library {
  decltype(&::fi_getinfo) getinfo = nullptr;
  decltype(&::fi_freeinfo) freeinfo = nullptr;
  decltype(&::fi_dupinfo) dupinfo = nullptr;
  decltype(&::fi_fabric) fabric = nullptr;
  decltype(&::fi_strerror) strerror = nullptr;
  std::string error;
};

template <class Fn>
bool resolve(void* handle, const char* name, Fn& fn, std::string& error) {
  // dlsym of a handle: libfabric's own default version of the symbol, not this file's.
  fn = reinterpret_cast<Fn>(::dlsym(handle, name));  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
  if (fn == nullptr) error = std::string("libfabric.so.1 does not export ") + name;
  return fn != nullptr;
}

libfabric_library load_libfabric() {
  libfabric_library lib;
  // Never closed: providers and progress threads may outlive any one endpoint.
  void* handle = ::dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();  // NOLINT(concurrency-mt-unsafe): glibc keeps it per thread
    lib.error = why != nullptr ? why : "libfabric.so.1: cannot be loaded";
    return lib;
  }
  if (!(resolve(handle, "fi_getinfo", lib.getinfo, lib.error) &&
        resolve(handle, "fi_freeinfo", lib.freeinfo, lib.error) &&
        resolve(handle, "fi_dupinfo", lib.dupinfo, lib.error) && resolve(handle, "fi_fabric", lib.fabric, lib.error) &&
        resolve(handle, "fi_strerror", lib.strerror, lib.error))) {
    return libfabric_library{.error = std::move(lib.error)};  // all or none
  }
  return lib;
}

const libfabric_library& libfabric() {
  static const libfabric_library lib = load_libfabric();
  return lib;
}

}  // namespace

bool libfabric_available(error_code& ec) noexcept {
  try {
    ec = libfabric().error.empty() ? error_code{} : error_code(errc::unavailable);
  } catch (const std::bad_alloc&) {
    ec = make_error_code(boost::system::errc::not_enough_memory);
  }
  return !ec;
}

std::string libfabric_unavailable_reason() { return libfabric().error; }

#else  // linked with libfabric: the dynamic linker loaded it with the program

bool libfabric_available(error_code& ec) noexcept {
  ec = {};
  return true;
}

std::string libfabric_unavailable_reason() { return {}; }

#endif

}  // namespace sluice::fabric

#if SLUICE_DLOPEN_FABRIC
// The entry points, with libfabric's signatures (rdma/fabric.h, rdma/fi_errno.h). Endpoints call
// libfabric_available first, so only fi_strerror (an error_code's message) and fi_freeinfo (of
// nothing) can be reached without the library.
extern "C" {

int fi_getinfo(uint32_t version, const char* node, const char* service, uint64_t flags, const struct fi_info* hints,
               struct fi_info** info) {
  const auto& lib = sluice::fabric::libfabric();
  return lib.getinfo != nullptr ? lib.getinfo(version, node, service, flags, hints, info) : -FI_ENOSYS;
}

void fi_freeinfo(struct fi_info* info) {
  const auto& lib = sluice::fabric::libfabric();
  if (info != nullptr && lib.freeinfo != nullptr) lib.freeinfo(info);
}

struct fi_info* fi_dupinfo(const struct fi_info* info) {
  const auto& lib = sluice::fabric::libfabric();
  return lib.dupinfo != nullptr ? lib.dupinfo(info) : nullptr;
}

int fi_fabric(struct fi_fabric_attr* attr, struct fid_fabric** fabric, void* context) {
  const auto& lib = sluice::fabric::libfabric();
  return lib.fabric != nullptr ? lib.fabric(attr, fabric, context) : -FI_ENOSYS;
}

const char* fi_strerror(int errnum) {
  const auto& lib = sluice::fabric::libfabric();
  return lib.strerror != nullptr ? lib.strerror(errnum) : "libfabric error (libfabric.so.1 is not loaded)";
}

}  // extern "C"
#endif
