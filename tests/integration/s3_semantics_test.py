#!/usr/bin/python3
"""S3 behaviour that real clients expect (issue 12), each against a real `sluice serve` with the
client a user would use.
  s3_semantics_test.py SLUICE_BINARY SCENARIO
SCENARIO: copy | rb | basics
  copy  bucket-to-bucket `aws s3 cp`, `mv` and `sync` (AWS CLI v1) of 8 MiB and 100 MiB objects
        (CreateMultipartUpload + UploadPartCopy with x-amz-copy-source-range + Complete, 8 MiB
        parts) and of 5 MiB + 1 byte with 5 MiB parts (a last part of one byte): bytes equal by
        SHA-256, ETag the "-N" of the part MD5s as S3 gives it; boto3 upload_part_copy with
        ranges from the middle and the start of a source and without a range, its CopyPartResult
        ETag the MD5 of the range; refused: a range past the end, malformed ranges (reversed,
        suffix, open-ended, no unit, signs, blanks, 64-bit overflow) as 400 InvalidArgument, a
        missing source key (404 NoSuchKey) or bucket (404 NoSuchBucket), an unknown upload (404
        NoSuchUpload)
  rb    `aws s3 rb --force` of a bucket holding an object and an incomplete multipart upload
        removes it (its upload aborted, its staging gone from the disk); `aws s3 rb` without
        --force of a bucket with an object is 409 BucketNotEmpty and leaves the bucket and its
        upload; DeleteBucket of a bucket whose only content is an upload succeeds
  basics CreateBucket of a bucket you own in us-east-1 is 200; GetBucketVersioning answers a
        configuration without Status (never enabled) and 404 for a missing bucket; a 304 to
        If-None-Match or If-Modified-Since carries ETag and Last-Modified; a PUT with an empty
        Content-MD5 header is 400 InvalidDigest and stores nothing
Exit 0: passed; 77: skipped (the client missing, the reason printed); anything else: failed."""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MIB, Server, expect, make_file, sha256  # noqa: E402

AK, SK = "SEMAK", "semantics-secret-key"
SKIP = 77


def find_aws_v1():
    """The AWS CLI v1 (pip's, as the interop tests find it), or None."""
    aws = shutil.which("aws", path="/root/.pyenv/shims:/usr/local/bin") or shutil.which("aws")
    if not aws:
        return None
    r = subprocess.run([aws, "--version"], capture_output=True, text=True)
    return aws if (r.stdout + r.stderr).startswith("aws-cli/1.") else None


class Aws:
    """The AWS CLI against the server, with no user configuration but `s3_config` (the CLI's
    `s3 =` settings, e.g. multipart_chunksize)."""

    def __init__(self, aws, server, tmp, s3_config=None):
        self.cmd = [aws, "--endpoint-url", server.url]
        config = os.path.join(tmp, "aws-config-%d" % id(self))
        with open(config, "w") as f:
            f.write("[default]\n")
            if s3_config:
                f.write("s3 =\n" + "".join("  %s = %s\n" % kv for kv in s3_config.items()))
        self.env = dict(os.environ, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK, AWS_DEFAULT_REGION="us-east-1",
                        AWS_CONFIG_FILE=config, AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_PAGER="")

    def __call__(self, *args, check=True):
        r = subprocess.run(self.cmd + list(args), env=self.env, capture_output=True, text=True, timeout=300)
        if check and r.returncode != 0:
            raise AssertionError("aws %s failed (%d):\n%s%s" % (" ".join(args), r.returncode, r.stdout[-2000:],
                                                               r.stderr[-2000:]))
        return r


def boto3_client(server):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=server.url, aws_access_key_id=AK, aws_secret_access_key=SK,
                        region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


def signed_request(server, method, path, body=b"", headers=None):
    """(status, body) of one request signed with SigV4 by botocore and sent by http.client as it
    is, for headers the SDKs would not send (empty values, say). `path` is already encoded."""
    import http.client
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    request = AWSRequest(method=method, url=server.url + path, data=body, headers=dict(headers or {}))
    request.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    S3SigV4Auth(Credentials(AK, SK), "s3", "us-east-1").add_auth(request)
    host, port = server.url.split("//")[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    connection.putheader("Host", "%s:%s" % (host, port))
    for name, value in request.headers.items():
        connection.putheader(name, value)
    connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body)
    response = connection.getresponse()
    got = response.status, response.read()
    connection.close()
    return got


def multipart_etag(data_parts):
    """S3's ETag of a completed multipart upload: MD5 of the concatenated part MD5s, "-N"."""
    digests = b"".join(hashlib.md5(p).digest() for p in data_parts)
    return "%s-%d" % (hashlib.md5(digests).hexdigest(), len(data_parts))


def file_parts(path, part_size):
    with open(path, "rb") as f:
        return list(iter(lambda: f.read(part_size), b""))


def object_sha256(s3, bucket, key):
    h = hashlib.sha256()
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    for block in iter(lambda: body.read(MIB), b""):
        h.update(block)
    return h.hexdigest()


def etag_of(s3, bucket, key):
    return s3.head_object(Bucket=bucket, Key=key)["ETag"].strip('"')


def error_of(call):
    """(HTTP status, S3 error code) of a call that must fail; (200, None) if it succeeded."""
    import botocore.exceptions
    try:
        call()
    except botocore.exceptions.ClientError as e:
        return e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"]
    return 200, None


def keys(s3, bucket):
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


# ------------------------------------------------------------------------------------------
def test_copy(server, tmp, aws_path):
    s3 = boto3_client(server)
    aws = Aws(aws_path, server, tmp)
    for b in ("src", "dst", "synced"):
        s3.create_bucket(Bucket=b)
    files = {"eight": make_file(os.path.join(tmp, "eight"), 8 * MIB, 1),
             "hundred": make_file(os.path.join(tmp, "hundred"), 100 * MIB, 2),
             "five": make_file(os.path.join(tmp, "five"), 5 * MIB + 1, 3)}
    for name, path in files.items():  # single PUTs: the source ETags are plain MD5s
        with open(path, "rb") as f:
            s3.put_object(Bucket="src", Key="dir/" + name, Body=f)

    # aws s3 cp bucket to bucket: >= 8 MiB goes by UploadPartCopy in 8 MiB parts.
    for name, parts in (("eight", 1), ("hundred", 13)):
        aws("s3", "cp", "s3://src/dir/" + name, "s3://dst/cp/" + name)
        expect(object_sha256(s3, "dst", "cp/" + name) == sha256(files[name]),
               "aws s3 cp s3->s3 %s: bytes equal (SHA-256)" % name)
        want = multipart_etag(file_parts(files[name], 8 * MIB))
        got = etag_of(s3, "dst", "cp/" + name)
        expect(got == want and want.endswith("-%d" % parts),
               "aws s3 cp s3->s3 %s: ETag %s is the -N of the 8 MiB part MD5s (%s)" % (name, got, want))
    # 5 MiB + 1 byte with 5 MiB parts: two parts copied, the last of one byte.
    aws5 = Aws(aws_path, server, tmp, {"multipart_threshold": "5MB", "multipart_chunksize": "5MB"})
    aws5("s3", "cp", "s3://src/dir/five", "s3://dst/cp/five")
    want = multipart_etag(file_parts(files["five"], 5 * MIB))
    expect(object_sha256(s3, "dst", "cp/five") == sha256(files["five"]) and etag_of(s3, "dst", "cp/five") == want
           and want.endswith("-2"), "aws s3 cp s3->s3 5 MiB + 1 with 5 MiB parts: bytes equal, ETag %s" % want)
    expect(s3.list_multipart_uploads(Bucket="dst").get("Uploads", []) == [], "no upload is left open in dst")

    # aws s3 mv: copied, then the source is gone.
    aws("s3", "cp", "s3://src/dir/eight", "s3://src/moving/eight")
    aws("s3", "mv", "s3://src/moving/eight", "s3://dst/mv/eight")
    expect(object_sha256(s3, "dst", "mv/eight") == sha256(files["eight"]), "aws s3 mv s3->s3 8 MiB: bytes equal")
    expect(error_of(lambda: s3.head_object(Bucket="src", Key="moving/eight"))[0] == 404, "aws s3 mv removed the source")

    # aws s3 sync of the prefix: every object, then nothing left to do.
    aws("s3", "sync", "s3://src/dir/", "s3://synced/")
    expect(keys(s3, "synced") == ["eight", "five", "hundred"], "aws s3 sync s3->s3 copied the three objects")
    for name, path in files.items():
        expect(object_sha256(s3, "synced", name) == sha256(path), "aws s3 sync: %s bytes equal" % name)
    expect(etag_of(s3, "synced", "hundred") == multipart_etag(file_parts(files["hundred"], 8 * MIB)),
           "aws s3 sync: the 100 MiB copy has S3's -13 ETag")
    again = aws("s3", "sync", "s3://src/dir/", "s3://synced/").stdout
    expect("copy:" not in again, "a second aws s3 sync copies nothing: %r" % again[-300:])

    # boto3 upload_part_copy: a range from the middle of a source, a whole source (no range), and
    # a range from its start as the last part.
    source = open(files["hundred"], "rb").read(7 * MIB)
    s3.put_object(Bucket="src", Key="seven", Body=source)
    five = open(files["five"], "rb").read()
    upload = s3.create_multipart_upload(Bucket="dst", Key="assembled")["UploadId"]
    pieces = [(1, "seven", "bytes=%d-%d" % (MIB, 6 * MIB - 1), source[MIB:6 * MIB]),
              (2, "dir/five", None, five),
              (3, "seven", "bytes=0-999", source[:1000])]
    done = []
    for number, key, rng, data in pieces:
        args = dict(Bucket="dst", Key="assembled", UploadId=upload, PartNumber=number,
                    CopySource={"Bucket": "src", "Key": key})
        if rng:
            args["CopySourceRange"] = rng
        result = s3.upload_part_copy(**args)["CopyPartResult"]
        etag = result["ETag"].strip('"')
        expect(etag == hashlib.md5(data).hexdigest() and "LastModified" in result,
               "upload_part_copy part %d (%s): CopyPartResult ETag is the MD5 of the range" % (number, rng or "whole"))
        done.append({"PartNumber": number, "ETag": result["ETag"]})
    listed = s3.list_parts(Bucket="dst", Key="assembled", UploadId=upload)["Parts"]
    expect([p["Size"] for p in listed] == [5 * MIB, 5 * MIB + 1, 1000], "ListParts shows the copied parts' sizes")
    # Copied parts are held to the rules of uploaded ones: ascending order, >= 5 MiB but the last.
    got = error_of(lambda: s3.complete_multipart_upload(Bucket="dst", Key="assembled", UploadId=upload,
                                                        MultipartUpload={"Parts": [done[2], done[0]]}))
    expect(got == (400, "InvalidPartOrder"), "Complete with parts out of order: %s" % (got,))
    small = s3.upload_part_copy(Bucket="dst", Key="assembled", UploadId=upload, PartNumber=4,
                                CopySource={"Bucket": "src", "Key": "seven"}, CopySourceRange="bytes=0-999")
    got = error_of(lambda: s3.complete_multipart_upload(
        Bucket="dst", Key="assembled", UploadId=upload,
        MultipartUpload={"Parts": done[:2] + [done[2], {"PartNumber": 4, "ETag": small["CopyPartResult"]["ETag"]}]}))
    expect(got == (400, "EntityTooSmall"), "a copied 1000-byte part that is not the last: %s" % (got,))
    # Part 2 copied again from another source replaces the first copy, as UploadPart would.
    again = s3.upload_part_copy(Bucket="dst", Key="assembled", UploadId=upload, PartNumber=2,
                                CopySource={"Bucket": "src", "Key": "seven"}, CopySourceRange="bytes=0-%d" % (5 * MIB))
    pieces[1] = (2, "seven", None, source[:5 * MIB + 1])
    done[1] = {"PartNumber": 2, "ETag": again["CopyPartResult"]["ETag"]}
    completed = s3.complete_multipart_upload(Bucket="dst", Key="assembled", UploadId=upload,
                                             MultipartUpload={"Parts": done})
    want = multipart_etag([d for _, _, _, d in pieces])
    expect(completed["ETag"].strip('"') == want, "CompleteMultipartUpload of copied parts: ETag %s" % want)
    body = s3.get_object(Bucket="dst", Key="assembled")["Body"].read()
    expect(body == source[MIB:6 * MIB] + source[:5 * MIB + 1] + source[:1000],
           "the assembled object is the three ranges, byte for byte")

    # Refusals.
    upload = s3.create_multipart_upload(Bucket="dst", Key="refused")["UploadId"]

    def part_copy(rng=None, bucket="src", key="seven", upload_id=upload):
        args = dict(Bucket="dst", Key="refused", UploadId=upload_id, PartNumber=1,
                    CopySource={"Bucket": bucket, "Key": key})
        if rng is not None:
            args["CopySourceRange"] = rng
        return lambda: s3.upload_part_copy(**args)

    size = len(source)
    for rng in ("bytes=0-%d" % size, "bytes=%d-%d" % (size, size + 10), "bytes=%d-%d" % (size - 1, 2 ** 64 - 1)):
        got = error_of(part_copy(rng))
        expect(got == (400, "InvalidArgument"), "range past the end of the %d-byte source %r: %s" % (size, rng, got))
    for rng in ("bytes=5-1", "bytes=-5", "bytes=0-", "0-5", "bytes=a-b", "bytes= 0-5", "bytes=+0-5", "bytes=0--5",
                "bytes=0-5,7-9", "bytes=99999999999999999999-100000000000000000000", "bytes=0-18446744073709551616",
                "items=0-5", ""):
        got = error_of(part_copy(rng))
        expect(got == (400, "InvalidArgument"), "malformed x-amz-copy-source-range %r: %s" % (rng, got))
    got = error_of(part_copy("bytes=%d-%d" % (size - 1, size - 1)))
    expect(got == (200, None), "the last byte alone is a valid range")
    got = error_of(part_copy(key="no-such-key"))
    expect(got == (404, "NoSuchKey"), "missing source key: %s" % (got,))
    got = error_of(part_copy(bucket="no-such-bucket"))
    expect(got == (404, "NoSuchBucket"), "missing source bucket: %s" % (got,))
    got = error_of(part_copy(upload_id="0" * 32))
    expect(got == (404, "NoSuchUpload"), "unknown upload id: %s" % (got,))
    s3.abort_multipart_upload(Bucket="dst", Key="refused", UploadId=upload)
    return None


def test_rb(server, tmp, aws_path):
    s3 = boto3_client(server)
    aws = Aws(aws_path, server, tmp)
    buckets_dir = os.path.join(server.root, "buckets")

    def start_upload(bucket):
        upload = s3.create_multipart_upload(Bucket=bucket, Key="unfinished")["UploadId"]
        s3.upload_part(Bucket=bucket, Key="unfinished", UploadId=upload, PartNumber=1, Body=os.urandom(MIB))
        return upload

    # --force: the CLI deletes the objects, then DeleteBucket must abort the upload.
    s3.create_bucket(Bucket="forced")
    s3.put_object(Bucket="forced", Key="obj", Body=b"x" * 1000)
    start_upload("forced")
    aws("s3", "rb", "--force", "s3://forced")
    expect(error_of(lambda: s3.head_bucket(Bucket="forced"))[0] == 404, "aws s3 rb --force removed the bucket")
    expect("forced" not in [b["Name"] for b in s3.list_buckets()["Buckets"]], "ListBuckets no longer has it")
    expect(not os.path.exists(os.path.join(buckets_dir, "forced")), "its directory, staged part included, is gone")
    s3.create_bucket(Bucket="forced")
    expect(s3.list_multipart_uploads(Bucket="forced").get("Uploads", []) == [],
           "a bucket made again under the name has no upload of the old one")

    # Without --force, an object keeps the bucket (409) and its upload stays.
    s3.create_bucket(Bucket="kept")
    s3.put_object(Bucket="kept", Key="obj", Body=b"y" * 1000)
    upload = start_upload("kept")
    r = aws("s3", "rb", "s3://kept", check=False)
    expect(r.returncode != 0 and "BucketNotEmpty" in r.stderr,
           "aws s3 rb of a bucket with an object: BucketNotEmpty (%s)" % r.stderr.strip()[-200:])
    got = error_of(lambda: s3.delete_bucket(Bucket="kept"))
    expect(got == (409, "BucketNotEmpty"), "DeleteBucket with an object: 409 BucketNotEmpty (%s)" % (got,))
    expect(keys(s3, "kept") == ["obj"], "the object is still there")
    uploads = [u["UploadId"] for u in s3.list_multipart_uploads(Bucket="kept").get("Uploads", [])]
    expect(uploads == [upload], "the refused DeleteBucket left the upload alone")

    # An upload as the only content: DeleteBucket removes the bucket (boto3, no CLI in between).
    s3.delete_object(Bucket="kept", Key="obj")
    start_upload("kept")  # a second upload: both are aborted
    got = error_of(lambda: s3.delete_bucket(Bucket="kept"))
    expect(got == (200, None), "DeleteBucket of a bucket holding only two uploads succeeds (%s)" % (got,))
    expect(error_of(lambda: s3.head_bucket(Bucket="kept"))[0] == 404, "and the bucket is gone")
    expect(error_of(lambda: s3.list_parts(Bucket="kept", Key="unfinished", UploadId=upload))[0] == 404,
           "its uploads went with it")
    return None


def test_basics(server, tmp, aws_path):
    """Small answers clients rely on: CreateBucket of a bucket you own, GetBucketVersioning,
    what a 304 carries, an empty Content-MD5."""
    import botocore.exceptions
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="basics")
    got = error_of(lambda: s3.create_bucket(Bucket="basics"))
    expect(got == (200, None), "CreateBucket of a bucket you own, us-east-1: 200 (%s)" % (got,))
    versioning = s3.get_bucket_versioning(Bucket="basics")
    expect("Status" not in versioning and "MFADelete" not in versioning,
           "GetBucketVersioning: never enabled, no Status (%s)" % {k: v for k, v in versioning.items()
                                                                   if k != "ResponseMetadata"})
    expect(error_of(lambda: s3.get_bucket_versioning(Bucket="nobucket"))[0] == 404,
           "GetBucketVersioning of a missing bucket: 404")
    put = s3.put_object(Bucket="basics", Key="k", Body=b"hello")
    head = s3.head_object(Bucket="basics", Key="k")
    for name, kwargs in (("If-None-Match", {"IfNoneMatch": put["ETag"]}),
                         ("If-Modified-Since", {"IfModifiedSince": head["LastModified"]})):
        try:
            s3.get_object(Bucket="basics", Key="k", **kwargs)
            expect(False, "GET with a matching %s: 304" % name)
        except botocore.exceptions.ClientError as e:
            headers = e.response["ResponseMetadata"]["HTTPHeaders"]
            expect(e.response["ResponseMetadata"]["HTTPStatusCode"] == 304, "GET with a matching %s: 304" % name)
            expect(headers.get("etag") == put["ETag"] and headers.get("last-modified"),
                   "the 304 carries ETag and Last-Modified (%s)" % headers)
    # An empty Content-MD5 header (present, no value): 400 InvalidDigest, nothing stored. Signed
    # by botocore and sent raw (curl's --aws-sigv4 signs an empty header as an empty name).
    status, body = signed_request(server, "PUT", "/basics/empty-md5", b"abc", {"Content-MD5": ""})
    expect(status == 400 and b"<Code>InvalidDigest</Code>" in body,
           "PUT with an empty Content-MD5: 400 InvalidDigest (%d %s)" % (status, body[-200:]))
    expect(error_of(lambda: s3.head_object(Bucket="basics", Key="empty-md5"))[0] == 404, "and nothing stored")
    return None


def main():
    binary, scenario = sys.argv[1], sys.argv[2]
    tests = {"copy": test_copy, "rb": test_rb, "basics": test_basics}
    if scenario not in tests:
        print("unknown scenario " + scenario)
        return 2
    try:
        import boto3  # noqa: F401
    except ImportError:
        print("SKIPPED: boto3 is not installed for " + sys.executable)
        return SKIP
    aws = find_aws_v1()
    if not aws:
        print("SKIPPED: the AWS CLI v1 is not installed")
        return SKIP
    tmp = tempfile.mkdtemp(prefix="sluice-semantics-")
    try:
        server = Server(binary, os.path.join(tmp, "root"), AK, SK, ["--fabric", "off", "--grant-socket", "off"]).start()
        try:
            print("%s against sluice serve on %s" % (scenario, server.url))
            skipped = tests[scenario](server, tmp, aws)
        finally:
            server.stop()
        if skipped:
            print("SKIPPED: " + skipped)
            return SKIP
        print("PASSED: " + scenario)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
