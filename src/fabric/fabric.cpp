// Compiled part of sluice::fabric.
#include <sluice/fabric/error.hpp>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <string>

namespace sluice::fabric {

namespace {

class fabric_category_impl final : public boost::system::error_category {
 public:
  [[nodiscard]] const char* name() const noexcept override { return "fabric"; }
  [[nodiscard]] std::string message(int value) const override { return fi_strerror(value); }
};

}  // namespace

const boost::system::error_category& fabric_category() noexcept {
  static const fabric_category_impl category;
  return category;
}

}  // namespace sluice::fabric
