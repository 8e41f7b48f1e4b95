// Implementation of include/sluice/s3/sigv4.hpp, continued: parsing a request's SigV4
// authorization, from its Authorization header or a presigned URL's query (credential scope,
// signed headers, signature, date). Included by src/s3/s3.cpp after sigv4.ipp, whose helpers it
// uses (sigv4_detail: the query parameters, the dates, fail()).

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
  while (true) {
    const auto semi = text.find(';');
    const std::string_view name = text.substr(0, semi);
    if (!is_token(name)) return false;
    out.signed_headers.push_back(lower(name));
    if (semi == std::string_view::npos) return true;
    text = text.substr(semi + 1);
  }
}

bool parse_signature(std::string_view text, authorization& out) {
  if (text.size() != 64 || !is_hex(text)) return false;
  out.signature = text;
  return true;
}

authorization parse_header_authorization(const request_view& request, std::string_view value, error_code& ec) {
  authorization out;
  value = trim(value);
  if (value.starts_with("AWS ")) {
    fail(ec, errc::invalid_request, "Please use AWS4-HMAC-SHA256.");
    return {};
  }
  if (!value.starts_with(algorithm) || (value.size() > algorithm.size() && !is_blank(value[algorithm.size()]))) {
    fail(ec, errc::invalid_argument, "Unsupported Authorization Type");
    return {};
  }
  value = trim(value.substr(algorithm.size()));  // nothing left is malformed: no component

  bool have_credential = false, have_signed_headers = false, have_signature = false;
  while (true) {
    const auto comma = value.find(',');
    const std::string_view part = trim(value.substr(0, comma));
    const auto eq = part.find('=');
    if (eq == std::string_view::npos) {
      fail(ec, errc::authorization_header_malformed);
      return {};
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
      return {};
    }
    if (comma == std::string_view::npos) break;
    value = value.substr(comma + 1);
  }
  if (!have_credential || !have_signed_headers || !have_signature) {
    fail(ec, errc::authorization_header_malformed);
    return {};
  }

  const auto amz_dates = header_values(request, "x-amz-date");
  if (amz_dates.size() > 1) {
    fail(ec, errc::invalid_argument);
    return {};
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
    return {};
  }
  out.amz_date = format_amz_date(*time);
  if (out.amz_date.compare(0, 8, out.date) != 0) {
    fail(ec, errc::authorization_header_malformed, "The credential scope's date is not the request's date.");
    return {};
  }

  const auto hashes = header_values(request, "x-amz-content-sha256");
  if (hashes.empty()) {
    fail(ec, errc::invalid_request, "Missing required header for this request: x-amz-content-sha256");
    return {};
  }
  const auto hash = trim(hashes.front());
  if (hashes.size() > 1 || !is_valid_payload_hash(hash)) {
    fail(ec, errc::invalid_argument);
    return {};
  }
  out.payload_hash = hash;
  return out;
}

authorization parse_query_authorization(const query_params& params, error_code& ec) {
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

  authorization out;
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
    return {};
  }
  return out;
}

}  // namespace sigv4_detail
}  // namespace

std::string authorization::scope() const {
  std::string out;
  out.append(date).append("/").append(region).append("/").append(service).append("/");
  out.append(sigv4_detail::scope_terminator);
  return out;
}

authorization parse_authorization(const request_view& request, error_code& ec) {
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
    return {};
  }
  if (headers.size() == 1) return sigv4_detail::parse_header_authorization(request, headers.front(), ec);
  if (query_auth) return sigv4_detail::parse_query_authorization(params, ec);
  sigv4_detail::fail(ec, errc::access_denied);
  return {};
}

}  // namespace sluice::s3
