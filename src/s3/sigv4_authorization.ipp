// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/sigv4.hpp, continued: parsing a request's SigV4
// authorization, from its Authorization header or a presigned URL's query (credential scope,
// signed headers, signature, date), and verifying it. Included by src/s3/s3.cpp after sigv4.ipp,
// whose helpers it uses (sigv4_detail: the query parameters, the dates, fail(), the canonical
// request).

namespace sluice::s3 {

namespace {
namespace sigv4_detail {

bool is_valid_payload_hash(std::string_view hash) noexcept {
  static constexpr std::array<std::string_view, 4> keywords{"UNSIGNED-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
                                                            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
                                                            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"};
  if (hash.size() == 64 && is_hex(hash)) return true;
  return std::find(keywords.begin(), keywords.end(), hash) != keywords.end();
}

// AK/date/region/service/aws4_request. The access key is everything before the last four
// components, so keys that contain '/' still parse.
bool parse_credential(std::string_view text, authorization& out) {
  std::array<std::string_view, 4> tail;
  for (std::size_t i = 4; i-- > 0;) {
    const auto slash = text.rfind('/');
    if (slash == std::string_view::npos) return false;
    tail[i] = text.substr(slash + 1);
    text = text.substr(0, slash);
  }
  if (text.empty() || tail[1].empty() || tail[2].empty() || tail[3] != scope_terminator) return false;
  if (tail[0].size() != 8 || !std::all_of(tail[0].begin(), tail[0].end(), is_digit) ||
      !make_time(two_digits(tail[0], 0) * 100 + two_digits(tail[0], 2), two_digits(tail[0], 4), two_digits(tail[0], 6),
                 0, 0, 0)) {
    return false;
  }
  out.access_key_id = text;
  out.date = tail[0];
  out.region = tail[1];
  out.service = tail[2];
  return true;
}

bool parse_signed_headers(std::string_view text, authorization& out) {
  if (text.empty()) return false;
  // The names go into the strings `out` holds already (a reused authorization keeps them).
  std::size_t n = 0;
  while (true) {
    const auto semi = text.find(';');
    const std::string_view name = text.substr(0, semi);
    if (!is_token(name)) return false;
    if (n == out.signed_headers.size()) out.signed_headers.emplace_back();
    std::string& into = out.signed_headers[n++];
    into.assign(name);
    std::transform(into.begin(), into.end(), into.begin(), to_lower);
    if (semi == std::string_view::npos) {
      out.signed_headers.resize(n);
      return true;
    }
    text = text.substr(semi + 1);
  }
}

// What neither form of parse_*_authorization sets in every case, cleared in an authorization
// that is filled again (its strings keep their memory).
void clear_claims(authorization& out) {
  out.signed_headers.clear();
  out.presigned = false;
  out.expires = 0;
}

bool parse_signature(std::string_view text, authorization& out) {
  if (text.size() != 64 || !is_hex(text)) return false;
  out.signature = text;
  return true;
}

bool parse_header_authorization(const request_view& request, std::string_view value, authorization& out,
                                error_code& ec) {
  clear_claims(out);
  value = trim(value);
  if (value.starts_with("AWS ")) {
    fail(ec, errc::invalid_request, "Please use AWS4-HMAC-SHA256.");
    return false;
  }
  if (!value.starts_with(algorithm) || (value.size() > algorithm.size() && !is_blank(value[algorithm.size()]))) {
    fail(ec, errc::invalid_argument, "Unsupported Authorization Type");
    return false;
  }
  value = trim(value.substr(algorithm.size()));  // nothing left is malformed: no component

  bool have_credential = false, have_signed_headers = false, have_signature = false;
  while (true) {
    const auto comma = value.find(',');
    const std::string_view part = trim(value.substr(0, comma));
    const auto eq = part.find('=');
    if (eq == std::string_view::npos) {
      fail(ec, errc::authorization_header_malformed);
      return false;
    }
    const std::string_view key = part.substr(0, eq);
    const std::string_view v = part.substr(eq + 1);
    bool ok = false;
    if (key == "Credential" && !have_credential) {
      ok = have_credential = parse_credential(v, out);
    } else if (key == "SignedHeaders" && !have_signed_headers) {
      ok = have_signed_headers = parse_signed_headers(v, out);
    } else if (key == "Signature" && !have_signature) {
      ok = have_signature = parse_signature(v, out);
    }
    if (!ok) {
      fail(ec, errc::authorization_header_malformed);
      return false;
    }
    if (comma == std::string_view::npos) break;
    value = value.substr(comma + 1);
  }
  if (!have_credential || !have_signed_headers || !have_signature) {
    fail(ec, errc::authorization_header_malformed);
    return false;
  }

  const auto amz_dates = header_values(request, "x-amz-date");
  if (amz_dates.size() > 1) {
    fail(ec, errc::invalid_argument);
    return false;
  }
  std::optional<std::chrono::sys_seconds> time;
  if (amz_dates.size() == 1) {
    time = parse_basic(trim(amz_dates.front()));
  } else {
    const auto dates = header_values(request, "date");
    if (dates.size() == 1) {
      const auto text = trim(dates.front());
      time = parse_basic(text);
      if (!time) time = parse_imf_fixdate(text);
    }
  }
  if (!time) {
    fail(ec, errc::access_denied, "AWS authentication requires a valid Date or x-amz-date header");
    return false;
  }
  out.amz_date = format_amz_date(*time);
  if (out.amz_date.compare(0, 8, out.date) != 0) {
    fail(ec, errc::authorization_header_malformed, "The credential scope's date is not the request's date.");
    return false;
  }

  const auto hashes = header_values(request, "x-amz-content-sha256");
  if (hashes.empty()) {
    fail(ec, errc::invalid_request, "Missing required header for this request: x-amz-content-sha256");
    return false;
  }
  const auto hash = trim(hashes.front());
  if (hashes.size() > 1 || !is_valid_payload_hash(hash)) {
    fail(ec, errc::invalid_argument);
    return false;
  }
  out.payload_hash = hash;
  return true;
}

bool parse_query_authorization(const query_params& params, authorization& out, error_code& ec) {
  // Each parameter exactly once; S3 calls every failure here AuthorizationQueryParametersError.
  const auto one = [&](std::string_view name) -> std::optional<std::string_view> {
    std::optional<std::string_view> found;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (params.name(i) != name) continue;
      if (found) return std::nullopt;
      found = params.value(i);
    }
    return found;
  };
  const auto algorithm_value = one("X-Amz-Algorithm");
  const auto credential = one("X-Amz-Credential");
  const auto date = one("X-Amz-Date");
  const auto expires = one("X-Amz-Expires");
  const auto signed_headers = one("X-Amz-SignedHeaders");
  const auto signature_value = one("X-Amz-Signature");

  clear_claims(out);
  out.presigned = true;
  out.payload_hash = unsigned_payload;
  bool ok = algorithm_value && *algorithm_value == algorithm && credential && parse_credential(*credential, out) &&
            signed_headers && parse_signed_headers(*signed_headers, out) && signature_value &&
            parse_signature(*signature_value, out) && date && parse_basic(*date) && expires && !expires->empty() &&
            expires->size() <= 7 && std::all_of(expires->begin(), expires->end(), is_digit);
  if (ok) {
    out.amz_date = *date;
    out.expires = 0;
    for (const char c : *expires) out.expires = out.expires * 10 + static_cast<std::uint64_t>(c - '0');
    ok = out.expires >= 1 && out.expires <= max_presigned_expiry && out.amz_date.compare(0, 8, out.date) == 0;
  }
  if (!ok) {
    fail(ec, errc::authorization_query_parameters_error);
    return false;
  }
  return true;
}

// The signing key of a credential scope, derived once per thread for the last (secret, date,
// region, service) seen: four HMACs saved on every request of the same user and day. The secret
// is part of the key, so a reloaded secret derives anew.
std::array<std::byte, 32> cached_signing_key(std::string_view secret, const authorization& auth) {
  struct entry {
    std::string secret, date, region, service;
    std::array<std::byte, 32> key{};
    bool valid = false;
  };
  thread_local entry last;
  if (!last.valid || last.secret != secret || last.date != auth.date || last.region != auth.region ||
      last.service != auth.service) {
    last.key = signing_key(secret, auth.date, auth.region, auth.service);
    last.secret.assign(secret);
    last.date.assign(auth.date);
    last.region.assign(auth.region);
    last.service.assign(auth.service);
    last.valid = true;
  }
  return last.key;
}
}  // namespace sigv4_detail
}  // namespace

std::string authorization::scope() const {
  std::string out;
  out.append(date).append("/").append(region).append("/").append(service).append("/");
  out.append(sigv4_detail::scope_terminator);
  return out;
}

namespace {
// parse_authorization() into `out` (reused: its strings keep their memory); false on failure.
bool parse_authorization_into(const request_view& request, authorization& out, error_code& ec) {
  ec.clear();
  const auto headers = sigv4_detail::header_values(request, "authorization");
  thread_local sigv4_detail::query_params params;
  params.parse(sigv4_detail::split_target(request.target).second);
  bool query_auth = false;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto name = params.name(i);
    query_auth = query_auth || name == "X-Amz-Algorithm" || name == "X-Amz-Credential" || name == "X-Amz-Signature";
  }
  if (headers.size() > 1 || (!headers.empty() && query_auth)) {
    sigv4_detail::fail(ec, errc::invalid_argument, "Only one auth mechanism allowed");
    return false;
  }
  if (headers.size() == 1) return sigv4_detail::parse_header_authorization(request, headers.front(), out, ec);
  if (query_auth) return sigv4_detail::parse_query_authorization(params, out, ec);
  sigv4_detail::fail(ec, errc::access_denied);
  return false;
}
}  // namespace

authorization parse_authorization(const request_view& request, error_code& ec) {
  authorization out;
  if (!parse_authorization_into(request, out, ec)) return {};
  return out;
}

void verify(const request_view& request, const secret_lookup& secret_for, std::chrono::system_clock::time_point now,
            std::optional<std::string_view> required_region, verified& out, error_code& ec, std::string* why) {
  using sigv4_detail::fail;
  struct reason_scope {  // failures say why into `why` while this call runs
    explicit reason_scope(std::string* sink) : previous(std::exchange(sigv4_detail::failure_reason, sink)) {}
    ~reason_scope() { sigv4_detail::failure_reason = previous; }
    reason_scope(const reason_scope&) = delete;
    reason_scope& operator=(const reason_scope&) = delete;
    std::string* previous;
  } scope(why);
  // The claims parsed into this thread's authorization, whose strings keep their memory.
  thread_local authorization auth;
  if (!parse_authorization_into(request, auth, ec)) return;
  // A wrong service or region: S3 answers AuthorizationHeaderMalformed ("the region 'x' is
  // wrong; expecting 'y'") for header auth and AuthorizationQueryParametersError for presigned
  // URLs.
  if (auth.service != "s3" || (required_region && auth.region != *required_region)) {
    fail(ec, auth.presigned ? errc::authorization_query_parameters_error : errc::authorization_header_malformed);
    return;
  }
  if (!sigv4_detail::contains(auth.signed_headers, "host") ||
      (!auth.presigned && !sigv4_detail::contains(auth.signed_headers, "x-amz-content-sha256"))) {
    fail(ec, errc::access_denied,  // S3 and MinIO: headers that must be signed were not
         "There were headers present in the request which were not signed: host and x-amz-content-sha256 must be");
    return;
  }

  const auto time = parse_amz_date(auth.amz_date);  // parse_authorization() checked it
  if (!time) {
    fail(ec, errc::access_denied);
    return;
  }
  if (auth.presigned) {
    if (now > *time + std::chrono::seconds(auth.expires) || *time > now + max_clock_skew) {
      fail(ec, errc::access_denied, now > *time ? "Request has expired" : "Request is not valid yet");
      return;
    }
  } else if (now - *time > max_clock_skew || *time - now > max_clock_skew) {
    fail(ec, errc::request_time_too_skewed);
    return;
  }

  const auto secret = secret_for ? secret_for(auth.access_key_id) : std::nullopt;
  if (!secret) {
    fail(ec, errc::invalid_access_key_id);
    return;
  }
  out.key = sigv4_detail::cached_signing_key(*secret, auth);
  out.scope.clear();
  out.scope.append(auth.date).append("/").append(auth.region).append("/").append(auth.service).append("/");
  out.scope.append(sigv4_detail::scope_terminator);
  // The canonical request and the string to sign in this thread's buffers, the signature on the
  // stack: a verified request allocates only what `out` keeps.
  thread_local std::string canonical, to_sign;
  canonical.clear();
  to_sign.clear();
  sigv4_detail::append_canonical_request(canonical, request, auth.signed_headers, auth.payload_hash, auth.presigned);
  sigv4_detail::append_string_to_sign(to_sign, auth.amz_date, out.scope, canonical);
  std::array<char, 64> expected{};
  hex_into(expected, hmac_sha256(out.key, to_sign));
  if (!constant_time_equal(std::string_view(expected.data(), expected.size()), auth.signature)) {
    fail(ec, errc::signature_does_not_match);
    return;
  }
  out.access_key_id.assign(auth.access_key_id);
  out.amz_date.assign(auth.amz_date);
  out.payload_hash.assign(auth.payload_hash);
  out.seed_signature.assign(auth.signature);
  out.signed_headers.resize(auth.signed_headers.size());
  for (std::size_t i = 0; i < auth.signed_headers.size(); ++i) out.signed_headers[i].assign(auth.signed_headers[i]);
}

verified verify(const request_view& request, const secret_lookup& secret_for, std::chrono::system_clock::time_point now,
                std::optional<std::string_view> required_region, error_code& ec, std::string* why) {
  verified out;
  verify(request, secret_for, now, required_region, out, ec, why);
  if (ec) return {};
  return out;
}

}  // namespace sluice::s3
