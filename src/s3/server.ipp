// The S3 server, compiled once for the two shipped stores; included by src/s3/s3.cpp.
#include <sluice/memory_store.hpp>
#include <sluice/s3/fs_store.hpp>
#include <sluice/s3/server_impl.hpp>

namespace sluice::s3 {

std::optional<config_error> server_config::validate() const {
  if (users.empty() && !allow_anonymous) return config_error{"users", "at least one user, or allow_anonymous"};
  for (const auto& u : users) {
    if (u.access_key_id.empty() || u.secret_access_key.empty()) {
      return config_error{"users", "every user needs an access key id and a secret"};
    }
  }
  if (max_header_bytes < 1024) return config_error{"max_header_bytes", "must be at least 1 KiB"};
  if (max_connections == 0) return config_error{"max_connections", "must be at least 1"};
  if (io_threads == 0) return config_error{"io_threads", "must be at least 1"};
  if (read_timeout.count() <= 0 || idle_timeout.count() <= 0) return config_error{"read_timeout", "timeouts must be positive"};
  if (max_object_bytes == 0) return config_error{"max_object_bytes", "must be greater than 0"};
  return std::nullopt;
}

template class server<fs_store>;
template class server<memory_store>;

}  // namespace sluice::s3
