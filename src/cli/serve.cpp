// SPDX-License-Identifier: Apache-2.0
// `sluice serve`: an fs_store (or, with --upstream, a gateway_store) over S3 with the data planes this build and host
// have (libfabric, same-host grants, CUDA IPC), their counters in /metrics, users reloaded on SIGHUP.
#include "cli.hpp"

#include <sluice/config.hpp>
#include <sluice/pinned_budget.hpp>
#include <sluice/s3/fs_store.hpp>
#include <sluice/s3/gateway_store.hpp>
#include <sluice/s3/local_plane.hpp>
#include <sluice/s3/metrics.hpp>
#include <sluice/s3/server.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#ifdef SLUICE_CLI_WITH_CUDA
#include <sluice/cuda/grant.hpp>
#endif
#ifdef SLUICE_CLI_WITH_FABRIC
#include <sluice/fabric/s3_plane.hpp>
#endif

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <pthread.h>
#include <unistd.h>

namespace sluice::cli {

namespace {

namespace s3 = sluice::s3;

// The default same-host grant socket of a server on `port`, in this user's private directory
// ($XDG_RUNTIME_DIR/sluice/, else /tmp/sluice-UID/); clients on this host compute the same path
// with s3::default_grant_socket. The library reads no environment: the CLI passes it.
std::string default_grant_socket(std::uint16_t port) {
  const char* runtime_dir = std::getenv("XDG_RUNTIME_DIR");  // NOLINT(concurrency-mt-unsafe): read once
  return s3::default_grant_socket(port, runtime_dir != nullptr ? runtime_dir : "").string();
}

// What a gateway starts from before the config file and the flags.
s3::gateway_store_config default_gateway_config() {
  s3::gateway_store_config gateway;
  // A gateway answers its clients within their timeouts: an upstream that does not answer in
  // 60 s (or upstream_timeout_s, --upstream-timeout) counts as unreachable (503, or stale_if_error).
  gateway.upstream.request_timeout = std::chrono::seconds(60);
  return gateway;
}

// The text of the --config file, or nullopt after saying why not. A regular file of at most
// max_config_file_bytes only: this also runs on SIGHUP in the thread that waits for SIGTERM, so a
// FIFO or /dev/zero at the path must neither block nor grow without bound (read_config_file).
std::optional<std::string> read_config_text(const std::string& file) {
  error_code ec;
  config_error error;
  std::string text = read_config_file(file, ec, error);
  if (ec) {
    std::fprintf(stderr, "sluice serve: %s\n", error.message().c_str());
    return std::nullopt;
  }
  return text;
}

// The server configuration in `text`, the --config file's, or nullopt after saying why not.
std::optional<s3::server_config> parse_server_config(const std::string& file, const std::string& text) {
  error_code ec;
  config_error error;
  auto config = s3::parse_server_config(text, ec, error);
  if (ec) {
    std::fprintf(stderr, "sluice serve: %s: %s\n", file.c_str(), error.message().c_str());
    return std::nullopt;
  }
  return config;
}

// The server configuration of the --config file, or nullopt after saying why not.
std::optional<s3::server_config> read_server_config(const std::string& file) {
  const auto text = read_config_text(file);
  if (!text) return std::nullopt;
  return parse_server_config(file, *text);
}

// The server configuration and the "gateway" object of the --config file, from one read of it
// (so both come from the same version of the file); false after saying what is wrong.
bool read_config(const std::string& file, s3::server_config& server, std::optional<s3::gateway_store_config>& gateway) {
  const auto text = read_config_text(file);
  if (!text) return false;
  auto parsed = parse_server_config(file, *text);
  if (!parsed) return false;
  error_code ec;
  config_error error;
  gateway = s3::parse_gateway_config(*text, default_gateway_config(), ec, error);
  if (ec) {
    std::fprintf(stderr, "sluice serve: %s: %s\n", file.c_str(), error.message().c_str());
    return false;
  }
  server = std::move(*parsed);
  return true;
}

// /metrics: the same-host grant plane's sessions and grants.
s3::metrics_source grant_plane_metrics(std::shared_ptr<s3::local_server_plane> plane) {
  return [plane = std::move(plane)](s3::metrics_writer& out) {
    out.family("sluice_grant_sessions", s3::metric_type::gauge, "Same-host grant sessions open now.");
    out.sample(plane->session_count());
    out.family("sluice_grant_buffers", s3::metric_type::gauge, "Buffers granted by same-host clients, held now.");
    out.sample(plane->grant_count());
  };
}

// /metrics: the host's pinned-memory budget over every cache that pins.
s3::metrics_source pinned_metrics(std::shared_ptr<const pinned_budget> budget) {
  return [budget = std::move(budget)](s3::metrics_writer& out) {
    const pinned_budget::statistics s = budget->stats();
    out.family("sluice_pinned_bytes", s3::metric_type::gauge,
               "Host memory pinned now by the caches that pin (CUDA grants, fabric registrations).");
    out.sample(s.used);
    out.family("sluice_pinned_budget_bytes", s3::metric_type::gauge,
               "The most host memory those caches may pin at once (--pinned-budget).");
    out.sample(s.limit);
    out.family("sluice_pinned_refused_total", s3::metric_type::counter,
               "Registrations not made or not kept because the pinned budget was full.");
    out.sample(s.refused);
  };
}

#ifdef SLUICE_CLI_WITH_CUDA
// /metrics: the CUDA grant opener's registration cache of page cache (cudaHostRegister).
s3::metrics_source grant_opener_metrics(std::shared_ptr<s3::device_grant_opener> opener) {
  return [opener = std::move(opener)](s3::metrics_writer& out) {
    const cuda::grant_opener_stats stats = cuda::stats_of(*opener);
    using s3::metric_type;
    const auto one = [&out](std::string_view name, metric_type type, std::string_view help, std::uint64_t value) {
      out.family(name, type, help);
      out.sample(value);
    };
    one("sluice_grant_registered_bytes", metric_type::gauge,
        "Page cache registered with CUDA now (cudaHostRegister), for GETs into granted GPU memory.",
        stats.registered_bytes);
    one("sluice_grant_registrations_total", metric_type::counter, "Chunks of page cache registered.",
        stats.registrations);
    one("sluice_grant_cache_hits_total", metric_type::counter, "Chunks a GET found registered already.",
        stats.cache_hits);
    one("sluice_grant_evictions_total", metric_type::counter, "Chunks unregistered to stay within the budget.",
        stats.evictions);
    one("sluice_grant_copied_chunks_total", metric_type::counter,
        "Chunks the copy threads moved through pinned buffers while others registered.", stats.copied_chunks);
    one("sluice_grant_pageable_copies_total", metric_type::counter,
        "Ranges copied unregistered because registration failed.", stats.pageable_copies);
    one("sluice_grant_registered_on_write_total", metric_type::counter,
        "Object versions queued for registration when a PUT, CompleteMultipartUpload or CopyObject published them.",
        stats.registered_on_write);
    one("sluice_grant_open_handles", metric_type::gauge, "Client GPU allocations opened (CUDA IPC) now.",
        stats.open_handles);
    one("sluice_grant_registration_context", metric_type::gauge,
        "1 when page cache registers in a CUDA context of its own (0: registrations and copies alternate).",
        stats.registration_context ? 1 : 0);
  };
}
#endif

#ifdef SLUICE_CLI_WITH_FABRIC
// /metrics: each libfabric provider's RMA counters, registrations and staging buffers.
s3::metrics_source fabric_plane_metrics(std::shared_ptr<fabric::server_plane> plane) {
  return [plane = std::move(plane)](s3::metrics_writer& out) {
    const auto providers = plane->statistics();
    using s3::metric_type;
    const auto family = [&](std::string_view name, metric_type type, std::string_view help, auto value_of) {
      out.family(name, type, help);
      for (const fabric::server_plane_statistics& p : providers) out.sample(value_of(p), {{"provider", p.provider}});
    };
    using stats = fabric::server_plane_statistics;
    family("sluice_fabric_rma_operations_total", metric_type::counter, "RMA operations posted, by provider.",
           [](const stats& p) { return p.endpoint.operations; });
    family("sluice_fabric_rma_bytes_total", metric_type::counter, "Bytes moved by RMA, by provider.",
           [](const stats& p) { return p.endpoint.bytes; });
    family("sluice_fabric_rma_errors_total", metric_type::counter, "RMA operations that completed with an error.",
           [](const stats& p) { return p.endpoint.errors; });
    family("sluice_fabric_registrations_total", metric_type::counter,
           "Memory registrations (fi_mr_reg): the staging buffers, then the source of each GET.",
           [](const stats& p) { return p.endpoint.registrations; });
    family("sluice_fabric_endpoint_reopened_total", metric_type::counter,
           "Endpoints replaced after a transfer gave up with operations outstanding, by provider.",
           [](const stats& p) { return p.reopened; });
    family("sluice_fabric_registration_cache_hits_total", metric_type::counter,
           "GETs sent from a registration kept for their object version, by provider.",
           [](const stats& p) { return p.registration_cache_hits; });
    family("sluice_fabric_registration_cache_misses_total", metric_type::counter,
           "GET sources registered and kept for later GETs of their version, by provider.",
           [](const stats& p) { return p.registration_cache_misses; });
    family("sluice_fabric_registration_cache_entries", metric_type::gauge,
           "Object versions kept registered now (each holds its file open), by provider.",
           [](const stats& p) { return std::uint64_t{p.registration_cache_entries}; });
    family("sluice_fabric_registration_cache_bytes", metric_type::gauge,
           "Bytes of object versions kept registered now, by provider.",
           [](const stats& p) { return p.registration_cache_bytes; });
    family("sluice_fabric_staging_buffers", metric_type::gauge, "Registered staging buffers (PUT), by provider.",
           [](const stats& p) { return std::uint64_t{p.staging_buffers}; });
    family("sluice_fabric_staging_buffers_in_use", metric_type::gauge, "Staging buffers in use now, by provider.",
           [](const stats& p) { return std::uint64_t{p.staging_buffers - p.staging_buffers_free}; });
  };
}
#endif

// Applies the command line over the --config file's settings; false after saying why not.
bool apply(const serve_options& o, s3::server_config& config) {
  if (o.access_log) {
    config.access_log.target = *o.access_log == "off"      ? s3::access_log_target::off
                               : *o.access_log == "stderr" ? s3::access_log_target::standard_error
                                                           : s3::access_log_target::file;
    config.access_log.path = *o.access_log;
  }
  if (o.access_log_format) {
    config.access_log.format =
        *o.access_log_format == "json" ? s3::access_log_format::json : s3::access_log_format::text;
  }
  if (o.admin_listen) {
    config.admin_listen.reset();
    if (const auto where = host_port(*o.admin_listen))
      config.admin_listen = s3::admin_listener{where->first, where->second};
  }
  if (o.listen && *o.listen == "off") {
    config.plain_http = false;
  } else if (o.listen) {
    const auto where = host_port(*o.listen);
    config.listen_address = where->first;
    config.port = where->second;
  }
  if (o.tls_cert) {
    s3::tls_listener tls;
    tls.certificate_chain = *o.tls_cert;
    tls.private_key = o.tls_key.value_or("");
    const auto where = host_port(o.tls_listen.value_or(config.listen_address + ":9443"));
    if (!where) {
      std::fprintf(stderr, "sluice serve: --tls-listen: '%s:9443' is not HOST:PORT\n", config.listen_address.c_str());
      return false;
    }
    tls.listen_address = where->first;
    tls.port = where->second;
    config.tls = std::move(tls);
  }
  if (o.shutdown_grace) config.shutdown_grace = std::chrono::seconds(*o.shutdown_grace);
  if (o.upload_expiry) config.upload_expiry = std::chrono::seconds(*o.upload_expiry);
  if (o.region) config.region = *o.region;
  if (o.anonymous) config.allow_anonymous = true;
  if (o.no_sigv2) config.sigv2 = false;  // AWS Signature Version 2: 403 AccessDenied
  if (!o.access_key.empty()) config.users.push_back({o.access_key, o.secret_key});
  if (config.virtual_host_suffixes.empty()) config.virtual_host_suffixes = {"localhost"};
  return true;
}

// The first entry of `root` that an fs_store would not have made there (files a user meant to
// serve as they are), or nullopt; a missing or unreadable root is fs_store::open's to report.
std::optional<std::string> foreign_entry(const std::string& root) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name != "lock" && name != "tmp" && name != "buckets" && name != "lost+found") return name;
  }
  return std::nullopt;
}

// Serves `store` until SIGINT or SIGTERM; the exit code. `what` names the store on the
// "listening on" line.
template <class Store>
int run_server(Store& store, const serve_options& o, const s3::server_config& config, const std::string& listen,
               const std::string& what, const std::string& rdma_status, const std::string& grant_status,
               sigset_t& signals) {
  error_code ec;
  try {
    s3::server server(store, config);
    server.listen(ec);
    if (ec) {
      std::fprintf(stderr, "sluice serve: cannot listen on %s: %s\n", listen.c_str(), ec.message().c_str());
      return 1;
    }
    std::printf("sluice serve: rdma: %s\n", rdma_status.c_str());
    std::printf("sluice serve: grants: %s\n", grant_status.c_str());
    if (config.tls) {  // before the "listening on" line, which says the server is ready
      const auto tls = server.tls_endpoint();
      std::printf("sluice serve: https on %s:%u (%s)\n", tls.address().to_string().c_str(),
                  static_cast<unsigned>(tls.port()), config.tls->certificate_chain.c_str());
    }
    if (config.admin_listen) {
      const auto admin = server.admin_endpoint();
      std::printf("sluice serve: admin on %s:%u (/metrics, /health, /ready)\n", admin.address().to_string().c_str(),
                  static_cast<unsigned>(admin.port()));
    }
    if (config.plain_http) {
      const auto endpoint = server.local_endpoint();
      std::printf("sluice serve: listening on %s:%u, %s\n", endpoint.address().to_string().c_str(),
                  static_cast<unsigned>(endpoint.port()), what.c_str());
    } else {
      const auto endpoint = server.tls_endpoint();
      std::printf("sluice serve: listening on %s:%u (https only), %s\n", endpoint.address().to_string().c_str(),
                  static_cast<unsigned>(endpoint.port()), what.c_str());
    }
    std::fflush(stdout);
    int received = 0;
    // SIGHUP: the users of --config again (with --access-key's), and the access log reopened.
    while (sigwait(&signals, &received) == 0 && received == SIGHUP) {
      error_code log_error;
      server.reopen_access_log(log_error);
      if (log_error) {  // the lines go on to the file already open
        std::fprintf(stderr, "sluice serve: SIGHUP: access log %s: %s; still writing to the file open before\n",
                     config.access_log.path.c_str(), log_error.message().c_str());
      }
      if (!o.config_file) {
        std::printf("sluice serve: SIGHUP: no --config file, users unchanged\n");
        std::fflush(stdout);
        continue;
      }
      auto reread = read_server_config(*o.config_file);
      if (!reread) {
        std::fprintf(stderr, "sluice serve: SIGHUP: users unchanged\n");
        continue;
      }
      if (!o.access_key.empty()) reread->users.push_back({o.access_key, o.secret_key});
      try {
        const std::size_t count = reread->users.size();
        server.set_users(std::move(reread->users));
        std::printf("sluice serve: SIGHUP: %zu users\n", count);
      } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "sluice serve: SIGHUP: %s; users unchanged\n", e.what());
      }
      std::fflush(stdout);
    }
    std::printf("sluice serve: stopping (signal %d): requests in flight have %lld s\n", received,
                static_cast<long long>(config.shutdown_grace.count()));
    std::fflush(stdout);
    // A transfer thread can be stuck inside the fabric provider for good: libfabric 1.17's shm
    // spins on a lock in the shared region of a peer that died holding it. Such a thread can
    // never be joined, nor its request end; 10 s after the cut, SIGALRM ends the process and the
    // kernel reclaims it all (every object is already published or absent: PUTs write a temporary
    // file and rename).
    struct sigaction on_alarm {};
    on_alarm.sa_handler = [](int) {
      static constexpr char said[] =
          "sluice serve: stop did not finish 10 s after the cut (a transfer thread is stuck in the fabric provider); "
          "exiting\n";
      static_cast<void>(::write(STDERR_FILENO, said, sizeof said - 1));  // async-signal-safe, as _exit is
      ::_exit(0);
    };
    sigemptyset(&on_alarm.sa_mask);
    ::sigaction(SIGALRM, &on_alarm, nullptr);
    ::alarm(static_cast<unsigned>(config.shutdown_grace.count()) + 10);
    {
      // The listeners close and idle connections with them; requests in flight finish, for
      // --shutdown-grace at most. A second SIGINT or SIGTERM cuts them at once: from here on this
      // thread takes the signals through Asio (the server's threads keep them blocked), and runs
      // the loop until the server says no connection is left.
      namespace asio = boost::asio;
      asio::io_context here(1);
      asio::signal_set again(here, SIGINT, SIGTERM);
      again.async_wait([&server](const error_code& e, int) {
        if (e) return;
        std::printf("sluice serve: second signal: cutting what is in flight\n");
        std::fflush(stdout);
        server.cut_now();
        ::alarm(10);
      });
      server.async_shutdown(asio::bind_executor(here, [&again] { again.cancel(); }));
      sigset_t stop_signals;
      sigemptyset(&stop_signals);
      sigaddset(&stop_signals, SIGINT);
      sigaddset(&stop_signals, SIGTERM);
      pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
      here.run();
      pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    }
    ::alarm(10);  // stop() may not finish either (on_alarm above)
    server.stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice serve: %s\n", e.what());
    return 1;
  }
  return 0;
}

// The gateway_store configuration: the --config file's "gateway" object (nullopt: none), then
// --upstream and friends over it.
std::optional<s3::gateway_store_config> gateway_config(const serve_options& o,
                                                       std::optional<s3::gateway_store_config> from_file) {
  if (!from_file && !o.upstream) return std::nullopt;
  s3::gateway_store_config gateway = from_file ? std::move(*from_file) : default_gateway_config();
  gateway.root = o.root;
  if (o.upstream) gateway.upstream.endpoint = *o.upstream;
  if (!o.upstream_access_key.empty() || !o.upstream_secret_key.empty()) {
    gateway.upstream.creds = {o.upstream_access_key, o.upstream_secret_key};
  }
  if (o.upstream_region) gateway.upstream.region = *o.upstream_region;
  if (o.upstream_ca_bundle) gateway.upstream.ca_bundle = *o.upstream_ca_bundle;
  if (o.upstream_timeout) gateway.upstream.request_timeout = std::chrono::seconds(*o.upstream_timeout);
  if (o.cache_bytes) gateway.cache_bytes = *o.cache_bytes;
  if (o.revalidate_after) gateway.revalidate_after = std::chrono::seconds(*o.revalidate_after);
  if (o.stale_if_error) gateway.stale_if_error = true;
  // Why an answer was a 502 or 503 (the client sees only that): on stderr, one line each.
  gateway.log = [](std::string_view message) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(message.size()), message.data());
  };
  return gateway;
}

// /metrics: the gateway's cache.
s3::metrics_source gateway_metrics(const s3::gateway_store& store) {
  return [&store](s3::metrics_writer& out) {
    const s3::gateway_statistics stats = store.statistics();
    using s3::metric_type;
    const auto one = [&out](std::string_view name, metric_type type, std::string_view help, std::uint64_t value) {
      out.family(name, type, help);
      out.sample(value);
    };
    one("sluice_gateway_hits_total", metric_type::counter, "Reads served from a cached copy.", stats.hits);
    one("sluice_gateway_misses_total", metric_type::counter, "Reads that fetched from the upstream.", stats.misses);
    one("sluice_gateway_revalidations_total", metric_type::counter, "Upstream HEADs that confirmed a cached copy.",
        stats.revalidations);
    one("sluice_gateway_trusted_total", metric_type::counter,
        "If-Match GETs served within if_match_trust of the last confirmation, without an upstream HEAD.",
        stats.trusted);
    one("sluice_gateway_stale_served_total", metric_type::counter,
        "Cached copies served while the upstream failed (stale_if_error).", stats.stale_served);
    one("sluice_gateway_upstream_bytes_total", metric_type::counter, "Object bytes fetched from the upstream.",
        stats.upstream_bytes);
    one("sluice_gateway_evictions_total", metric_type::counter, "Cached copies evicted.", stats.evictions);
    one("sluice_gateway_passthroughs_total", metric_type::counter, "Reads served from memory, not cached.",
        stats.passthroughs);
    one("sluice_gateway_range_fetches_total", metric_type::counter,
        "Ranged GETs of uncached objects that fetched only their range.", stats.range_fetches);
    one("sluice_gateway_cached_bytes", metric_type::gauge, "Bytes of cached copies now.", stats.cached_bytes);
    one("sluice_gateway_cached_objects", metric_type::gauge, "Cached copies now.", stats.cached_objects);
  };
}

}  // namespace

int serve(const serve_options& o) {
  s3::server_config config;
  std::optional<s3::gateway_store_config> gateway_file;
  if (o.config_file && !read_config(*o.config_file, config, gateway_file)) return 1;
  if (!apply(o, config)) return 2;
  const std::string listen = o.listen.value_or(config.listen_address + ":" + std::to_string(config.port));

  // Block the stop signals in every thread; this one waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  error_code ec;
  // One budget of pinned host memory over every cache that pins (the grant opener, the fabric
  // plane's kept registrations).
  const auto pinned = std::make_shared<pinned_budget>(o.pinned_budget.value_or(pinned_budget::default_limit()));
  config.metrics_sources.push_back(pinned_metrics(pinned));
  // The RDMA data plane: every provider that opens here with "auto", one named, or none.
  std::string rdma_status = "off";
  if (o.fabric != "off") {
#ifdef SLUICE_CLI_WITH_FABRIC
    fabric::server_plane_config plane;
    plane.fabric.provider = provider_name(o.fabric);
    if (o.fabric_registration_cache) plane.registration_cache_bytes = *o.fabric_registration_cache;
    plane.pinned = pinned;
    if (o.fabric_connect_timeout) {
      plane.fabric.connect_timeout = std::chrono::milliseconds(std::llround(*o.fabric_connect_timeout * 1000));
    }
    if (config.listen_address != "0.0.0.0" && config.listen_address != "::") plane.fabric.node = config.listen_address;
    auto rdma = fabric::server_plane::open(plane, ec);
    const std::string why = ec == sluice::errc::unavailable
                                ? "RDMA needs libfabric.so.1: " + fabric::libfabric_unavailable_reason()
                                : ec.message();
    if (ec && o.fabric != "auto") {
      std::fprintf(stderr, "sluice serve: --fabric %s: %s\n", o.fabric.c_str(), why.c_str());
      return 1;
    }
    if (ec) {
      rdma_status = "off (no libfabric provider opened: " + why + ")";
    } else {
      config.rdma = rdma;
      config.metrics_sources.push_back(fabric_plane_metrics(rdma));
      rdma_status.clear();
      for (const auto& name : rdma->providers()) rdma_status += (rdma_status.empty() ? "" : ", ") + name;
    }
    ec = {};
#else
    if (o.fabric != "auto") {
      std::fprintf(stderr, "sluice serve: --fabric %s: this build has no libfabric\n", o.fabric.c_str());
      return 1;
    }
    rdma_status = "off (built without libfabric)";
#endif
  }
  // Same-host grants: a client on this host grants exactly its buffers (memfd, CUDA IPC) over
  // this socket, and its tokens name those grants. Tried before libfabric for every token.
  const std::string grant_choice = o.grant_socket.value_or(default_grant_socket(config.port));
  std::string grant_status = "off";
  if (grant_choice != "off") {
    s3::local_server_plane_config grants;
    grants.socket_path = grant_choice;
    // The default lives in a directory of this user's alone, which no other local user can
    // reach, pre-create or replace.
    grants.private_directory = !o.grant_socket.has_value();
    for (const auto& u : config.users) grants.users.push_back({u.access_key_id, u.secret_access_key});
    std::string kinds = "memfd";
#ifdef SLUICE_CLI_WITH_CUDA
    // Device memory of clients on this host, by CUDA IPC, when this process sees a GPU.
    error_code cuda_ec;
    cuda::grant_opener_config opener;
    if (o.grant_copy_threads) opener.copy_threads = *o.grant_copy_threads;
    opener.register_on_write = o.grant_register_on_write;
    opener.pinned = pinned;
    opener.trace = std::getenv("SLUICE_GRANT_TRACE") != nullptr;  // NOLINT(concurrency-mt-unsafe): read once
    grants.device = cuda::make_grant_opener(opener, cuda_ec);
    if (grants.device) {
      config.metrics_sources.push_back(grant_opener_metrics(grants.device));
      kinds += cuda::stats_of(*grants.device).registration_context
                   ? ", cuda-ipc"
                   : ", cuda-ipc without a registration context: first GETs register and copy in turn";
    } else {
      kinds += ", no cuda-ipc: " + cuda_ec.message();
    }
#endif
    auto local = s3::local_server_plane::open(grants, ec);
    if (ec && grants.private_directory) {
      // The default socket's directory is not ours (another local user made it first, or its
      // mode lets others in): serve without grants rather than not at all, and say why.
      grant_status = "off (" + std::filesystem::path(grant_choice).parent_path().string() + ": " +
                     (ec.value() == EPERM ? std::string("not a directory of this user with mode 0700") : ec.message()) +
                     "; --grant-socket PATH chooses another)";
      std::fprintf(stderr, "sluice serve: grants %s\n", grant_status.c_str());
      ec = {};
    } else if (ec) {
      std::fprintf(stderr, "sluice serve: --grant-socket %s: %s\n", grant_choice.c_str(), ec.message().c_str());
      return 1;
    } else {
      config.metrics_sources.push_back(grant_plane_metrics(local));
      grant_status = grant_choice + " (" + kinds + ")";
      std::vector<std::shared_ptr<s3::rdma_server_plane>> planes{local};
      if (config.rdma) planes.push_back(config.rdma);
      config.rdma = std::make_shared<s3::rdma_server_planes>(std::move(planes));
    }
  }
  if (auto gateway_settings = gateway_config(o, std::move(gateway_file))) {
    const std::string upstream = gateway_settings->upstream.endpoint;
    auto gateway = s3::gateway_store::open(std::move(*gateway_settings), ec);
    if (ec) {
      std::fprintf(stderr, "sluice serve: cannot open the gateway cache at %s: %s\n", o.root.c_str(),
                   ec.message().c_str());
      return 1;
    }
    config.metrics_sources.push_back(gateway_metrics(*gateway));
    return run_server(*gateway, o, config, listen, "gateway to " + upstream + ", cache " + o.root, rdma_status,
                      grant_status, signals);
  }
  if (const auto foreign = foreign_entry(o.root)) {
    std::fprintf(stderr,
                 "sluice serve: --root %s holds '%s', which is not part of a sluice store (it keeps objects in "
                 "its own layout: lock, tmp/, buckets/), so those files would not be served. Serve an empty or "
                 "store directory, and copy files in with: sluice cp -r DIR s3://BUCKET/\n",
                 o.root.c_str(), foreign->c_str());
    return 1;
  }
  s3::fs_store_config store_config{.root = o.root};
  if (o.small_object_cache) store_config.small_object_cache_bytes = *o.small_object_cache;
  auto store = s3::fs_store::open(std::move(store_config), ec);
  if (ec) {
    std::fprintf(stderr, "sluice serve: cannot open store at %s: %s\n", o.root.c_str(), ec.message().c_str());
    return 1;
  }
  return run_server(*store, o, config, listen, "store " + o.root, rdma_status, grant_status, signals);
}

}  // namespace sluice::cli
