// SPDX-License-Identifier: Apache-2.0
#include <sluice/names.hpp>

#include <doctest/doctest.h>

#include <string>
#include <string_view>

namespace {

struct name_case {
  std::string_view name;
  bool valid;
};

}  // namespace

TEST_CASE("bucket names follow the S3 rules") {
  const std::string len2(2, 'a');
  const std::string len3(3, 'a');
  const std::string len63(63, 'a');
  const std::string len64(64, 'a');
  const name_case cases[] = {
      {"", false},
      {"a", false},
      {len2, false},
      {len3, true},
      {len63, true},
      {len64, false},
      {"my-bucket", true},
      {"my.bucket.name", true},
      {"bucket1", true},
      {"123", true},
      {"0abc9", true},
      {"a-b", true},
      {"a.b", true},
      {"MyBucket", false},    // upper case
      {"mybucketA", false},   // upper case at the end
      {"my_bucket", false},   // underscore
      {"my bucket", false},   // space
      {"my..bucket", false},  // consecutive dots
      {"a..b", false},
      {"-bucket", false},      // starts with a hyphen
      {"bucket-", false},      // ends with a hyphen
      {".bucket", false},      // starts with a dot
      {"bucket.", false},      // ends with a dot
      {"192.168.5.4", false},  // shaped like an IPv4 address
      {"1.2.3.4", false},
      {"999.999.999.999", false},  // IPv4-shaped even though not a real address
      {"1.2.3", true},             // only two dots: not an address
      {"1.2.3.4.5", true},         // four dots: not an address
      {"1.2.3.4a", true},          // a letter: not an address
      {"1-2.3.4.5", true},
      {"bucket/key", false},
      {"buck\xc3\xa9t", false},  // non-ASCII
      {std::string_view("abc\0def", 7), false},
      // Prefixes and suffixes AWS reserves.
      {"xn--bucket", false},
      {"sthree-bucket", false},
      {"amzn-s3-demo-bucket", false},
      {"bucket-s3alias", false},
      {"bucket--ol-s3", false},
      {"bucket--x-s3", false},
      {"xn-bucket", true},
      {"bucket-s3alia", true},
      {"my-sthree-bucket", true},
  };
  for (const auto& c : cases) {
    CAPTURE(std::string(c.name));
    CHECK(sluice::is_valid_bucket_name(c.name) == c.valid);
  }
}

TEST_CASE("bucket name rules are usable at compile time") {
  static_assert(sluice::is_valid_bucket_name("constexpr-bucket"));
  static_assert(!sluice::is_valid_bucket_name("10.0.0.1"));
  CHECK(true);
}

TEST_CASE("object keys are 1 to 1024 bytes of anything") {
  CHECK(sluice::max_key_bytes == 1024);
  CHECK_FALSE(sluice::is_valid_object_key(""));
  CHECK(sluice::is_valid_object_key("k"));
  CHECK(sluice::is_valid_object_key(std::string(1023, 'k')));
  CHECK(sluice::is_valid_object_key(std::string(1024, 'k')));
  CHECK_FALSE(sluice::is_valid_object_key(std::string(1025, 'k')));
  CHECK_FALSE(sluice::is_valid_object_key(std::string(4096, 'k')));
  // Any byte values: slashes, dots, NUL, upper case, non-ASCII.
  CHECK(sluice::is_valid_object_key("../../etc/passwd"));
  CHECK(sluice::is_valid_object_key(std::string_view("a\0b", 3)));
  CHECK(sluice::is_valid_object_key("Dir/Sub Dir/\xc3\xa9.bin"));
}

TEST_CASE("object keys a plain listing can carry: UTF-8 without XML-1.0-invalid characters") {
  CHECK(sluice::is_xml_safe_utf8("k"));
  CHECK(sluice::is_xml_safe_utf8("Dir/Sub Dir/\xc3\xa9.bin"));         // é
  CHECK(sluice::is_xml_safe_utf8("tab\tnew\nline\rreturn"));           // allowed in XML 1.0
  CHECK(sluice::is_xml_safe_utf8("\xe2\x82\xac \xf0\x9f\x98\x80"));    // U+20AC, U+1F600
  CHECK(sluice::is_xml_safe_utf8("\xef\xbf\xbd"));                     // U+FFFD
  CHECK_FALSE(sluice::is_xml_safe_utf8(std::string_view("a\0b", 3)));  // NUL
  CHECK_FALSE(sluice::is_xml_safe_utf8("a\x01b"));                     // C0 control
  CHECK_FALSE(sluice::is_xml_safe_utf8("a\x1b[31m"));                  // escape
  CHECK_FALSE(sluice::is_xml_safe_utf8("\xff"));                       // not UTF-8
  CHECK_FALSE(sluice::is_xml_safe_utf8("\xc3"));                       // truncated
  CHECK_FALSE(sluice::is_xml_safe_utf8("\xc0\xaf"));                   // overlong '/'
  CHECK_FALSE(sluice::is_xml_safe_utf8("\xe0\x80\xaf"));               // overlong '/'
  CHECK_FALSE(sluice::is_xml_safe_utf8("\xed\xa0\x80"));               // surrogate U+D800
  CHECK_FALSE(sluice::is_xml_safe_utf8("\xef\xbf\xbe"));               // U+FFFE
  CHECK_FALSE(sluice::is_xml_safe_utf8("\xf4\x90\x80\x80"));           // past U+10FFFF
  static_assert(sluice::is_xml_safe_utf8("constexpr"));
}
