#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""S3 behaviour, second round (issue 42), each against a real `sluice serve` with boto3 (Debian's)
or the AWS CLI, and raw sockets where the client library would hide the wire format.
  s3_behaviour_test.py SLUICE_BINARY SCENARIO
SCENARIO:
  unimplemented  every 501 names the operation: GetObjectRetention, PutBucketCors, RestoreObject,
                 PutBucketVersioning, a method no operation takes, a conditional PUT S3 does not do
  acl            Put/GetObjectAcl and Put/GetBucketAcl: the canned ACL private (boto3, the AWS CLI) and
                 an AccessControlPolicy granting only the owner FULL_CONTROL are accepted and change
                 nothing; public-read, an x-amz-grant-* header, a second grant: 501 naming the operation;
                 a missing object 404; the ACL read back is the owner's FULL_CONTROL
  copy-range     UploadPartCopy with x-amz-copy-source-range past the source: 416 InvalidRange
  list-prefix    ListObjects v1 with a prefix holding a newline, boto3 (which asks encoding-type=url
                 itself) and raw: Prefix comes back as given, XML-escaped; v2 url-encodes Prefix,
                 Delimiter, keys and common prefixes with encoding-type=url only
  metadata-utf8  non-ASCII user metadata: raw UTF-8 on the wire comes back as an RFC 2047 encoded word
                 (=?UTF-8?B?...?=); boto3 (which refuses non-ASCII) sends the encoded word and reads
                 it back equal; the bytes stored are the UTF-8 (CopyObject keeps them)
  location       CreateBucket with a LocationConstraint, then GetBucketLocation and HEAD bucket's
                 x-amz-bucket-region return it, also after a restart; a constraint that is no region
                 name: 400 InvalidLocationConstraint, no bucket
  bucket-tagging Put/Get/DeleteBucketTagging with boto3 and the AWS CLI: stored, returned, replaced,
                 deleted (then 404 NoSuchTagSet), kept across a restart; the object tag limits
                 (11 tags, long keys, aws: keys, a key twice) are 400 InvalidTag; a body over 64 KiB
                 is refused; a missing bucket is 404
  attributes     GetObjectAttributes (boto3 and raw): ETag, ObjectSize, StorageClass, Checksum,
                 ObjectParts of a 3-part object paged by max-parts and part-number-marker; an unknown
                 attribute 400; a missing key 404
  checksums      UploadPart with x-amz-checksum-crc32 / crc32c / sha1 / sha256: a wrong one is 400
                 BadDigest; CompleteMultipartUpload answers the composite (checksum of the parts'
                 binary checksums, "-N"), GET and HEAD with x-amz-checksum-mode: ENABLED return it,
                 GetObjectAttributes returns it and each part's; single PUT with each checksum
Exit 0: passed; 77: skipped (boto3 missing, the reason printed); anything else: failed."""
import base64
import hashlib
import http.client
import os
import subprocess
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MIB, expect, run_scenario  # noqa: E402
from s3_semantics_test import AK, SK, Aws, boto3_client, error_of, find_aws_clis, signed_request  # noqa: E402

SKIP = 77


def raw(server, method, path, body=b"", headers=None):
    """(status, headers as a list of (name, raw bytes value), body) of one SigV4 request sent by
    http.client as it is: header values as bytes, so that UTF-8 goes on the wire unchanged."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    headers = dict(headers or {})
    # botocore signs the UTF-8 of a header's text: a UTF-8 value is given to it as text, and sent
    # as its UTF-8 bytes, which the server signs as it reads them.
    request = AWSRequest(method=method, url=server.url + path, data=body,
                         headers={k: (v.decode("utf-8") if isinstance(v, bytes) else v) for k, v in headers.items()})
    request.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    S3SigV4Auth(Credentials(AK, SK), "s3", "us-east-1").add_auth(request)
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    connection.putheader("Host", "127.0.0.1:%d" % server.port)
    for name, value in request.headers.items():
        connection.putheader(name, value.encode("utf-8") if isinstance(value, str) else value)
    connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body)
    response = connection.getresponse()
    got = response.status, [(k.lower(), v.encode("latin-1")) for k, v in response.getheaders()], response.read()
    connection.close()
    return got


def header(headers, name):
    values = [v for k, v in headers if k == name]
    return values[0] if values else None


def error_message(body):
    import re
    found = re.search(rb"<Message>(.*?)</Message>", body)
    return found.group(1).decode() if found else ""


# ------------------------------------------------------------------------------------------
def test_unimplemented(server, tmp):
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="nimp")
    s3.put_object(Bucket="nimp", Key="k", Body=b"x")
    cases = [("GET", "/nimp/k?retention", "GetObjectRetention"), ("PUT", "/nimp?cors", "PutBucketCors"),
             ("POST", "/nimp/k?restore", "RestoreObject"), ("PUT", "/nimp?versioning", "PutBucketVersioning"),
             ("DELETE", "/nimp?policy", "DeleteBucketPolicy"), ("GET", "/nimp?lifecycle", "GetBucketLifecycleConfiguration"),
             ("PATCH", "/nimp/k", "PATCH on an object")]
    for method, path, name in cases:
        status, body = signed_request(server, method, path)
        message = error_message(body)
        expect(status == 501 and b"<Code>NotImplemented</Code>" in body and message == name + " is not implemented.",
               "%s %s: 501 %r" % (method, path, message))
    status, body = signed_request(server, "PUT", "/nimp/k", b"y", {"If-None-Match": '"abc"'})
    expect(status == 501 and error_message(body).startswith("PutObject is not implemented with this condition"),
           "PUT with If-None-Match of an ETag: 501 naming PutObject (%r)" % error_message(body))
    got = error_of(lambda: s3.get_object_retention(Bucket="nimp", Key="k"))
    expect(got == (501, "NotImplemented"), "boto3 get_object_retention: 501 NotImplemented")
    return None


def test_acl(server, tmp):
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="acl")
    s3.put_object(Bucket="acl", Key="k", Body=b"bytes")
    before = s3.head_object(Bucket="acl", Key="k")
    s3.put_object_acl(Bucket="acl", Key="k", ACL="private")
    expect(True, "boto3 put_object_acl ACL=private: 200")
    s3.put_bucket_acl(Bucket="acl", ACL="private")
    expect(True, "boto3 put_bucket_acl ACL=private: 200")
    after = s3.head_object(Bucket="acl", Key="k")
    expect(after["ETag"] == before["ETag"] and after["LastModified"] == before["LastModified"],
           "the object is unchanged (ETag, Last-Modified)")
    for got, what in ((s3.get_object_acl(Bucket="acl", Key="k"), "object"), (s3.get_bucket_acl(Bucket="acl"), "bucket")):
        grants = got["Grants"]
        expect(got["Owner"]["ID"] == AK and len(grants) == 1 and grants[0]["Permission"] == "FULL_CONTROL" and
               grants[0]["Grantee"].get("ID") == AK and grants[0]["Grantee"]["Type"] == "CanonicalUser",
               "Get%sAcl: the owner's FULL_CONTROL" % what.capitalize())
    own = {"Owner": {"ID": AK}, "Grants": [{"Grantee": {"Type": "CanonicalUser", "ID": AK},
                                            "Permission": "FULL_CONTROL"}]}
    s3.put_object_acl(Bucket="acl", Key="k", AccessControlPolicy=own)
    expect(True, "put_object_acl with a policy granting the owner FULL_CONTROL: 200")
    s3.put_bucket_acl(Bucket="acl", AccessControlPolicy=own)
    expect(True, "put_bucket_acl with the same policy: 200")
    public = {"Owner": {"ID": AK}, "Grants": own["Grants"] + [
        {"Grantee": {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/global/AllUsers"}, "Permission": "READ"}]}
    refusals = [
        (lambda: s3.put_object_acl(Bucket="acl", Key="k", ACL="public-read"), "PutObjectAcl", "ACL=public-read"),
        (lambda: s3.put_bucket_acl(Bucket="acl", ACL="public-read-write"), "PutBucketAcl", "ACL=public-read-write"),
        (lambda: s3.put_object_acl(Bucket="acl", Key="k", GrantRead="uri=http://acs.amazonaws.com/groups/global/AllUsers"),
         "PutObjectAcl", "x-amz-grant-read"),
        (lambda: s3.put_object_acl(Bucket="acl", Key="k", AccessControlPolicy=public), "PutObjectAcl",
         "a policy with a public READ grant"),
        (lambda: s3.put_bucket_acl(Bucket="acl", AccessControlPolicy={
            "Owner": {"ID": AK}, "Grants": [{"Grantee": {"Type": "CanonicalUser", "ID": "someone-else"},
                                             "Permission": "FULL_CONTROL"}]}), "PutBucketAcl", "another user's grant"),
    ]
    import botocore.exceptions
    for call, name, what in refusals:
        try:
            call()
            expect(False, "%s is refused" % what)
        except botocore.exceptions.ClientError as e:
            message = e.response["Error"].get("Message", "")
            expect(e.response["ResponseMetadata"]["HTTPStatusCode"] == 501 and message.startswith(name + " is not"),
                   "%s: 501 %r" % (what, message))
    got = error_of(lambda: s3.put_object_acl(Bucket="acl", Key="missing", ACL="private"))
    expect(got == (404, "NoSuchKey"), "PutObjectAcl of a missing key: %s" % (got,))
    got = error_of(lambda: s3.get_bucket_acl(Bucket="no-such-acl-bucket"))
    expect(got == (404, "NoSuchBucket"), "GetBucketAcl of a missing bucket: %s" % (got,))
    status, body = signed_request(server, "PUT", "/acl/k?acl", b"<AccessControlPolicy><Owner>", {})
    expect(status == 400 and b"MalformedXML" in body, "a broken policy: 400 MalformedXML")
    status, body = signed_request(server, "PUT", "/acl/k?acl", b"x" * (65 * 1024), {})
    expect(status == 400, "a policy over 64 KiB: 400 (%d)" % status)
    clis = find_aws_clis()
    if clis:
        aws = Aws(clis[0][1], server, tmp)
        aws("s3api", "put-object-acl", "--bucket", "acl", "--key", "k", "--acl", "private")
        expect(True, "aws s3api put-object-acl --acl private (%s)" % clis[0][0])
        r = aws("s3api", "put-bucket-acl", "--bucket", "acl", "--acl", "public-read", check=False)
        expect(r.returncode != 0 and "PutBucketAcl is not implemented" in r.stderr,
               "aws s3api put-bucket-acl --acl public-read: 501 naming PutBucketAcl")
    expect(s3.get_object(Bucket="acl", Key="k")["Body"].read() == b"bytes", "the object's bytes are unchanged")
    return None


def test_copy_range(server, tmp):
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="crng")
    source = os.urandom(6 * MIB)
    s3.put_object(Bucket="crng", Key="src", Body=source)
    upload = s3.create_multipart_upload(Bucket="crng", Key="dst")["UploadId"]
    size = len(source)
    for rng in ("bytes=0-%d" % size, "bytes=%d-%d" % (size, size + 10), "bytes=%d-%d" % (size + 100, size + 200)):
        got = error_of(lambda: s3.upload_part_copy(Bucket="crng", Key="dst", UploadId=upload, PartNumber=1,
                                                   CopySource={"Bucket": "crng", "Key": "src"}, CopySourceRange=rng))
        expect(got == (416, "InvalidRange"), "x-amz-copy-source-range %r past the %d-byte source: %s" % (rng, size, got))
    got = error_of(lambda: s3.upload_part_copy(Bucket="crng", Key="dst", UploadId=upload, PartNumber=1,
                                               CopySource={"Bucket": "crng", "Key": "src"}, CopySourceRange="bytes=5-1"))
    expect(got == (400, "InvalidArgument"), "a reversed range stays 400 InvalidArgument: %s" % (got,))
    result = s3.upload_part_copy(Bucket="crng", Key="dst", UploadId=upload, PartNumber=1,
                                 CopySource={"Bucket": "crng", "Key": "src"}, CopySourceRange="bytes=0-%d" % (size - 1))
    expect(result["CopyPartResult"]["ETag"].strip('"') == hashlib.md5(source).hexdigest(),
           "the whole source as a range is copied")
    s3.abort_multipart_upload(Bucket="crng", Key="dst", UploadId=upload)
    return None


def test_list_prefix(server, tmp):
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="lpre")
    for key in ("\nline", "a b/c", "a b/d", "plain"):
        s3.put_object(Bucket="lpre", Key=key, Body=b"x")
    got = s3.list_objects(Bucket="lpre", Prefix="\n")
    expect(got["Prefix"] == "\n" and [o["Key"] for o in got["Contents"]] == ["\nline"],
           "boto3 list_objects Prefix='\\n': Prefix %r, the key decoded" % got["Prefix"])
    got = s3.list_objects(Bucket="lpre", Prefix="\x0a")
    expect(got["Prefix"] == "\x0a", "as the s3-tests conformance suite asks it (test_bucket_list_prefix_unreadable)")
    status, body = signed_request(server, "GET", "/lpre?prefix=%0A")
    expect(status == 200 and b"<Prefix>&#10;</Prefix>" in body and b"<Key>&#10;line</Key>" in body and
           b"EncodingType" not in body, "raw v1 without encoding-type: Prefix and Key XML-escaped, not url-encoded")
    status, body = signed_request(server, "GET", "/lpre?prefix=%0A&encoding-type=url")
    expect(status == 200 and b"<Prefix>&#10;</Prefix>" in body and b"<Key>%0Aline</Key>" in body,
           "raw v1 with encoding-type=url: keys url-encoded, Prefix as given (as S3)")
    status, body = signed_request(server, "GET", "/lpre?prefix=a%20b%2F&delimiter=%2F&marker=a%20b%2Fc&encoding-type=url")
    expect(status == 200 and b"<Prefix>a b/</Prefix>" in body and b"<Marker>a%20b/c</Marker>" in body and
           b"<Delimiter>/</Delimiter>" in body and b"<Key>a%20b/d</Key>" in body,
           "raw v1 url: Marker and keys encoded, Prefix not")
    status, body = signed_request(server, "GET", "/lpre?list-type=2&prefix=%0A")
    expect(status == 200 and b"<Prefix>&#10;</Prefix>" in body and b"EncodingType" not in body,
           "raw v2 without encoding-type: Prefix XML-escaped")
    status, body = signed_request(server, "GET", "/lpre?list-type=2&prefix=%0A&encoding-type=url")
    expect(status == 200 and b"<Prefix>%0A</Prefix>" in body and b"<Key>%0Aline</Key>" in body,
           "raw v2 with encoding-type=url: Prefix and keys url-encoded")
    status, body = signed_request(server, "GET", "/lpre?list-type=2&delimiter=%20&encoding-type=url")
    expect(status == 200 and b"<Delimiter>%20</Delimiter>" in body and
           b"<CommonPrefixes><Prefix>a%20</Prefix></CommonPrefixes>" in body,
           "raw v2 url: Delimiter and common prefixes url-encoded")
    status, body = signed_request(server, "GET", "/lpre?delimiter=%20")
    expect(status == 200 and b"<Delimiter> </Delimiter>" in body and b"<Prefix>a </Prefix>" in body,
           "raw v1 without encoding-type: Delimiter and common prefixes as they are")
    got = s3.list_objects_v2(Bucket="lpre", Prefix="\n")
    expect(got["Prefix"] == "\n" and [o["Key"] for o in got["Contents"]] == ["\nline"],
           "boto3 list_objects_v2 Prefix='\\n' (decoded by botocore)")
    got = s3.list_objects(Bucket="lpre", Delimiter=" ")
    expect([p["Prefix"] for p in got["CommonPrefixes"]] == ["a "] and got["Delimiter"] == " ",
           "boto3 list_objects with delimiter ' ': common prefix and Delimiter decoded")
    return None


def test_metadata_utf8(server, tmp):
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="meta")
    text = "héllo wörld ✓ 日本"
    encoded = "=?UTF-8?B?%s?=" % base64.b64encode(text.encode()).decode()
    # Raw: the UTF-8 bytes themselves in the header.
    status, _, _ = raw(server, "PUT", "/meta/raw", b"x", {"x-amz-meta-name": text.encode(), "x-amz-meta-plain": b"ascii"})
    expect(status == 200, "PUT with raw UTF-8 metadata: 200")
    status, headers, _ = raw(server, "HEAD", "/meta/raw")
    expect(header(headers, "x-amz-meta-name") == encoded.encode(),
           "HEAD: the UTF-8 value comes back as one RFC 2047 word %r" % header(headers, "x-amz-meta-name"))
    expect(header(headers, "x-amz-meta-plain") == b"ascii", "an ASCII value comes back as it is")
    status, headers, _ = raw(server, "GET", "/meta/raw")
    expect(header(headers, "x-amz-meta-name") == encoded.encode(), "GET: the same")
    got = s3.head_object(Bucket="meta", Key="raw")["Metadata"]
    expect(got["name"] == encoded, "boto3 reads the encoded word, not Latin-1 mojibake (%r)" % got["name"])
    import email.header
    decoded = "".join(part.decode(charset) if charset else part
                      for part, charset in email.header.decode_header(got["name"]))
    expect(decoded == text, "and Python's email.header decodes it to the bytes stored")
    # boto3 refuses non-ASCII metadata itself: it sends the encoded word, which is stored decoded.
    s3.put_object(Bucket="meta", Key="boto", Body=b"y", Metadata={"name": encoded})
    expect(s3.head_object(Bucket="meta", Key="boto")["Metadata"]["name"] == encoded,
           "boto3 round trip of the RFC 2047 value: equal")
    status, headers, _ = raw(server, "HEAD", "/meta/boto")
    expect(header(headers, "x-amz-meta-name") == encoded.encode(), "on the wire, the same word")
    q = "=?utf-8?q?caf=C3=A9_au_lait?="
    s3.put_object(Bucket="meta", Key="q", Body=b"z", Metadata={"name": q})
    want = "=?UTF-8?B?%s?=" % base64.b64encode("café au lait".encode()).decode()
    expect(s3.head_object(Bucket="meta", Key="q")["Metadata"]["name"] == want,
           "a Q-encoded word is decoded, and answered B-encoded")
    for bogus in ("=?UTF-8?B?not base64?=", "=?ISO-2022-JP?B?GyRCJEgbKEI=?=", "=?UTF-8?B?AA==?=", "a =?UTF-8?B?w6k=?="):
        s3.put_object(Bucket="meta", Key="bogus", Body=b"z", Metadata={"name": bogus})
        got = s3.head_object(Bucket="meta", Key="bogus")["Metadata"]["name"]
        expect(got == bogus, "%r is not (only) a UTF-8 encoded word of safe text: kept as sent" % bogus)
    s3.copy_object(Bucket="meta", Key="copy", CopySource={"Bucket": "meta", "Key": "raw"})
    expect(s3.head_object(Bucket="meta", Key="copy")["Metadata"]["name"] == encoded, "CopyObject keeps the metadata")
    # The bytes stored are the UTF-8 text: on the disk, in the object's header.
    found = False
    for root, _, files in os.walk(os.path.join(server.root, "buckets", "meta", "objects")):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                found = found or text.encode() in f.read(4096)
    expect(found, "fs_store keeps the UTF-8 bytes of the value")
    return None


def test_location(server, tmp):
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="loc-eu", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    s3.create_bucket(Bucket="loc-default")
    expect(s3.get_bucket_location(Bucket="loc-eu")["LocationConstraint"] == "eu-west-1",
           "GetBucketLocation returns the LocationConstraint given")
    expect(s3.get_bucket_location(Bucket="loc-default").get("LocationConstraint") in (None, ""),
           "a bucket made without one: us-east-1 (empty)")
    head = s3.head_bucket(Bucket="loc-eu")["ResponseMetadata"]["HTTPHeaders"]
    expect(head.get("x-amz-bucket-region") == "eu-west-1", "HEAD bucket: x-amz-bucket-region eu-west-1")
    for bad in ("eu west", "x" * 65, "eu-west-1<", "é"):
        body = ("<CreateBucketConfiguration><LocationConstraint>%s</LocationConstraint></CreateBucketConfiguration>"
                % bad.replace("<", "&lt;")).encode()
        status, answer = signed_request(server, "PUT", "/loc-bad", body)
        expect(status == 400 and b"InvalidLocationConstraint" in answer,
               "LocationConstraint %r: 400 InvalidLocationConstraint" % bad[:20])
    got = error_of(lambda: s3.head_bucket(Bucket="loc-bad"))
    expect(got[0] == 404, "and no bucket was made")
    server.stop()
    server.start()
    s3 = boto3_client(server)
    expect(s3.get_bucket_location(Bucket="loc-eu")["LocationConstraint"] == "eu-west-1", "after a restart too")
    return None


def test_bucket_tagging(server, tmp):
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="btag", CreateBucketConfiguration={"LocationConstraint": "ap-south-1"})
    got = error_of(lambda: s3.get_bucket_tagging(Bucket="btag"))
    expect(got == (404, "NoSuchTagSet"), "GetBucketTagging of a bucket without tags: %s" % (got,))
    tags = [{"Key": "team", "Value": "storage"}, {"Key": "cost center", "Value": "4 2"}, {"Key": "é", "Value": ""}]
    s3.put_bucket_tagging(Bucket="btag", Tagging={"TagSet": tags})
    got = s3.get_bucket_tagging(Bucket="btag")["TagSet"]
    expect(sorted(got, key=lambda t: t["Key"]) == sorted(tags, key=lambda t: t["Key"]), "stored and returned: %s" % got)
    s3.put_bucket_tagging(Bucket="btag", Tagging={"TagSet": [{"Key": "only", "Value": "one"}]})
    expect(s3.get_bucket_tagging(Bucket="btag")["TagSet"] == [{"Key": "only", "Value": "one"}], "a new set replaces it")
    refused = [[{"Key": "k%d" % i, "Value": "v"} for i in range(11)], [{"Key": "k" * 129, "Value": "v"}],
               [{"Key": "k", "Value": "v" * 257}], [{"Key": "aws:x", "Value": "v"}],
               [{"Key": "k", "Value": "1"}, {"Key": "k", "Value": "2"}]]
    for tag_set in refused:
        got = error_of(lambda: s3.put_bucket_tagging(Bucket="btag", Tagging={"TagSet": tag_set}))
        expect(got == (400, "InvalidTag"), "a tag set the object limits refuse (%d tags): %s" % (len(tag_set), got))
    ten = [{"Key": "k" * 128, "Value": "✓" * 256}] + [{"Key": "t%d" % i, "Value": "v" * 256} for i in range(9)]
    s3.put_bucket_tagging(Bucket="btag", Tagging={"TagSet": ten})
    expect(len(s3.get_bucket_tagging(Bucket="btag")["TagSet"]) == 10, "ten tags at the longest: stored")
    status, _ = signed_request(server, "PUT", "/btag?tagging", b"<Tagging><TagSet>" + b" " * (70 * 1024) + b"</TagSet></Tagging>")
    expect(status == 400, "a tagging body over 64 KiB: 400")
    status, _ = signed_request(server, "PUT", "/btag?tagging", b"<Tagging><TagSet><Tag><Key>k</Key></Tag></TagSet></Tagging>")
    expect(status == 400, "a tag without a Value: 400 MalformedXML")
    got = error_of(lambda: s3.put_bucket_tagging(Bucket="no-such-bt", Tagging={"TagSet": tags}))
    expect(got == (404, "NoSuchBucket"), "PutBucketTagging of a missing bucket: %s" % (got,))
    server.stop()
    server.start()
    s3 = boto3_client(server)
    expect(len(s3.get_bucket_tagging(Bucket="btag")["TagSet"]) == 10, "kept across a restart")
    expect(s3.get_bucket_location(Bucket="btag")["LocationConstraint"] == "ap-south-1",
           "with the bucket's location beside them")
    clis = find_aws_clis()
    if clis:
        aws = Aws(clis[0][1], server, tmp)
        aws("s3api", "put-bucket-tagging", "--bucket", "btag", "--tagging", "TagSet=[{Key=cli,Value=yes}]")
        r = aws("s3api", "get-bucket-tagging", "--bucket", "btag")
        expect('"cli"' in r.stdout and '"yes"' in r.stdout, "aws s3api put/get-bucket-tagging (%s)" % clis[0][0])
        aws("s3api", "delete-bucket-tagging", "--bucket", "btag")
        r = aws("s3api", "get-bucket-tagging", "--bucket", "btag", check=False)
        expect(r.returncode != 0 and "NoSuchTagSet" in r.stderr, "aws s3api delete-bucket-tagging: then NoSuchTagSet")
    else:
        s3.delete_bucket_tagging(Bucket="btag")
    got = error_of(lambda: s3.get_bucket_tagging(Bucket="btag"))
    expect(got == (404, "NoSuchTagSet"), "DeleteBucketTagging: the tags are gone (%s)" % (got,))
    s3.delete_bucket_tagging(Bucket="btag")
    expect(True, "DeleteBucketTagging of a bucket without tags: 204")
    s3.put_object(Bucket="btag", Key="obj", Body=b"x", Tagging="o=1")
    expect(s3.get_object_tagging(Bucket="btag", Key="obj")["TagSet"] == [{"Key": "o", "Value": "1"}],
           "object tags are apart from the bucket's")
    return None


def crc32(data):
    return zlib.crc32(data).to_bytes(4, "big")


def crc32c(data):
    poly, crc = 0x82F63B78, 0xFFFFFFFF
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return (crc ^ 0xFFFFFFFF).to_bytes(4, "big")


ALGORITHMS = {"CRC32": crc32, "CRC32C": crc32c, "SHA1": lambda d: hashlib.sha1(d).digest(),
              "SHA256": lambda d: hashlib.sha256(d).digest()}


def b64(raw_bytes):
    return base64.b64encode(raw_bytes).decode()


def multipart_with_checksum(s3, bucket, key, algorithm, parts):
    """A multipart upload made with `algorithm`: (CompleteMultipartUpload's answer, the composite
    S3 would give, each part's checksum)."""
    f = ALGORITHMS[algorithm]
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm=algorithm)["UploadId"]
    done, sums = [], []
    for number, data in enumerate(parts, 1):
        value = b64(f(data))
        answer = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=data,
                                **{"Checksum" + algorithm: value})
        expect(answer.get("Checksum" + algorithm) == value, "UploadPart %d: Checksum%s %s" % (number, algorithm, value))
        done.append({"PartNumber": number, "ETag": answer["ETag"], "Checksum" + algorithm: value})
        sums.append(value)
    completed = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": done})
    composite = "%s-%d" % (b64(f(b"".join(f(p) for p in parts))), len(parts))
    return completed, composite, sums


def test_attributes(server, tmp):
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="attr")
    data = b"attributes" * 1000
    put = s3.put_object(Bucket="attr", Key="single", Body=data, ChecksumSHA256=b64(hashlib.sha256(data).digest()))
    got = s3.get_object_attributes(Bucket="attr", Key="single",
                                   ObjectAttributes=["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"])
    expect(got["ETag"] == put["ETag"].strip('"') and got["ObjectSize"] == len(data) and got["StorageClass"] == "STANDARD",
           "GetObjectAttributes of a single PUT: ETag (bare), ObjectSize, StorageClass")
    expect(got["Checksum"].get("ChecksumSHA256") == b64(hashlib.sha256(data).digest()) and "ObjectParts" not in got,
           "its Checksum is the SHA-256 sent; no ObjectParts")
    got = s3.get_object_attributes(Bucket="attr", Key="single", ObjectAttributes=["ObjectSize"])
    expect(set(got) - {"ResponseMetadata", "LastModified"} == {"ObjectSize"}, "only what was asked for: %s" % sorted(got))
    parts = [os.urandom(5 * MIB), os.urandom(5 * MIB), b"tail"]
    _, composite, sums = multipart_with_checksum(s3, "attr", "multi", "CRC32C", parts)
    got = s3.get_object_attributes(Bucket="attr", Key="multi", ObjectAttributes=["ObjectParts", "Checksum", "ETag"])
    object_parts = got["ObjectParts"]
    expect(object_parts["TotalPartsCount"] == 3 and [p["PartNumber"] for p in object_parts["Parts"]] == [1, 2, 3] and
           [p["Size"] for p in object_parts["Parts"]] == [len(p) for p in parts] and not object_parts["IsTruncated"],
           "ObjectParts of a 3-part object: count, numbers, sizes")
    expect([p.get("ChecksumCRC32C") for p in object_parts["Parts"]] == sums, "each part's CRC32C")
    expect(got["Checksum"]["ChecksumCRC32C"] == composite, "Checksum: the composite %s" % composite)
    page = s3.get_object_attributes(Bucket="attr", Key="multi", ObjectAttributes=["ObjectParts"], MaxParts=2)["ObjectParts"]
    expect([p["PartNumber"] for p in page["Parts"]] == [1, 2] and page["IsTruncated"] and page["NextPartNumberMarker"] == 2,
           "MaxParts=2: parts 1 and 2, truncated, NextPartNumberMarker 2")
    page = s3.get_object_attributes(Bucket="attr", Key="multi", ObjectAttributes=["ObjectParts"], MaxParts=2,
                                    PartNumberMarker=2)["ObjectParts"]
    expect([p["PartNumber"] for p in page["Parts"]] == [3] and not page["IsTruncated"] and page["PartNumberMarker"] == 2,
           "PartNumberMarker=2: part 3, not truncated")
    status, _, body = raw(server, "GET", "/attr/multi?attributes", headers={"x-amz-object-attributes": "ETag,Bogus"})
    expect(status == 400 and b"InvalidArgument" in body, "an unknown attribute: 400 InvalidArgument")
    status, _, body = raw(server, "GET", "/attr/multi?attributes")
    expect(status == 400, "no x-amz-object-attributes: 400")
    status, _, body = raw(server, "GET", "/attr/multi?attributes",
                          headers={"x-amz-object-attributes": "ObjectParts", "x-amz-max-parts": "-1"})
    expect(status == 400, "a negative x-amz-max-parts: 400")
    status, headers, body = raw(server, "GET", "/attr/multi?attributes",
                                headers={"x-amz-object-attributes": "ETag, ObjectSize", "x-amz-max-parts": "1"})
    expect(status == 200 and b"<ObjectSize>%d</ObjectSize>" % sum(map(len, parts)) in body and
           header(headers, "last-modified"), "raw: ObjectSize and Last-Modified")
    got = error_of(lambda: s3.get_object_attributes(Bucket="attr", Key="missing", ObjectAttributes=["ETag"]))
    expect(got == (404, "NoSuchKey"), "a missing key: %s" % (got,))
    return None


def test_checksums(server, tmp):
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="csum")
    parts = [os.urandom(5 * MIB), os.urandom(5 * MIB + 7), b"last part"]
    for algorithm in ALGORITHMS:
        key = "obj-" + algorithm.lower()
        completed, composite, _ = multipart_with_checksum(s3, "csum", key, algorithm, parts)
        expect(completed.get("Checksum" + algorithm) == composite,
               "%s: CompleteMultipartUpload answers the composite %s" % (algorithm, composite))
        head = s3.head_object(Bucket="csum", Key=key, ChecksumMode="ENABLED")
        expect(head.get("Checksum" + algorithm) == composite and
               head["ResponseMetadata"]["HTTPHeaders"].get("x-amz-checksum-type") == "COMPOSITE",
               "%s: HEAD with checksum mode returns it, x-amz-checksum-type COMPOSITE" % algorithm)
        got = s3.get_object(Bucket="csum", Key=key, ChecksumMode="ENABLED")
        body = got["Body"].read()
        expect(got.get("Checksum" + algorithm) == composite and body == b"".join(parts),
               "%s: GET with checksum mode returns it, and the bytes" % algorithm)
        plain = s3.head_object(Bucket="csum", Key=key)
        expect("Checksum" + algorithm not in plain, "%s: not without checksum mode" % algorithm)
    # A wrong part checksum: 400 BadDigest, the part not kept.
    upload = s3.create_multipart_upload(Bucket="csum", Key="bad", ChecksumAlgorithm="CRC32")["UploadId"]
    status, _, body = raw(server, "PUT", "/csum/bad?partNumber=1&uploadId=" + upload, b"part bytes",
                          {"x-amz-checksum-crc32": b64(crc32(b"other bytes"))})
    expect(status == 400 and b"BadDigest" in body, "UploadPart with a wrong CRC32: 400 BadDigest")
    for name, f in (("crc32c", crc32c), ("sha1", lambda d: hashlib.sha1(d).digest()),
                    ("sha256", lambda d: hashlib.sha256(d).digest())):
        status, _, body = raw(server, "PUT", "/csum/bad?partNumber=1&uploadId=" + upload, b"part bytes",
                              {"x-amz-checksum-" + name: b64(f(b"other bytes"))})
        expect(status == 400 and b"BadDigest" in body, "UploadPart with a wrong %s: 400 BadDigest" % name)
    expect(s3.list_parts(Bucket="csum", Key="bad", UploadId=upload).get("Parts", []) == [], "no part was kept")
    # A part without the upload's algorithm, and a completion naming another value.
    answer = s3.upload_part(Bucket="csum", Key="bad", UploadId=upload, PartNumber=1, Body=b"no checksum")
    got = error_of(lambda: s3.complete_multipart_upload(
        Bucket="csum", Key="bad", UploadId=upload, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": answer["ETag"]}]}))
    expect(got == (400, "InvalidRequest"), "a part uploaded without the upload's CRC32: Complete is 400 (%s)" % (got,))
    value = b64(crc32(b"with checksum"))
    answer = s3.upload_part(Bucket="csum", Key="bad", UploadId=upload, PartNumber=1, Body=b"with checksum",
                            ChecksumCRC32=value)
    got = error_of(lambda: s3.complete_multipart_upload(
        Bucket="csum", Key="bad", UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": answer["ETag"], "ChecksumCRC32": b64(crc32(b"x"))}]}))
    expect(got == (400, "InvalidPart"), "Complete naming another CRC32 for the part: 400 InvalidPart (%s)" % (got,))
    s3.complete_multipart_upload(Bucket="csum", Key="bad", UploadId=upload,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": answer["ETag"]}]})
    expect(s3.head_object(Bucket="csum", Key="bad", ChecksumMode="ENABLED").get("ChecksumCRC32") ==
           "%s-1" % b64(crc32(crc32(b"with checksum"))), "then completes with the composite of one part")
    status, _, body = raw(server, "POST", "/csum/x?uploads", headers={"x-amz-checksum-algorithm": "MD4"})
    expect(status == 400 and b"InvalidRequest" in body, "CreateMultipartUpload with an unknown algorithm: 400")
    status, _, body = raw(server, "POST", "/csum/x?uploads",
                          headers={"x-amz-checksum-algorithm": "CRC32", "x-amz-checksum-type": "FULL_OBJECT"})
    expect(status == 501 and b"CreateMultipartUpload with x-amz-checksum-type FULL_OBJECT" in body,
           "x-amz-checksum-type FULL_OBJECT: 501 naming the operation")
    # Without an algorithm: no composite (as S3), parts' checksums still checked.
    upload = s3.create_multipart_upload(Bucket="csum", Key="none")["UploadId"]
    answer = s3.upload_part(Bucket="csum", Key="none", UploadId=upload, PartNumber=1, Body=b"abc",
                            ChecksumCRC32=b64(crc32(b"abc")))
    s3.complete_multipart_upload(Bucket="csum", Key="none", UploadId=upload,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": answer["ETag"]}]})
    head = s3.head_object(Bucket="csum", Key="none", ChecksumMode="ENABLED")
    expect(not any(k.startswith("Checksum") for k in head), "an upload made without an algorithm: no checksum")
    # Single PUT with each checksum: stored and returned whole (botocore validates it on GET).
    for algorithm, f in ALGORITHMS.items():
        data = os.urandom(100000)
        s3.put_object(Bucket="csum", Key="single", Body=data, **{"Checksum" + algorithm: b64(f(data))})
        got = s3.get_object(Bucket="csum", Key="single", ChecksumMode="ENABLED")
        expect(got.get("Checksum" + algorithm) == b64(f(data)) and got["Body"].read() == data,
               "single PUT with %s: returned with checksum mode" % algorithm)
        got = error_of(lambda: s3.put_object(Bucket="csum", Key="single", Body=data,
                                             **{"Checksum" + algorithm: b64(f(b"other"))}))
        expect(got == (400, "BadDigest"), "single PUT with a wrong %s: 400 BadDigest" % algorithm)
    # CopyObject of a multipart object: the composite does not describe the one-piece copy.
    s3.copy_object(Bucket="csum", Key="copied", CopySource={"Bucket": "csum", "Key": "obj-crc32"})
    head = s3.head_object(Bucket="csum", Key="copied", ChecksumMode="ENABLED")
    expect("ChecksumCRC32" not in head, "a copy of a multipart object does not carry its composite")
    # After a restart (fs_store's headers): the composite and the parts' checksums are kept.
    server.stop()
    server.start()
    s3 = boto3_client(server)
    got = s3.get_object_attributes(Bucket="csum", Key="obj-sha256", ObjectAttributes=["ObjectParts", "Checksum"])
    expect(got["Checksum"]["ChecksumSHA256"].endswith("-3") and
           len([p for p in got["ObjectParts"]["Parts"] if p.get("ChecksumSHA256")]) == 3,
           "after a restart: the composite and the three parts' SHA-256")
    return None


def main():
    binary, scenario = sys.argv[1], sys.argv[2]
    tests = {"unimplemented": test_unimplemented, "acl": test_acl, "copy-range": test_copy_range,
             "list-prefix": test_list_prefix, "metadata-utf8": test_metadata_utf8, "location": test_location,
             "bucket-tagging": test_bucket_tagging, "attributes": test_attributes, "checksums": test_checksums}
    if scenario not in tests:
        print("unknown scenario " + scenario)
        return 2
    try:
        import boto3  # noqa: F401
    except ImportError:
        print("SKIPPED: boto3 is not installed for " + sys.executable)
        return SKIP
    return run_scenario(binary, scenario, "sluice-behaviour-", AK, SK, tests[scenario])


if __name__ == "__main__":
    sys.exit(main())
