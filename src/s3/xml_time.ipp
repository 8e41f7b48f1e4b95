// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/xml.hpp, continued: the time formats S3 writes and reads
// (ISO 8601 in XML, the HTTP dates of RFC 9110 §5.6.7). Included by src/s3/s3.cpp after xml.ipp.
#include <sluice/s3/xml.hpp>

#include <array>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::s3::xml {

namespace {

// ------------------------------------------------------------------------------------------
// Time
// ------------------------------------------------------------------------------------------

constexpr std::array<std::string_view, 12> month_names = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
constexpr std::array<std::string_view, 7> short_day_names = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
constexpr std::array<std::string_view, 7> long_day_names = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                                            "Thursday", "Friday", "Saturday"};

struct civil_time {
  std::chrono::year_month_day date;
  int hour = 0;
  int minute = 0;
  int second = 0;
  int millisecond = 0;
  unsigned weekday = 0;  // 0 = Sunday
};

civil_time to_civil(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const auto ms = floor<milliseconds>(t);
  const auto day = floor<days>(ms);
  const hh_mm_ss<milliseconds> time_of_day(ms - day);
  return {year_month_day(day),
          static_cast<int>(time_of_day.hours().count()),
          static_cast<int>(time_of_day.minutes().count()),
          static_cast<int>(time_of_day.seconds().count()),
          static_cast<int>(time_of_day.subseconds().count()),
          weekday(day).c_encoding()};
}

// A cursor over the text of a date; each step consumes what it matched.
class date_reader {
 public:
  explicit date_reader(std::string_view text) noexcept : rest_(text) {}

  bool literal(std::string_view expected) noexcept {
    if (!rest_.starts_with(expected)) return false;
    rest_.remove_prefix(expected.size());
    return true;
  }
  // Exactly `count` decimal digits.
  bool digits(std::size_t count, int& value) noexcept {
    if (rest_.size() < count) return false;
    value = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const char c = rest_[i];
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
    }
    rest_.remove_prefix(count);
    return true;
  }
  // One of `names`.
  template <std::size_t N>
  bool one_of(const std::array<std::string_view, N>& names, unsigned& index) noexcept {
    for (std::size_t i = 0; i < N; ++i) {
      if (literal(names[i])) {
        index = static_cast<unsigned>(i);
        return true;
      }
    }
    return false;
  }
  bool month(unsigned& value) noexcept {
    if (!one_of(month_names, value)) return false;
    ++value;
    return true;
  }
  // "HH:MM:SS"
  bool time_of_day(int& hour, int& minute, int& second) noexcept {
    return digits(2, hour) && literal(":") && digits(2, minute) && literal(":") && digits(2, second);
  }
  [[nodiscard]] bool done() const noexcept { return rest_.empty(); }

 private:
  std::string_view rest_;
};

std::optional<std::chrono::system_clock::time_point> make_time(int year, unsigned month, int day, int hour, int minute,
                                                               int second) {
  using namespace std::chrono;
  const year_month_day date{std::chrono::year(year), std::chrono::month(month),
                            std::chrono::day(static_cast<unsigned>(day))};
  // RFC 7231 allows second 60 (a leap second); it lands on the next minute's first second.
  if (!date.ok() || hour > 23 || minute > 59 || second > 60) return std::nullopt;
  // In seconds every four-digit year fits; system_clock's own range (nanoseconds on Linux:
  // 1677..2262) does not hold them all.
  const sys_seconds t = sys_days(date) + hours(hour) + minutes(minute) + seconds(second);
  if (t < ceil<seconds>(system_clock::time_point::min()) || t > floor<seconds>(system_clock::time_point::max())) {
    return std::nullopt;
  }
  return time_point_cast<system_clock::duration>(t);
}

// "Sun, 06 Nov 1994 08:49:37 GMT"
std::optional<std::chrono::system_clock::time_point> parse_imf_fixdate(std::string_view text) {
  date_reader r(text);
  unsigned weekday = 0;
  unsigned month = 0;
  int day = 0;
  int year = 0;
  int hour = 0;
  int minute = 0;
  int second = 0;
  if (!(r.one_of(short_day_names, weekday) && r.literal(", ") && r.digits(2, day) && r.literal(" ") && r.month(month) &&
        r.literal(" ") && r.digits(4, year) && r.literal(" ") && r.time_of_day(hour, minute, second) &&
        r.literal(" GMT") && r.done())) {
    return std::nullopt;
  }
  return make_time(year, month, day, hour, minute, second);
}

// "Sunday, 06-Nov-94 08:49:37 GMT"
std::optional<std::chrono::system_clock::time_point> parse_rfc850_date(std::string_view text) {
  date_reader r(text);
  unsigned weekday = 0;
  unsigned month = 0;
  int day = 0;
  int two_digit_year = 0;
  int hour = 0;
  int minute = 0;
  int second = 0;
  if (!(r.one_of(long_day_names, weekday) && r.literal(", ") && r.digits(2, day) && r.literal("-") && r.month(month) &&
        r.literal("-") && r.digits(2, two_digit_year) && r.literal(" ") && r.time_of_day(hour, minute, second) &&
        r.literal(" GMT") && r.done())) {
    return std::nullopt;
  }
  // RFC 7231: a year more than 50 years in the future is the most recent past one with the
  // same last two digits.
  using namespace std::chrono;
  const int this_year = static_cast<int>(year_month_day(floor<days>(system_clock::now())).year());
  int year = this_year / 100 * 100 + two_digit_year;
  if (year > this_year + 50) year -= 100;
  return make_time(year, month, day, hour, minute, second);
}

// "Sun Nov  6 08:49:37 1994"
std::optional<std::chrono::system_clock::time_point> parse_asctime_date(std::string_view text) {
  date_reader r(text);
  unsigned weekday = 0;
  unsigned month = 0;
  int day = 0;
  int year = 0;
  int hour = 0;
  int minute = 0;
  int second = 0;
  if (!(r.one_of(short_day_names, weekday) && r.literal(" ") && r.month(month) && r.literal(" ") &&
        (r.literal(" ") ? r.digits(1, day) : r.digits(2, day)) && r.literal(" ") &&
        r.time_of_day(hour, minute, second) && r.literal(" ") && r.digits(4, year) && r.done())) {
    return std::nullopt;
  }
  return make_time(year, month, day, hour, minute, second);
}

}  // namespace

// --------------------------------------------------------------------------------------------
// Time formats
// --------------------------------------------------------------------------------------------

std::string iso8601(std::chrono::system_clock::time_point t) {
  const civil_time c = to_civil(t);
  std::array<char, 64> buffer{};
  const int n = std::snprintf(buffer.data(), buffer.size(), "%04d-%02u-%02uT%02d:%02d:%02d.%03dZ",
                              static_cast<int>(c.date.year()), static_cast<unsigned>(c.date.month()),
                              static_cast<unsigned>(c.date.day()), c.hour, c.minute, c.second, c.millisecond);
  return n > 0 ? std::string(buffer.data(), static_cast<std::size_t>(n)) : std::string();
}

std::array<char, 29> http_date_chars(std::chrono::system_clock::time_point t) noexcept {
  const civil_time c = to_civil(t);
  std::array<char, 29> out{};
  const auto put = [&](std::size_t at, std::string_view text) {
    std::copy(text.begin(), text.end(), out.begin() + at);
  };
  const auto digits = [&](std::size_t at, int value, std::size_t width) {
    for (std::size_t i = width; i-- > 0; value /= 10) out[at + i] = static_cast<char>('0' + value % 10);
  };
  put(0, short_day_names[c.weekday]);  // "Sun, 06 Nov 1994 08:49:37 GMT"
  put(3, ", ");
  digits(5, static_cast<int>(static_cast<unsigned>(c.date.day())), 2);
  out[7] = ' ';
  put(8, month_names[static_cast<unsigned>(c.date.month()) - 1]);
  out[11] = ' ';
  digits(12, static_cast<int>(c.date.year()), 4);
  out[16] = ' ';
  digits(17, c.hour, 2);
  out[19] = ':';
  digits(20, c.minute, 2);
  out[22] = ':';
  digits(23, c.second, 2);
  put(25, " GMT");
  return out;
}

std::string http_date(std::chrono::system_clock::time_point t) {
  const auto chars = http_date_chars(t);
  return {chars.data(), chars.size()};
}

std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view text) {
  if (auto t = parse_imf_fixdate(text)) return t;
  if (auto t = parse_rfc850_date(text)) return t;
  return parse_asctime_date(text);
}

}  // namespace sluice::s3::xml
