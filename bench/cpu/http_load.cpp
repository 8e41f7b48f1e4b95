// SPDX-License-Identifier: Apache-2.0
// sluice_http_load: keep-alive HTTP/1.1 load of one request, for what wrk cannot drive (a HEAD: wrk
// waits for the body its Content-Length announces). bench/run.py runs it for HEAD and GET alike,
// so that the two rates come from the same client.
//
//   sluice_http_load HOST PORT TARGET [--method M] [--header "Name: value"]... [--threads T]
//                    [--connections C] [--seconds S] [--length N]
//
// C connections in all, spread over T threads (each polls its own), one request in flight per
// connection.
// Every answer is checked: status 200, and with --length a Content-Length of N (a GET's body of
// N bytes is read and dropped). Prints one line:
//   requests=R seconds=S rate=R/S bad=B p50_us=… p99_us=…
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct options {
  std::string host;
  int port = 0;
  std::string target;
  std::string method = "GET";
  std::vector<std::string> headers;
  int threads = 1;
  int connections = 16;
  double seconds = 5;
  long long length = -1;  // expected Content-Length; -1: not checked
};

struct tally {
  std::uint64_t requests = 0;
  std::uint64_t bad = 0;
  std::vector<std::uint32_t> latency_us;
};

[[noreturn]] void fail(const char* what) {
  std::perror(what);
  std::exit(2);
}

int connect_to(const options& o) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("socket");
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(o.port));
  if (::inet_pton(AF_INET, o.host.c_str(), &to.sin_addr) != 1) {
    std::fprintf(stderr, "sluice_http_load: %s is not an IPv4 address\n", o.host.c_str());
    std::exit(2);
  }
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) fail("connect");
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool iequals_prefix(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), text.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
         });
}

// One connection: the bytes of the answer under way, when its request left.
struct connection {
  int fd = -1;
  std::string in;
  clock_type::time_point sent;
  long long need = -1;  // bytes of the whole answer, once its head is in
  bool good = false;
};

// Parses the head in c.in when it is complete: sets need and good. False while incomplete.
bool parse_head(connection& c, const options& o) {
  const auto end = c.in.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  const std::string_view head(c.in.data(), end + 2);
  c.good = head.starts_with("HTTP/1.1 200 ");
  long long length = 0;
  for (std::size_t at = head.find("\r\n"); at != std::string_view::npos && at + 2 < head.size();) {
    const auto next = head.find("\r\n", at + 2);
    const std::string_view line = head.substr(at + 2, next - at - 2);
    if (iequals_prefix(line, "content-length:")) {
      std::string_view value = line.substr(15);
      while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      std::from_chars(value.data(), value.data() + value.size(), length);
    }
    at = next;
  }
  if (o.length >= 0 && length != o.length) c.good = false;
  c.need = static_cast<long long>(end + 4) + (o.method == "HEAD" ? 0 : length);
  return true;
}

void run_thread(const options& o, int connections, const std::string& request, clock_type::time_point stop,
                tally& out) {
  std::vector<connection> conns(static_cast<std::size_t>(connections));
  std::vector<pollfd> polls(conns.size());
  const auto send_request = [&](connection& c) {
    c.sent = clock_type::now();
    c.need = -1;
    for (std::size_t done = 0; done < request.size();) {
      const ssize_t n = ::send(c.fd, request.data() + done, request.size() - done, MSG_NOSIGNAL);
      if (n <= 0) fail("send");
      done += static_cast<std::size_t>(n);
    }
  };
  for (std::size_t i = 0; i < conns.size(); ++i) {
    conns[i].fd = connect_to(o);
    polls[i] = {conns[i].fd, POLLIN, 0};
    send_request(conns[i]);
  }
  char buffer[65536];
  while (clock_type::now() < stop) {
    if (::poll(polls.data(), polls.size(), 100) < 0) fail("poll");
    for (std::size_t i = 0; i < conns.size(); ++i) {
      if ((polls[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      connection& c = conns[i];
      const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
      if (n <= 0) {
        std::fprintf(stderr, "sluice_http_load: the server closed a connection\n");
        std::exit(1);
      }
      c.in.append(buffer, static_cast<std::size_t>(n));
      while (true) {
        if (c.need < 0 && !parse_head(c, o)) break;
        if (static_cast<long long>(c.in.size()) < c.need) break;
        if (c.in.size() != static_cast<std::size_t>(c.need)) c.good = false;  // more than one answer: not ours
        c.in.clear();
        ++out.requests;
        if (!c.good) ++out.bad;
        out.latency_us.push_back(static_cast<std::uint32_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now() - c.sent).count()));
        if (clock_type::now() < stop) send_request(c);
        break;
      }
    }
  }
  for (auto& c : conns) ::close(c.fd);
}

options parse(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: sluice_http_load HOST PORT TARGET [--method M] [--header 'Name: value']... [--threads T] "
                 "[--connections C] [--seconds S] [--length N]\n");
    std::exit(2);
  }
  options o;
  o.host = argv[1];
  o.port = std::atoi(argv[2]);
  o.target = argv[3];
  for (int i = 4; i + 1 < argc; i += 2) {
    const std::string_view name = argv[i];
    const char* value = argv[i + 1];
    if (name == "--method")
      o.method = value;
    else if (name == "--header")
      o.headers.emplace_back(value);
    else if (name == "--threads")
      o.threads = std::max(1, std::atoi(value));
    else if (name == "--connections")
      o.connections = std::max(1, std::atoi(value));
    else if (name == "--seconds")
      o.seconds = std::atof(value);
    else if (name == "--length")
      o.length = std::atoll(value);
    else {
      std::fprintf(stderr, "sluice_http_load: unknown option %s\n", argv[i]);
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  std::string request =
      o.method + " " + o.target + " HTTP/1.1\r\nHost: " + o.host + ":" + std::to_string(o.port) + "\r\n";
  for (const auto& h : o.headers) request += h + "\r\n";
  request += "\r\n";
  std::vector<tally> tallies(static_cast<std::size_t>(o.threads));
  const auto start = clock_type::now();
  const auto stop = start + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(o.seconds));
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < o.threads; ++i) {
      const int mine = o.connections / o.threads + (i < o.connections % o.threads ? 1 : 0);
      if (mine > 0)
        threads.emplace_back(
            [&, i, mine] { run_thread(o, mine, request, stop, tallies[static_cast<std::size_t>(i)]); });
    }
  }
  const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  tally all;
  for (auto& t : tallies) {
    all.requests += t.requests;
    all.bad += t.bad;
    all.latency_us.insert(all.latency_us.end(), t.latency_us.begin(), t.latency_us.end());
  }
  std::sort(all.latency_us.begin(), all.latency_us.end());
  const auto pct = [&](double p) {
    return all.latency_us.empty()
               ? 0u
               : all.latency_us[static_cast<std::size_t>(p * static_cast<double>(all.latency_us.size() - 1))];
  };
  std::printf("requests=%llu seconds=%.3f rate=%.1f bad=%llu p50_us=%u p99_us=%u\n",
              static_cast<unsigned long long>(all.requests), seconds, static_cast<double>(all.requests) / seconds,
              static_cast<unsigned long long>(all.bad), pct(0.5), pct(0.99));
  return all.bad == 0 && all.requests > 0 ? 0 : 1;
}
