// SPDX-License-Identifier: Apache-2.0
// complete_upload(..., ec, precondition) checks the precondition at publish; a multipart store
// whose complete_upload has no precondition leaves the check to the server.
#include <sluice/memory_store.hpp>

struct candidate : sluice::memory_store {
  // Hides memory_store's complete_upload, which takes a precondition.
  sluice::object_info complete_upload(const sluice::object_ref& obj, std::string_view upload_id,
                                      std::span<const sluice::part_info> chosen, const sluice::object_attributes& attrs,
                                      sluice::error_code& ec) {
    return memory_store::complete_upload(obj, upload_id, chosen, attrs, ec);
  }
#ifdef SLUICE_CF_CONTROL
  sluice::object_info complete_upload(const sluice::object_ref& obj, std::string_view upload_id,
                                      std::span<const sluice::part_info> chosen, const sluice::object_attributes& attrs,
                                      sluice::error_code& ec, const sluice::write_precondition& precondition) {
    return memory_store::complete_upload(obj, upload_id, chosen, attrs, ec, precondition);
  }
#endif
};

static_assert(sluice::servable_store<candidate>);
static_assert(sluice::conditional_upload_store<candidate>);

int main() {}
