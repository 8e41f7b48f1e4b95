// SPDX-License-Identifier: Apache-2.0
#include <sluice/s3/xml.hpp>

#include <doctest/doctest.h>

#include <pugixml.hpp>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace xml = sluice::s3::xml;
using sluice::error_code;
using sluice::s3::errc;
using namespace std::chrono_literals;

constexpr std::string_view declaration = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
constexpr std::string_view s3_ns = "http://s3.amazonaws.com/doc/2006-03-01/";

// 2013-09-17T18:07:53Z, the time in S3's documentation examples.
std::chrono::system_clock::time_point sample_time() {
  using namespace std::chrono;
  return sys_days(year(2013) / 9 / 17) + 18h + 7min + 53s;
}

// Parses a writer's output back: it must start with the declaration and parse as one document.
struct parsed {
  pugi::xml_document doc;
  pugi::xml_node root;
};

void parse_back(parsed& out, const std::string& body) {
  REQUIRE(std::string_view(body).starts_with(declaration));
  const auto result = out.doc.load_buffer(body.data(), body.size(), pugi::parse_default | pugi::parse_ws_pcdata);
  REQUIRE_MESSAGE(result.status == pugi::status_ok, result.description() << " in " << body);
  out.root = out.doc.document_element();
}

std::string text(const pugi::xml_node& node, const char* path) { return node.first_element_by_path(path).text().get(); }

std::vector<std::string> texts(const pugi::xml_node& parent, const char* element, const char* child) {
  std::vector<std::string> out;
  for (const auto& node : parent.children(element)) out.emplace_back(node.child(child).text().get());
  return out;
}

std::string repeat_objects(std::size_t count) {
  std::string body = "<Delete>";
  for (std::size_t i = 0; i < count; ++i) body += "<Object><Key>k" + std::to_string(i) + "</Key></Object>";
  return body + "</Delete>";
}

sluice::object_info make_object(std::string key, std::uint64_t size, std::string etag) {
  sluice::object_info info;
  info.key = std::move(key);
  info.size = size;
  info.last_modified = sample_time();
  info.attributes.etag = std::move(etag);
  return info;
}

}  // namespace

// -------------------------------------------------------------------------------------------
// CompleteMultipartUpload
// -------------------------------------------------------------------------------------------

TEST_CASE("s3 xml: CompleteMultipartUpload bodies as real clients send them") {
  struct client_body {
    const char* client;
    std::string body;
  };
  const client_body bodies[] = {
      {"boto3 1.26 / awscli (botocore member order, literal quotes, no declaration)",
       R"(<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Part><ETag>"0cc175b9c0f1b6a831c399e269772661"</ETag><PartNumber>1</PartNumber></Part><Part><ETag>"92eb5ffee6ae2fec3ad71c777531578f"</ETag><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>)"},
      {"s3cmd (no namespace, PartNumber first)",
       R"(<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"0cc175b9c0f1b6a831c399e269772661"</ETag></Part><Part><PartNumber>2</PartNumber><ETag>"92eb5ffee6ae2fec3ad71c777531578f"</ETag></Part></CompleteMultipartUpload>)"},
      {"rclone / aws-sdk-go (quotes as &#34;)",
       R"(<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Part><ETag>&#34;0cc175b9c0f1b6a831c399e269772661&#34;</ETag><PartNumber>1</PartNumber></Part><Part><ETag>&#34;92eb5ffee6ae2fec3ad71c777531578f&#34;</ETag><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>)"},
      {"minio-js (unquoted ETags)",
       R"(<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>0cc175b9c0f1b6a831c399e269772661</ETag></Part><Part><PartNumber>2</PartNumber><ETag>92eb5ffee6ae2fec3ad71c777531578f</ETag></Part></CompleteMultipartUpload>)"},
      {"pretty-printed with a declaration and &quot;",
       "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\r\n<CompleteMultipartUpload "
       "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\r\n  <Part>\n    <PartNumber> 1 </PartNumber>\n    "
       "<ETag>\n&quot;0cc175b9c0f1b6a831c399e269772661&quot;\n</ETag>\n  </Part>\n  <Part>\n    "
       "<PartNumber>2</PartNumber>\n    <ETag>&quot;92eb5ffee6ae2fec3ad71c777531578f&quot;</ETag>\n  "
       "</Part>\n</CompleteMultipartUpload>\n"},
  };
  for (const auto& [client, body] : bodies) {
    CAPTURE(client);
    error_code ec = errc::internal_error;
    const auto parts = xml::parse_complete_multipart_upload(body, ec);
    REQUIRE_FALSE(ec);
    REQUIRE(parts.size() == 2);
    CHECK(parts[0] == xml::completed_part{1, "0cc175b9c0f1b6a831c399e269772661", {}});
    CHECK(parts[1] == xml::completed_part{2, "92eb5ffee6ae2fec3ad71c777531578f", {}});
  }
}

TEST_CASE("s3 xml: CompleteMultipartUpload with flexible checksums (boto3 1.43, JS SDK v3)") {
  const std::string body =
      R"(<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)"
      R"(<Part><ETag>"a"</ETag><ChecksumCRC32>NSRBwg==</ChecksumCRC32><PartNumber>1</PartNumber></Part>)"
      R"(<Part><ChecksumCRC32C>yZRlqg==</ChecksumCRC32C><ChecksumSHA1>qZk+NkcGgWq6PiVxeFDCbJzQ2J0=</ChecksumSHA1>)"
      R"(<ChecksumSHA256>47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=</ChecksumSHA256>)"
      R"(<ChecksumCRC64NVME>AAAAAAAAAAA=</ChecksumCRC64NVME><ETag>&quot;b&quot;</ETag><PartNumber>3</PartNumber>)"
      R"(<FutureElement>ignored</FutureElement></Part><Unknown/></CompleteMultipartUpload>)";
  error_code ec;
  const auto parts = xml::parse_complete_multipart_upload(body, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].number == 1);
  CHECK(parts[0].etag == "a");
  CHECK(parts[0].checksums == std::map<std::string, std::string>{{"crc32", "NSRBwg=="}});
  CHECK(parts[1].number == 3);
  CHECK(parts[1].etag == "b");
  CHECK(parts[1].checksums == std::map<std::string, std::string>{
                                  {"crc32c", "yZRlqg=="},
                                  {"sha1", "qZk+NkcGgWq6PiVxeFDCbJzQ2J0="},
                                  {"sha256", "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="},
                                  {"crc64nvme", "AAAAAAAAAAA="},
                              });
}

TEST_CASE("s3 xml: CompleteMultipartUpload part number limits") {
  const auto one = [](std::string_view number) {
    return "<CompleteMultipartUpload><Part><PartNumber>" + std::string(number) +
           "</PartNumber><ETag>\"e\"</ETag></Part></CompleteMultipartUpload>";
  };
  error_code ec;
  auto parts = xml::parse_complete_multipart_upload(one("10000"), ec);
  REQUIRE_FALSE(ec);
  CHECK(parts.at(0).number == 10000);
  parts = xml::parse_complete_multipart_upload(one("0001"), ec);
  REQUIRE_FALSE(ec);
  CHECK(parts.at(0).number == 1);

  for (const char* number : {"0", "10001", "4294967297", "99999999999999999999999999"}) {
    CAPTURE(number);
    CHECK(xml::parse_complete_multipart_upload(one(number), ec).empty());
    CHECK(ec == errc::invalid_argument);
  }
  for (const char* number : {"", " ", "one", "1.0", "-1", "+1", "0x10", "1 2", "1e3", "&#x31;x"}) {
    CAPTURE(number);
    CHECK(xml::parse_complete_multipart_upload(one(number), ec).empty());
    CHECK(ec == errc::malformed_xml);
  }
}

TEST_CASE("s3 xml: CompleteMultipartUpload part order") {
  const auto body = [](std::initializer_list<int> numbers) {
    std::string out = "<CompleteMultipartUpload>";
    for (const int n : numbers) out += "<Part><PartNumber>" + std::to_string(n) + "</PartNumber><ETag>x</ETag></Part>";
    return out + "</CompleteMultipartUpload>";
  };
  error_code ec;
  CHECK(xml::parse_complete_multipart_upload(body({1, 2, 5, 9}), ec).size() == 4);
  CHECK_FALSE(ec);
  CHECK(xml::parse_complete_multipart_upload(body({2, 1}), ec).empty());
  CHECK(ec == errc::invalid_part_order);
  CHECK(xml::parse_complete_multipart_upload(body({1, 1}), ec).empty());
  CHECK(ec == errc::invalid_part_order);
  // A number out of range outranks the order; a malformed part outranks both.
  CHECK(xml::parse_complete_multipart_upload(body({3, 0}), ec).empty());
  CHECK(ec == errc::invalid_argument);
  const std::string mixed =
      "<CompleteMultipartUpload><Part><PartNumber>2</PartNumber><ETag>x</ETag></Part>"
      "<Part><PartNumber>1</PartNumber><ETag>x</ETag></Part><Part><PartNumber>z</PartNumber><ETag>x</ETag></Part>"
      "</CompleteMultipartUpload>";
  CHECK(xml::parse_complete_multipart_upload(mixed, ec).empty());
  CHECK(ec == errc::malformed_xml);
}

TEST_CASE("s3 xml: malformed CompleteMultipartUpload bodies") {
  const std::string good = "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part>";
  const std::string end = "</CompleteMultipartUpload>";
  const std::pair<const char*, std::string> cases[] = {
      {"empty", ""},
      {"whitespace", "  \n"},
      {"not xml", "hello"},
      {"truncated", good},
      {"truncated in a tag", good.substr(0, good.size() - 4)},
      {"truncated in a part", "<CompleteMultipartUpload><Part><PartNumber>1</Part"},
      {"mismatched end tag", good + "</CompleteMultipartUploads>"},
      {"wrong root", "<Delete><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></Delete>"},
      {"prefixed root",
       "<s3:CompleteMultipartUpload xmlns:s3=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
       "<Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></s3:CompleteMultipartUpload>"},
      {"no parts", "<CompleteMultipartUpload></CompleteMultipartUpload>"},
      {"no parts, self-closed", "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"/>"},
      {"only unknown elements", "<CompleteMultipartUpload><Other/></CompleteMultipartUpload>"},
      {"part without ETag", "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part>" + end},
      {"part without number", "<CompleteMultipartUpload><Part><ETag>x</ETag></Part>" + end},
      {"two numbers",
       "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><PartNumber>2</PartNumber><ETag>x</ETag></Part>" +
           end},
      {"two ETags",
       "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag><ETag>y</ETag></Part>" + end},
      {"two CRC32",
       "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag>"
       "<ChecksumCRC32>a</ChecksumCRC32><ChecksumCRC32>b</ChecksumCRC32></Part>" +
           end},
      {"element in a number",
       "<CompleteMultipartUpload><Part><PartNumber><n>1</n></PartNumber><ETag>x</ETag></Part>" + end},
      {"element in an ETag",
       "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x<b/></ETag></Part>" + end},
      {"text in the root", "<CompleteMultipartUpload>junk<Part><PartNumber>1</PartNumber><ETag>x</ETag></Part>" + end},
      {"text in a part", "<CompleteMultipartUpload><Part>junk<PartNumber>1</PartNumber><ETag>x</ETag></Part>" + end},
      {"CDATA in the root",
       "<CompleteMultipartUpload><![CDATA[x]]><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part>" + end},
      {"text after the root", good + end + "junk"},
      {"two roots", good + end + good + end},
      {"doctype", "<!DOCTYPE CompleteMultipartUpload [<!ENTITY e \"1\">]>" + good + end},
      {"NUL inside", good + std::string(1, '\0') + end},
      {"NUL after the root", good + end + std::string(1, '\0') + "<x>"},
      {"bad attribute", "<CompleteMultipartUpload xmlns=><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part>" + end},
      {"unterminated comment", good + "<!-- " + end},
  };
  for (const auto& [what, body] : cases) {
    CAPTURE(what);
    error_code ec;
    CHECK(xml::parse_complete_multipart_upload(body, ec).empty());
    CHECK(ec == errc::malformed_xml);
  }
}

// -------------------------------------------------------------------------------------------
// DeleteObjects
// -------------------------------------------------------------------------------------------

TEST_CASE("s3 xml: DeleteObjects bodies as real clients send them") {
  SUBCASE("boto3 / awscli: namespace, Quiet after the objects, version ids") {
    const std::string body =
        R"(<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>dir/a.txt</Key></Object>)"
        R"(<Object><Key>b</Key><VersionId>3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY</VersionId></Object><Quiet>true</Quiet></Delete>)";
    error_code ec = errc::internal_error;
    const auto result = xml::parse_delete_objects(body, ec);
    REQUIRE_FALSE(ec);
    CHECK(result.quiet);
    REQUIRE(result.objects.size() == 2);
    CHECK(result.objects[0] == std::pair<std::string, std::string>{"dir/a.txt", ""});
    CHECK(result.objects[1] == std::pair<std::string, std::string>{"b", "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY"});
  }
  SUBCASE("s3cmd: declaration, no namespace, Quiet first") {
    const std::string body =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Delete><Quiet>false</Quiet>"
        "<Object><Key>x &amp; y</Key></Object></Delete>";
    error_code ec;
    const auto result = xml::parse_delete_objects(body, ec);
    REQUIRE_FALSE(ec);
    CHECK_FALSE(result.quiet);
    REQUIRE(result.objects.size() == 1);
    CHECK(result.objects[0].first == "x & y");
  }
  SUBCASE("no Quiet is verbose; Quiet in any case") {
    error_code ec;
    CHECK_FALSE(xml::parse_delete_objects("<Delete><Object><Key>k</Key></Object></Delete>", ec).quiet);
    CHECK_FALSE(ec);
    CHECK(xml::parse_delete_objects("<Delete><Quiet> True </Quiet><Object><Key>k</Key></Object></Delete>", ec).quiet);
    CHECK_FALSE(ec);
    CHECK_FALSE(
        xml::parse_delete_objects("<Delete><Quiet>FALSE</Quiet><Object><Key>k</Key></Object></Delete>", ec).quiet);
    CHECK_FALSE(ec);
  }
  SUBCASE("keys are kept verbatim: spaces, entities, CDATA, non-ASCII, newer elements ignored") {
    const std::string body =
        "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\n"
        "  <Object><Key>  </Key></Object>\n"
        "  <Object><Key> lead and trail </Key></Object>\n"
        "  <Object><Key>&lt;&gt;&amp;&quot;&apos;&#13;&#x9;</Key></Object>\n"
        "  <Object><Key><![CDATA[a<b]]>&amp;c</Key></Object>\n"
        "  <Object><Key>\xC3\xBC\xE2\x82\xAC/\xE6\x97\xA5\xE6\x9C\xAC</Key></Object>\n"
        "  <Object><Key>k</Key><ETag>\"e\"</ETag><LastModifiedTime>x</LastModifiedTime><Size>1</Size></Object>\n"
        "  <Object><Key></Key></Object>\n"
        "</Delete>\n";
    error_code ec;
    const auto result = xml::parse_delete_objects(body, ec);
    REQUIRE_FALSE(ec);
    REQUIRE(result.objects.size() == 7);
    CHECK(result.objects[0].first == "  ");
    CHECK(result.objects[1].first == " lead and trail ");
    CHECK(result.objects[2].first == "<>&\"'\r\t");
    CHECK(result.objects[3].first == "a<b&c");
    CHECK(result.objects[4].first == "\xC3\xBC\xE2\x82\xAC/\xE6\x97\xA5\xE6\x9C\xAC");
    CHECK(result.objects[5].first == "k");
    CHECK(result.objects[6].first.empty());
  }
  SUBCASE("the limit: 1000 objects") {
    error_code ec;
    const auto result = xml::parse_delete_objects(repeat_objects(1000), ec);
    CHECK_FALSE(ec);
    CHECK(result.objects.size() == 1000);
    CHECK(result.objects.back().first == "k999");
  }
}

TEST_CASE("s3 xml: malformed DeleteObjects bodies") {
  const std::pair<const char*, std::string> cases[] = {
      {"empty", ""},
      {"1001 objects", repeat_objects(1001)},
      {"no objects", "<Delete><Quiet>true</Quiet></Delete>"},
      {"self-closed", "<Delete/>"},
      {"truncated", "<Delete><Object><Key>k</Key></Object>"},
      {"truncated in a key", "<Delete><Object><Key>k"},
      {"wrong root", "<CompleteMultipartUpload><Object><Key>k</Key></Object></CompleteMultipartUpload>"},
      {"object without key", "<Delete><Object><VersionId>v</VersionId></Object></Delete>"},
      {"two keys", "<Delete><Object><Key>a</Key><Key>b</Key></Object></Delete>"},
      {"two version ids",
       "<Delete><Object><Key>a</Key><VersionId>1</VersionId><VersionId>2</VersionId></Object></Delete>"},
      {"element in a key", "<Delete><Object><Key>a<i>b</i></Key></Object></Delete>"},
      {"text in an object", "<Delete><Object>x<Key>a</Key></Object></Delete>"},
      {"Quiet not a boolean", "<Delete><Quiet>yes</Quiet><Object><Key>a</Key></Object></Delete>"},
      {"Quiet empty", "<Delete><Quiet/><Object><Key>a</Key></Object></Delete>"},
      {"two Quiet", "<Delete><Quiet>true</Quiet><Quiet>true</Quiet><Object><Key>a</Key></Object></Delete>"},
      {"doctype", "<!DOCTYPE Delete><Delete><Object><Key>a</Key></Object></Delete>"},
  };
  for (const auto& [what, body] : cases) {
    CAPTURE(what);
    error_code ec;
    const auto result = xml::parse_delete_objects(body, ec);
    CHECK(ec == errc::malformed_xml);
    CHECK(result.objects.empty());
    CHECK_FALSE(result.quiet);
  }
}

// -------------------------------------------------------------------------------------------
// CreateBucketConfiguration
// -------------------------------------------------------------------------------------------

TEST_CASE("s3 xml: CreateBucketConfiguration") {
  error_code ec = errc::internal_error;
  CHECK(xml::parse_create_bucket_configuration("", ec).empty());
  CHECK_FALSE(ec);
  ec = errc::internal_error;
  CHECK(xml::parse_create_bucket_configuration(" \r\n", ec).empty());
  CHECK_FALSE(ec);

  // aws s3 mb --region eu-west-1 (botocore)
  CHECK(
      xml::parse_create_bucket_configuration(
          R"(<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>)",
          ec) == "eu-west-1");
  CHECK_FALSE(ec);
  // s3cmd
  CHECK(xml::parse_create_bucket_configuration(
            "<CreateBucketConfiguration><LocationConstraint> EU\n</LocationConstraint></CreateBucketConfiguration>",
            ec) == "EU");
  CHECK_FALSE(ec);
  CHECK(xml::parse_create_bucket_configuration("<?xml version=\"1.0\"?>\n<CreateBucketConfiguration/>\n", ec).empty());
  CHECK_FALSE(ec);
  CHECK(xml::parse_create_bucket_configuration(
            "<CreateBucketConfiguration><Location><Name>x</Name></Location><LocationConstraint>us-west-2</"
            "LocationConstraint></CreateBucketConfiguration>",
            ec) == "us-west-2");
  CHECK_FALSE(ec);

  for (const char* body : {
           "<CreateBucketConfiguration>",
           "<CreateBucketConfiguration><LocationConstraint>eu-west-1</LocationConstraint>",
           "<Delete><LocationConstraint>eu-west-1</LocationConstraint></Delete>",
           "<CreateBucketConfiguration><LocationConstraint>a</LocationConstraint><LocationConstraint>b</"
           "LocationConstraint></CreateBucketConfiguration>",
           "<CreateBucketConfiguration><LocationConstraint><x/></LocationConstraint></CreateBucketConfiguration>",
           "<CreateBucketConfiguration>eu-west-1</CreateBucketConfiguration>",
           "eu-west-1",
       }) {
    CAPTURE(body);
    CHECK(xml::parse_create_bucket_configuration(body, ec).empty());
    CHECK(ec == errc::malformed_xml);
  }
}

// -------------------------------------------------------------------------------------------
// Writers
// -------------------------------------------------------------------------------------------

TEST_CASE("s3 xml: error body has no namespace and escapes its text") {
  const std::string body =
      xml::error_body("NoSuchKey", "The specified key does not exist.", "/b/a&b<c>", "4442587FB7D0A2F9");
  CHECK(body ==
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code><Message>The specified key does not "
        "exist.</Message><Resource>/b/a&amp;b&lt;c&gt;</Resource><RequestId>4442587FB7D0A2F9</RequestId></Error>");
  parsed p;
  parse_back(p, body);
  CHECK(std::string_view(p.root.name()) == "Error");
  CHECK(p.root.attribute("xmlns").empty());
  CHECK(text(p.root, "Resource") == "/b/a&b<c>");
}

TEST_CASE("s3 xml: ListBuckets") {
  const sluice::bucket_info buckets[] = {{"alpha", sample_time()}, {"beta", sample_time() + 1500ms}};
  parsed p;
  parse_back(p,
             xml::list_buckets("75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a", "me&you", buckets));
  CHECK(std::string_view(p.root.name()) == "ListAllMyBucketsResult");
  CHECK(p.root.attribute("xmlns").value() == s3_ns);
  CHECK(text(p.root, "Owner/ID") == "75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a");
  CHECK(text(p.root, "Owner/DisplayName") == "me&you");
  const auto list = p.root.child("Buckets");
  CHECK(texts(list, "Bucket", "Name") == std::vector<std::string>{"alpha", "beta"});
  CHECK(texts(list, "Bucket", "CreationDate") ==
        std::vector<std::string>{"2013-09-17T18:07:53.000Z", "2013-09-17T18:07:54.500Z"});

  parse_back(p, xml::list_buckets("id", "name", {}));
  CHECK(p.root.child("Buckets"));
  CHECK_FALSE(p.root.child("Buckets").first_child());
}

TEST_CASE("s3 xml: ListObjects v1 structure and escaping") {
  const std::string tricky = "a&b<c>d\"e'f \xC3\xBC\xE2\x82\xAC\xE6\x97\xA5 \r\n\x01/end";
  xml::list_page page;
  page.bucket = "bucket";
  page.prefix = "";
  page.delimiter = "/";
  page.marker = "m<";
  page.next_marker = tricky;
  page.max_keys = 2;
  page.truncated = true;
  page.owner_id = "owner-id";
  page.owner_name = "owner";
  page.contents = {make_object(tricky, 11, "9b2cf535f27731c974343645a3985328"), make_object("plain", 0, "")};
  page.contents[0].attributes.checksums = {{"crc32", "NSRBwg=="}};
  page.common_prefixes = {"dir/", "x&y/"};

  const std::string body = xml::list_objects_v1(page);
  // S3's escapes, byte for byte.
  CHECK(body.find("<Key>a&amp;b&lt;c&gt;d&quot;e&apos;f \xC3\xBC\xE2\x82\xAC\xE6\x97\xA5 &#13;&#10;&#1;/end</Key>") !=
        std::string::npos);
  CHECK(body.find("<ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag>") != std::string::npos);

  parsed p;
  parse_back(p, body);
  const auto root = p.root;
  CHECK(std::string_view(root.name()) == "ListBucketResult");
  CHECK(root.attribute("xmlns").value() == s3_ns);
  CHECK(text(root, "Name") == "bucket");
  CHECK(root.child("Prefix"));
  CHECK(text(root, "Prefix").empty());
  CHECK(text(root, "Marker") == "m<");
  CHECK(text(root, "NextMarker") == tricky);
  CHECK(text(root, "MaxKeys") == "2");
  CHECK(text(root, "Delimiter") == "/");
  CHECK(text(root, "IsTruncated") == "true");
  CHECK_FALSE(root.child("EncodingType"));
  CHECK_FALSE(root.child("KeyCount"));

  const auto first = root.child("Contents");
  CHECK(text(first, "Key") == tricky);
  CHECK(text(first, "LastModified") == "2013-09-17T18:07:53.000Z");
  CHECK(text(first, "ETag") == "\"9b2cf535f27731c974343645a3985328\"");
  CHECK(text(first, "Size") == "11");
  CHECK(text(first, "StorageClass") == "STANDARD");
  CHECK(text(first, "ChecksumAlgorithm") == "CRC32");
  CHECK(text(first, "Owner/ID") == "owner-id");
  CHECK(text(first, "Owner/DisplayName") == "owner");
  const auto second = first.next_sibling("Contents");
  CHECK(text(second, "Key") == "plain");
  CHECK(text(second, "Size") == "0");
  CHECK(text(second, "ETag") == "\"\"");
  CHECK_FALSE(second.child("ChecksumAlgorithm"));
  CHECK(texts(root, "CommonPrefixes", "Prefix") == std::vector<std::string>{"dir/", "x&y/"});

  // Without a delimiter or a next marker, neither is written; Prefix and Marker always are.
  page.delimiter.clear();
  page.next_marker.clear();
  page.truncated = false;
  parse_back(p, xml::list_objects_v1(page));
  CHECK_FALSE(p.root.child("Delimiter"));
  CHECK_FALSE(p.root.child("NextMarker"));
  CHECK(p.root.child("Marker"));
  CHECK(text(p.root, "IsTruncated") == "false");
}

TEST_CASE("s3 xml: encoding-type=url") {
  xml::list_page page;
  page.bucket = "b";
  page.prefix = "dir one/";
  page.delimiter = "/";
  page.marker = "dir one/a b";
  page.next_marker = "dir one/z+z";
  page.start_after = "dir one/~a";
  page.continuation_token = "token+/=";
  page.url_encode = true;
  page.contents = {make_object("dir one/my file&\xC3\xBC.txt", 1, "e"), make_object("dir one/A-Z_a.z~0/9", 2, "e")};
  page.common_prefixes = {"dir one/sub dir/"};

  parsed p;
  parse_back(p, xml::list_objects_v1(page));
  CHECK(text(p.root, "EncodingType") == "url");
  CHECK(text(p.root, "Prefix") == "dir one/");  // v1's Prefix is never url-encoded (S3, botocore)
  CHECK(text(p.root, "Delimiter") == "/");
  CHECK(text(p.root, "Marker") == "dir%20one/a%20b");
  CHECK(text(p.root, "NextMarker") == "dir%20one/z%2Bz");
  CHECK(texts(p.root, "Contents", "Key") ==
        std::vector<std::string>{"dir%20one/my%20file%26%C3%BC.txt", "dir%20one/A-Z_a.z~0/9"});
  CHECK(texts(p.root, "CommonPrefixes", "Prefix") == std::vector<std::string>{"dir%20one/sub%20dir/"});

  parse_back(p, xml::list_objects_v2(page));
  CHECK(text(p.root, "EncodingType") == "url");
  CHECK(text(p.root, "Prefix") == "dir%20one/");
  CHECK(text(p.root, "StartAfter") == "dir%20one/~a");
  CHECK(text(p.root, "ContinuationToken") == "token+/=");  // opaque, never encoded
  CHECK(texts(p.root, "Contents", "Key").at(0) == "dir%20one/my%20file%26%C3%BC.txt");

  parse_back(p, xml::list_object_versions(page));
  CHECK(text(p.root, "EncodingType") == "url");
  CHECK(text(p.root, "KeyMarker") == "dir%20one/a%20b");
  CHECK(text(p.root, "NextKeyMarker") == "dir%20one/z%2Bz");
  CHECK(texts(p.root, "Version", "Key").at(0) == "dir%20one/my%20file%26%C3%BC.txt");
  CHECK(texts(p.root, "CommonPrefixes", "Prefix") == std::vector<std::string>{"dir%20one/sub%20dir/"});
}

TEST_CASE("s3 xml: ListObjectsV2") {
  xml::list_page page;
  page.bucket = "bucket";
  page.prefix = "p/";
  page.delimiter = "/";
  page.max_keys = 3;
  page.truncated = true;
  page.next_continuation_token = "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=";
  page.owner_id = "must-not-appear";
  page.contents = {make_object("p/a", 5, "e1"), make_object("p/b", 6, "e2")};
  page.common_prefixes = {"p/c/"};

  parsed p;
  parse_back(p, xml::list_objects_v2(page));
  const auto root = p.root;
  CHECK(std::string_view(root.name()) == "ListBucketResult");
  CHECK(root.attribute("xmlns").value() == s3_ns);
  CHECK(text(root, "Name") == "bucket");
  CHECK(text(root, "Prefix") == "p/");
  CHECK(text(root, "KeyCount") == "3");
  CHECK(text(root, "MaxKeys") == "3");
  CHECK(text(root, "Delimiter") == "/");
  CHECK(text(root, "IsTruncated") == "true");
  CHECK(text(root, "NextContinuationToken") == "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
  CHECK_FALSE(root.child("ContinuationToken"));
  CHECK_FALSE(root.child("StartAfter"));
  CHECK_FALSE(root.child("Marker"));
  CHECK(texts(root, "Contents", "Key") == std::vector<std::string>{"p/a", "p/b"});
  CHECK(texts(root, "Contents", "ETag") == std::vector<std::string>{"\"e1\"", "\"e2\""});
  CHECK(texts(root, "Contents", "Size") == std::vector<std::string>{"5", "6"});
  CHECK(texts(root, "Contents", "StorageClass") == std::vector<std::string>{"STANDARD", "STANDARD"});
  CHECK(texts(root, "Contents", "LastModified").at(1) == "2013-09-17T18:07:53.000Z");
  CHECK_FALSE(root.child("Contents").child("Owner"));
  CHECK(texts(root, "CommonPrefixes", "Prefix") == std::vector<std::string>{"p/c/"});

  page.continuation_token = "abc";
  page.start_after = "p/0";
  page.contents.clear();
  page.common_prefixes.clear();
  page.truncated = false;
  page.next_continuation_token.clear();
  parse_back(p, xml::list_objects_v2(page));
  CHECK(text(p.root, "KeyCount") == "0");
  CHECK(text(p.root, "ContinuationToken") == "abc");
  CHECK(text(p.root, "StartAfter") == "p/0");
  CHECK_FALSE(p.root.child("NextContinuationToken"));
  CHECK_FALSE(p.root.child("Contents"));
}

TEST_CASE("s3 xml: ListObjectVersions of a bucket without versioning") {
  xml::list_page page;
  page.bucket = "bucket";
  page.marker = "a";
  page.next_marker = "c";
  page.truncated = true;
  page.owner_id = "id";
  page.owner_name = "name";
  page.contents = {make_object("b", 1, "e1"), make_object("c", 2, "e2")};

  parsed p;
  parse_back(p, xml::list_object_versions(page));
  const auto root = p.root;
  CHECK(std::string_view(root.name()) == "ListVersionsResult");
  CHECK(root.attribute("xmlns").value() == s3_ns);
  CHECK(text(root, "Name") == "bucket");
  CHECK(text(root, "KeyMarker") == "a");
  CHECK(root.child("VersionIdMarker"));
  CHECK(text(root, "NextKeyMarker") == "c");
  CHECK(text(root, "NextVersionIdMarker") == "null");
  CHECK(text(root, "IsTruncated") == "true");
  CHECK(texts(root, "Version", "Key") == std::vector<std::string>{"b", "c"});
  CHECK(texts(root, "Version", "VersionId") == std::vector<std::string>{"null", "null"});
  CHECK(texts(root, "Version", "IsLatest") == std::vector<std::string>{"true", "true"});
  CHECK(texts(root, "Version", "ETag") == std::vector<std::string>{"\"e1\"", "\"e2\""});
  CHECK(texts(root, "Version", "Size") == std::vector<std::string>{"1", "2"});
  CHECK(texts(root, "Version", "StorageClass") == std::vector<std::string>{"STANDARD", "STANDARD"});
  CHECK(text(root.child("Version"), "Owner/ID") == "id");
  CHECK_FALSE(root.child("Contents"));
  CHECK_FALSE(root.child("DeleteMarker"));

  page.next_marker.clear();
  parse_back(p, xml::list_object_versions(page));
  CHECK_FALSE(p.root.child("NextKeyMarker"));
  CHECK_FALSE(p.root.child("NextVersionIdMarker"));
}

TEST_CASE("s3 xml: multipart upload results") {
  parsed p;
  parse_back(p, xml::initiate_multipart_upload("bucket", "dir/a&b.bin", "VXBsb2FkIElE"));
  CHECK(std::string_view(p.root.name()) == "InitiateMultipartUploadResult");
  CHECK(p.root.attribute("xmlns").value() == s3_ns);
  CHECK(text(p.root, "Bucket") == "bucket");
  CHECK(text(p.root, "Key") == "dir/a&b.bin");
  CHECK(text(p.root, "UploadId") == "VXBsb2FkIElE");

  const std::string body =
      xml::complete_multipart_upload("http://h/bucket/a%20b", "bucket", "a b", "3858f62230ac3c915f300c664312c11f-9");
  CHECK(body.find("<ETag>&quot;3858f62230ac3c915f300c664312c11f-9&quot;</ETag>") != std::string::npos);
  parse_back(p, body);
  CHECK(std::string_view(p.root.name()) == "CompleteMultipartUploadResult");
  CHECK(p.root.attribute("xmlns").value() == s3_ns);
  CHECK(text(p.root, "Location") == "http://h/bucket/a%20b");
  CHECK(text(p.root, "Bucket") == "bucket");
  CHECK(text(p.root, "Key") == "a b");
  CHECK(text(p.root, "ETag") == "\"3858f62230ac3c915f300c664312c11f-9\"");

  // An ETag already quoted is not quoted twice.
  parse_back(p, xml::complete_multipart_upload("l", "b", "k", "\"abc-2\""));
  CHECK(text(p.root, "ETag") == "\"abc-2\"");
}

TEST_CASE("s3 xml: ListParts") {
  std::vector<sluice::part_info> parts(2);
  parts[0] = {1, 5242880, "7778aef83f66abc1fa1e8477f296d394", sample_time(), {{"crc32", "NSRBwg=="}}};
  parts[1] = {3, 1024, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", sample_time() + 1s, {{"sha256", "47DEQ="}, {"bogus", "x"}}};
  parsed p;
  parse_back(p, xml::list_parts("bucket", "k&y", "upload", parts, 2, true, 3, 0));
  const auto root = p.root;
  CHECK(std::string_view(root.name()) == "ListPartsResult");
  CHECK(root.attribute("xmlns").value() == s3_ns);
  CHECK(text(root, "Bucket") == "bucket");
  CHECK(text(root, "Key") == "k&y");
  CHECK(text(root, "UploadId") == "upload");
  CHECK(text(root, "PartNumberMarker") == "0");
  CHECK(text(root, "NextPartNumberMarker") == "3");
  CHECK(text(root, "MaxParts") == "2");
  CHECK(text(root, "IsTruncated") == "true");
  CHECK(text(root, "StorageClass") == "STANDARD");
  CHECK(texts(root, "Part", "PartNumber") == std::vector<std::string>{"1", "3"});
  CHECK(texts(root, "Part", "Size") == std::vector<std::string>{"5242880", "1024"});
  CHECK(texts(root, "Part", "ETag") ==
        std::vector<std::string>{"\"7778aef83f66abc1fa1e8477f296d394\"", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\""});
  CHECK(texts(root, "Part", "LastModified") ==
        std::vector<std::string>{"2013-09-17T18:07:53.000Z", "2013-09-17T18:07:54.000Z"});
  CHECK(texts(root, "Part", "ChecksumCRC32") == std::vector<std::string>{"NSRBwg==", ""});
  CHECK(texts(root, "Part", "ChecksumSHA256") == std::vector<std::string>{"", "47DEQ="});

  parse_back(p, xml::list_parts("b", "k", "u", {}, 1000, false, 0, 7));
  CHECK(text(p.root, "PartNumberMarker") == "7");
  CHECK(text(p.root, "IsTruncated") == "false");
  CHECK_FALSE(p.root.child("Part"));
}

TEST_CASE("s3 xml: ListMultipartUploads") {
  std::vector<sluice::upload_info> uploads(2);
  uploads[0].key = "a/one";
  uploads[0].upload_id = "id1";
  uploads[0].initiated = sample_time();
  uploads[1].key = "a/<two>";
  uploads[1].upload_id = "id2";
  uploads[1].initiated = sample_time() + 2s;
  parsed p;
  parse_back(p, xml::list_multipart_uploads("bucket", "a/", uploads, "oid", "oname"));
  const auto root = p.root;
  CHECK(std::string_view(root.name()) == "ListMultipartUploadsResult");
  CHECK(root.attribute("xmlns").value() == s3_ns);
  CHECK(text(root, "Bucket") == "bucket");
  CHECK(text(root, "Prefix") == "a/");
  CHECK(text(root, "IsTruncated") == "false");
  CHECK(text(root, "MaxUploads") == "1000");
  CHECK(root.child("KeyMarker"));
  CHECK(root.child("UploadIdMarker"));
  CHECK(texts(root, "Upload", "Key") == std::vector<std::string>{"a/one", "a/<two>"});
  CHECK(texts(root, "Upload", "UploadId") == std::vector<std::string>{"id1", "id2"});
  CHECK(texts(root, "Upload", "Initiated") ==
        std::vector<std::string>{"2013-09-17T18:07:53.000Z", "2013-09-17T18:07:55.000Z"});
  CHECK(texts(root, "Upload", "StorageClass") == std::vector<std::string>{"STANDARD", "STANDARD"});
  CHECK(text(root.child("Upload"), "Initiator/ID") == "oid");
  CHECK(text(root.child("Upload"), "Owner/DisplayName") == "oname");

  parse_back(p, xml::list_multipart_uploads("bucket", "", {}));
  CHECK_FALSE(p.root.child("Upload"));
  CHECK(p.root.child("Prefix"));
}

TEST_CASE("s3 xml: copy results") {
  parsed p;
  parse_back(p, xml::copy_object_result("9b2cf535f27731c974343645a3985328", sample_time() + 7ms));
  CHECK(std::string_view(p.root.name()) == "CopyObjectResult");
  CHECK(p.root.attribute("xmlns").value() == s3_ns);
  CHECK(text(p.root, "ETag") == "\"9b2cf535f27731c974343645a3985328\"");
  CHECK(text(p.root, "LastModified") == "2013-09-17T18:07:53.007Z");

  parse_back(p, xml::copy_part_result("abc", sample_time()));
  CHECK(std::string_view(p.root.name()) == "CopyPartResult");
  CHECK(p.root.attribute("xmlns").value() == s3_ns);
  CHECK(text(p.root, "ETag") == "\"abc\"");
  CHECK(text(p.root, "LastModified") == "2013-09-17T18:07:53.000Z");
}

TEST_CASE("s3 xml: DeleteResult, verbose and quiet") {
  const std::vector<std::string> deleted = {"a", "b&c"};
  const std::vector<xml::delete_outcome> errors = {{"locked<", "AccessDenied", "Access Denied"}};
  parsed p;
  parse_back(p, xml::delete_result(deleted, errors, false));
  CHECK(std::string_view(p.root.name()) == "DeleteResult");
  CHECK(p.root.attribute("xmlns").value() == s3_ns);
  CHECK(texts(p.root, "Deleted", "Key") == std::vector<std::string>{"a", "b&c"});
  CHECK(texts(p.root, "Error", "Key") == std::vector<std::string>{"locked<"});
  CHECK(texts(p.root, "Error", "Code") == std::vector<std::string>{"AccessDenied"});
  CHECK(texts(p.root, "Error", "Message") == std::vector<std::string>{"Access Denied"});

  parse_back(p, xml::delete_result(deleted, errors, true));
  CHECK_FALSE(p.root.child("Deleted"));
  CHECK(texts(p.root, "Error", "Key") == std::vector<std::string>{"locked<"});

  parse_back(p, xml::delete_result(deleted, {}, true));
  CHECK_FALSE(p.root.first_child());
}

TEST_CASE("s3 xml: LocationConstraint") {
  parsed p;
  parse_back(p, xml::location_constraint("eu-west-1"));
  CHECK(std::string_view(p.root.name()) == "LocationConstraint");
  CHECK(p.root.attribute("xmlns").value() == s3_ns);
  CHECK(std::string(p.root.text().get()) == "eu-west-1");
  for (const char* region : {"us-east-1", ""}) {
    CAPTURE(region);
    const std::string body = xml::location_constraint(region);
    parse_back(p, body);
    CHECK(std::string_view(p.root.name()) == "LocationConstraint");
    CHECK_FALSE(p.root.first_child());
  }
}

// -------------------------------------------------------------------------------------------
// Time formats
// -------------------------------------------------------------------------------------------

TEST_CASE("s3 xml: iso8601 and http_date") {
  using namespace std::chrono;
  CHECK(xml::iso8601(sample_time()) == "2013-09-17T18:07:53.000Z");
  CHECK(xml::iso8601(sample_time() + 123ms + 999us) == "2013-09-17T18:07:53.123Z");
  CHECK(xml::iso8601(system_clock::time_point{}) == "1970-01-01T00:00:00.000Z");
  CHECK(xml::iso8601(system_clock::time_point{} - 1ms) == "1969-12-31T23:59:59.999Z");
  CHECK(xml::iso8601(sys_days(year(2024) / 2 / 29) + 23h + 59min + 59s + 999ms) == "2024-02-29T23:59:59.999Z");

  CHECK(xml::http_date(sample_time()) == "Tue, 17 Sep 2013 18:07:53 GMT");
  CHECK(xml::http_date(sample_time() + 999ms) == "Tue, 17 Sep 2013 18:07:53 GMT");
  CHECK(xml::http_date(system_clock::time_point{}) == "Thu, 01 Jan 1970 00:00:00 GMT");
  CHECK(xml::http_date(sys_days(year(1994) / 11 / 6) + 8h + 49min + 37s) == "Sun, 06 Nov 1994 08:49:37 GMT");
  const auto chars = xml::http_date_chars(sys_days(year(2024) / 2 / 29) + 23h + 5min + 9s);
  CHECK(std::string_view(chars.data(), chars.size()) == "Thu, 29 Feb 2024 23:05:09 GMT");
  CHECK(xml::http_date(system_clock::time_point::min()).substr(12, 4) == "1677");
}

TEST_CASE("s3 xml: parse_http_date accepts the three forms of RFC 7231") {
  using namespace std::chrono;
  const system_clock::time_point expected = sys_days(year(1994) / 11 / 6) + 8h + 49min + 37s;
  CHECK(xml::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT") == expected);
  CHECK(xml::parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT") == expected);
  CHECK(xml::parse_http_date("Sun Nov  6 08:49:37 1994") == expected);
  CHECK(xml::parse_http_date("Sun Nov 16 08:49:37 1994") == expected + days(10));
  CHECK(xml::parse_http_date("Sun Nov 06 08:49:37 1994") == expected);  // 2DIGIT is allowed too
  // RFC 850: a two-digit year never lands more than 50 years in the future.
  const auto rfc850 = xml::parse_http_date("Thursday, 01-Jan-15 00:00:00 GMT");
  REQUIRE(rfc850.has_value());
  CHECK(*rfc850 == sys_days(year(2015) / 1 / 1));
  CHECK(xml::parse_http_date("Saturday, 01-Jan-00 00:00:00 GMT") ==
        system_clock::time_point(sys_days(year(2000) / 1 / 1)));
  // The leap second of RFC 7231's grammar.
  CHECK(xml::parse_http_date("Sat, 31 Dec 2016 23:59:60 GMT") ==
        system_clock::time_point(sys_days(year(2017) / 1 / 1)));

  for (const char* bad : {
           "",
           "Sun, 06 Nov 1994 08:49:37",
           "Sun, 06 Nov 1994 08:49:37 UTC",
           "Sun, 06 Nov 1994 08:49:37 GMT ",
           " Sun, 06 Nov 1994 08:49:37 GMT",
           "sun, 06 Nov 1994 08:49:37 GMT",
           "Sun, 06 nov 1994 08:49:37 GMT",
           "Sun, 6 Nov 1994 08:49:37 GMT",
           "Sun, 06 Nov 94 08:49:37 GMT",
           "Sun, 31 Feb 1994 08:49:37 GMT",
           "Sun, 00 Nov 1994 08:49:37 GMT",
           "Sun, 06 Nov 1994 24:00:00 GMT",
           "Sun, 06 Nov 1994 08:60:00 GMT",
           "Sun, 06 Nov 1994 08:49:61 GMT",
           "Sun, 06 Nov 1994 8:49:37 GMT",
           "Sun, 06 Nov 1994 08:49:3x GMT",
           "Xyz, 06 Nov 1994 08:49:37 GMT",
           "Sun, 06 Foo 1994 08:49:37 GMT",
           "Sun, 06-Nov-94 08:49:37 GMT",
           "Sunday, 06-Nov-1994 08:49:37 GMT",
           "Sunday, 06 Nov 1994 08:49:37 GMT",
           "Sun Nov 6 08:49:37 1994",
           "Sun Nov  6 08:49:37 94",
           "Sun Nov  6 08:49:37 1994 GMT",
           "1994-11-06T08:49:37Z",
           "784111777",
           "Fri, 31 Dec 9999 23:59:59 GMT",  // past the end of system_clock
           "Sat, 01 Jan 0000 00:00:00 GMT",
       }) {
    CAPTURE(bad);
    CHECK_FALSE(xml::parse_http_date(bad).has_value());
  }
}

TEST_CASE("s3 xml: dates round-trip") {
  using namespace std::chrono;
  const system_clock::time_point samples[] = {
      system_clock::time_point{},
      sample_time(),
      sys_days(year(2000) / 2 / 29) + 12h,
      sys_days(year(1999) / 12 / 31) + 23h + 59min + 59s,
      sys_days(year(2038) / 1 / 19) + 3h + 14min + 8s,
      sys_days(year(2199) / 12 / 31) + 23h + 59min + 59s,  // system_clock (ns) ends in 2262
      time_point_cast<system_clock::duration>(floor<seconds>(system_clock::now())),
  };
  for (const auto& t : samples) {
    const std::string text = xml::http_date(t);
    CAPTURE(text);
    const auto back = xml::parse_http_date(text);
    REQUIRE(back.has_value());
    CHECK(*back == t);
    CHECK(xml::http_date(*back) == text);
  }
  // Each of the 366 days of a leap year, at a time with every field non-zero.
  for (int day = 0; day < 366; ++day) {
    const system_clock::time_point t = sys_days(year(2024) / 1 / 1) + days(day) + 13h + 31min + 7s;
    const auto back = xml::parse_http_date(xml::http_date(t));
    REQUIRE(back.has_value());
    CHECK(*back == t);
  }
}

TEST_CASE("s3 xml: Tagging bodies, parsed and written") {
  using pairs = std::vector<std::pair<std::string, std::string>>;
  sluice::error_code ec;
  // boto3 put_object_tagging sends the namespace and no whitespace; the CLI pretty-prints.
  CHECK(xml::parse_tagging("<Tagging xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><TagSet><Tag><Key>a</Key>"
                           "<Value>1</Value></Tag><Tag><Key>b &amp; c</Key><Value></Value></Tag></TagSet></Tagging>",
                           ec) == pairs{{"a", "1"}, {"b & c", ""}});
  CHECK_FALSE(ec);
  CHECK(xml::parse_tagging("<Tagging>\n  <TagSet>\n    <Tag>\n      <Key>k</Key>\n      <Value>v</Value>\n    </Tag>\n"
                           "  </TagSet>\n</Tagging>\n",
                           ec) == pairs{{"k", "v"}});
  CHECK_FALSE(ec);
  CHECK(xml::parse_tagging("<Tagging><TagSet/></Tagging>", ec).empty());
  CHECK_FALSE(ec);
  CHECK(xml::parse_tagging("<Tagging><TagSet><Tag><Key>a</Key><Value>1</Value></Tag><Tag><Key>a</Key><Value>2"
                           "</Value></Tag></TagSet></Tagging>",
                           ec)
            .size() == 2);  // repeats are the caller's to judge
  for (const char* bad :
       {"", "<Tagging/>", "<Other><TagSet/></Other>", "<Tagging><TagSet/><TagSet/></Tagging>",
        "<Tagging><TagSet><Tag><Key>k</Key></Tag></TagSet></Tagging>",
        "<Tagging><TagSet><Tag><Value>v</Value></Tag></TagSet></Tagging>",
        "<Tagging><TagSet><Tag><Key>k</Key><Key>j</Key><Value>v</Value></Tag></TagSet></Tagging>",
        "<Tagging><TagSet><Tag><Key>k</Key><Value>v</Value><Extra/></Tag></TagSet></Tagging>",
        "<Tagging><TagSet><Other/></TagSet></Tagging>", "<Tagging><TagSet>text</TagSet></Tagging>",
        "<Tagging><TagSet><Tag><Key><b/></Key><Value>v</Value></Tag></TagSet></Tagging>", "<Tagging><TagSet>"}) {
    CAPTURE(bad);
    CHECK(xml::parse_tagging(bad, ec).empty());
    CHECK(ec == sluice::s3::errc::malformed_xml);
  }

  parsed p;
  parse_back(p, xml::tagging({{"b", "2 < 3"}, {"a", ""}}));
  CHECK(std::string_view(p.root.name()) == "Tagging");
  CHECK(p.root.attribute("xmlns").value() == s3_ns);
  const pugi::xml_node set = p.root.child("TagSet");
  std::vector<std::pair<std::string, std::string>> got;
  for (const auto& tag : set.children("Tag")) got.emplace_back(text(tag, "Key"), text(tag, "Value"));
  CHECK(got == pairs{{"a", ""}, {"b", "2 < 3"}});
  parse_back(p, xml::tagging({}));
  CHECK(p.root.child("TagSet"));
  CHECK_FALSE(p.root.child("TagSet").child("Tag"));
}

TEST_CASE("s3 xml: AccessControlPolicy bodies, parsed and written") {
  sluice::error_code ec;
  // What boto3 put_object_acl(AccessControlPolicy=...) sends.
  const auto policy = xml::parse_access_control_policy(
      "<AccessControlPolicy xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><AccessControlList><Grant><Grantee "
      "xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:type=\"CanonicalUser\"><ID>AK</ID></Grantee>"
      "<Permission>FULL_CONTROL</Permission></Grant><Grant><Grantee xmlns:xsi=\"http://www.w3.org/2001/"
      "XMLSchema-instance\" xsi:type=\"Group\"><URI>http://acs.amazonaws.com/groups/global/AllUsers</URI></Grantee>"
      "<Permission>READ</Permission></Grant></AccessControlList><Owner><ID>AK</ID><DisplayName>me</DisplayName>"
      "</Owner></AccessControlPolicy>",
      ec);
  CHECK_FALSE(ec);
  CHECK(policy.owner_id == "AK");
  REQUIRE(policy.grants.size() == 2);
  CHECK(policy.grants[0] == xml::acl_grant{"CanonicalUser", "AK", "", "", "FULL_CONTROL"});
  CHECK(policy.grants[1].type == "Group");
  CHECK(policy.grants[1].uri == "http://acs.amazonaws.com/groups/global/AllUsers");
  CHECK(policy.grants[1].permission == "READ");
  std::string many = "<AccessControlPolicy><AccessControlList>";
  for (std::size_t i = 0; i <= xml::max_acl_grants; ++i) {
    many += "<Grant><Grantee><ID>x</ID></Grantee><Permission>READ</Permission></Grant>";
  }
  many += "</AccessControlList></AccessControlPolicy>";
  for (const std::string_view bad :
       {std::string_view(""), std::string_view("<AccessControlPolicy/>"),
        std::string_view("<Other><AccessControlList/></Other>"),
        std::string_view("<AccessControlPolicy><AccessControlList/><AccessControlList/></AccessControlPolicy>"),
        std::string_view("<AccessControlPolicy><AccessControlList><Grant><Permission>READ</Permission></Grant>"
                         "</AccessControlList></AccessControlPolicy>"),
        std::string_view("<AccessControlPolicy><AccessControlList><Grant><Grantee><Other/></Grantee><Permission>"
                         "READ</Permission></Grant></AccessControlList></AccessControlPolicy>"),
        std::string_view("<AccessControlPolicy><Extra/><AccessControlList/></AccessControlPolicy>"),
        std::string_view(many)}) {
    CAPTURE(bad.substr(0, 80));
    (void)xml::parse_access_control_policy(bad, ec);
    CHECK(ec == sluice::s3::errc::malformed_xml);
  }

  parsed p;
  parse_back(p, xml::access_control_policy_body("AK", "name"));
  CHECK(std::string_view(p.root.name()) == "AccessControlPolicy");
  CHECK(text(p.root, "Owner/ID") == "AK");
  CHECK(text(p.root, "AccessControlList/Grant/Grantee/ID") == "AK");
  CHECK(
      std::string_view(p.root.first_element_by_path("AccessControlList/Grant/Grantee").attribute("xsi:type").value()) ==
      "CanonicalUser");
  CHECK(text(p.root, "AccessControlList/Grant/Permission") == "FULL_CONTROL");
}

TEST_CASE("s3 xml: GetObjectAttributes answers") {
  xml::object_attributes_page page;
  page.etag = "abc";
  page.checksums = {{"crc32c", "AAAAAA==-2"}};
  page.checksum_type = "COMPOSITE";
  page.object_parts = true;
  page.parts_count = 2;
  page.part_number_marker = 1;
  page.next_part_number_marker = 2;
  page.max_parts = 1;
  page.truncated = false;
  page.parts = {sluice::part_info{2, 7, "", {}, {{"crc32c", "BBBBBB=="}}}};
  page.storage_class = "STANDARD";
  page.object_size = 12;
  parsed p;
  parse_back(p, xml::get_object_attributes(page));
  CHECK(text(p.root, "ETag") == "abc");
  CHECK(text(p.root, "Checksum/ChecksumCRC32C") == "AAAAAA==-2");
  CHECK(text(p.root, "Checksum/ChecksumType") == "COMPOSITE");
  CHECK(text(p.root, "ObjectParts/PartsCount") == "2");
  CHECK(text(p.root, "ObjectParts/PartNumberMarker") == "1");
  CHECK(text(p.root, "ObjectParts/NextPartNumberMarker") == "2");
  CHECK(text(p.root, "ObjectParts/MaxParts") == "1");
  CHECK(text(p.root, "ObjectParts/IsTruncated") == "false");
  CHECK(text(p.root, "ObjectParts/Part/PartNumber") == "2");
  CHECK(text(p.root, "ObjectParts/Part/Size") == "7");
  CHECK(text(p.root, "ObjectParts/Part/ChecksumCRC32C") == "BBBBBB==");
  CHECK(text(p.root, "StorageClass") == "STANDARD");
  CHECK(text(p.root, "ObjectSize") == "12");
  parse_back(p, xml::get_object_attributes(xml::object_attributes_page{}));
  CHECK_FALSE(p.root.first_child());  // nothing asked for, nothing written
}
