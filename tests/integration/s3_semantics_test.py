#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
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
        suffix, open-ended, no unit, signs, blanks, 64-bit overflow) as 400 InvalidArgument (past
        the end: 416 InvalidRange), a
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
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MIB, expect, make_file, run_scenario, sha256  # noqa: E402

AK, SK = "SEMAK", "semantics-secret-key"
SKIP = 77


def find_aws_clis():
    """The AWS CLIs installed: v2 (Debian's awscli, /usr/bin/aws) and v1 (pip's, as the interop
    tests find it), as (name, path) pairs; an empty list when there is none."""
    found = []
    for path in ("/usr/bin/aws", shutil.which("aws", path=os.path.expanduser("~/.pyenv/shims") + ":/usr/local/bin"), shutil.which("aws")):
        if not path or any(path == p for _, p in found):
            continue
        r = subprocess.run([path, "--version"], capture_output=True, text=True)
        version = (r.stdout + r.stderr).strip()
        for major in ("1", "2"):
            name = "v" + major
            if version.startswith("aws-cli/%s." % major) and name not in [n for n, _ in found]:
                found.append((name, path))
    return found


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
def test_copy(server, tmp, clis):
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="src")
    files = {"eight": make_file(os.path.join(tmp, "eight"), 8 * MIB, 1),
             "hundred": make_file(os.path.join(tmp, "hundred"), 100 * MIB, 2),
             "five": make_file(os.path.join(tmp, "five"), 5 * MIB + 1, 3)}
    for name, path in files.items():  # single PUTs: the source ETags are plain MD5s
        with open(path, "rb") as f:
            s3.put_object(Bucket="src", Key="dir/" + name, Body=f)
    s3.put_object_tagging(Bucket="src", Key="dir/hundred", Tagging={"TagSet": [{"Key": "tier", "Value": "hot"}]})
    for cli, aws_path in clis:
        print("AWS CLI %s (%s)" % (cli, aws_path))
        cli_copies(s3, Aws(aws_path, server, tmp), Aws(aws_path, server, tmp, {"multipart_threshold": "5MB",
                                                                               "multipart_chunksize": "5MB"}),
                   files, cli)
    boto3_part_copies(s3, files)


def test_copy_large(server, tmp, clis):
    """`aws s3 cp` bucket to bucket of a 1 GiB object, with each CLI (128 parts of 8 MiB).

    The server's file system holds three copies at the peak: the object, the copied parts and
    the completed copy (fs_store writes the completion into a new file before it publishes it).
    A machine with less free space would answer 507 InsufficientStorage, as it should: that is
    said as a skip, not as a failure of the server."""
    need = 3 * 1024 * MIB + 256 * MIB
    free = shutil.disk_usage(tmp).free
    if free < need:
        return "copy-large needs %.1f GiB free under %s (the object, its parts and the completed copy); %.1f GiB " \
               "is free" % (need / (1024 * MIB), tmp, free / (1024 * MIB))
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="big")
    # The object's SHA-256 and its 8 MiB parts' MD5s as it is written: one pass, 8 MiB in memory.
    path, whole, part_md5s = os.path.join(tmp, "gib"), hashlib.sha256(), []
    rnd = random.Random(7)
    with open(path, "wb") as f:
        for _ in range(128):
            block = rnd.randbytes(8 * MIB)
            f.write(block)
            whole.update(block)
            part_md5s.append(hashlib.md5(block).digest())
    want_sha = whole.hexdigest()
    want_etag = "%s-%d" % (hashlib.md5(b"".join(part_md5s)).hexdigest(), len(part_md5s))
    with open(path, "rb") as f:
        s3.put_object(Bucket="big", Key="gib", Body=f)
    os.unlink(path)
    for cli, aws_path in clis:
        aws = Aws(aws_path, server, tmp)
        aws("s3", "cp", "s3://big/gib", "s3://big/copy-" + cli)
        expect(object_sha256(s3, "big", "copy-" + cli) == want_sha,
               "CLI %s: aws s3 cp s3->s3 of 1 GiB: bytes equal (SHA-256)" % cli)
        got = etag_of(s3, "big", "copy-" + cli)
        expect(got == want_etag and got.endswith("-128"), "CLI %s: its ETag %s is S3's -128" % (cli, got))
        s3.delete_object(Bucket="big", Key="copy-" + cli)
    return None


def cli_copies(s3, aws, aws5, files, cli):
    """aws s3 cp/mv/sync between buckets with one CLI; its buckets are named after it."""
    src, dst, synced = "src", "dst-" + cli, "synced-" + cli
    for b in (dst, synced):
        s3.create_bucket(Bucket=b)
    # aws s3 cp bucket to bucket: >= 8 MiB goes by UploadPartCopy in 8 MiB parts.
    for name, parts in (("eight", 1), ("hundred", 13)):
        aws("s3", "cp", "s3://src/dir/" + name, "s3://%s/cp/%s" % (dst, name))
        expect(object_sha256(s3, dst, "cp/" + name) == sha256(files[name]),
               "CLI %s: aws s3 cp s3->s3 %s: bytes equal (SHA-256)" % (cli, name))
        want = multipart_etag(file_parts(files[name], 8 * MIB))
        got = etag_of(s3, dst, "cp/" + name)
        expect(got == want and want.endswith("-%d" % parts),
               "CLI %s: aws s3 cp s3->s3 %s: ETag %s is the -N of the 8 MiB part MD5s (%s)" % (cli, name, got, want))
    if cli == "v2":  # CLI v2 carries the source's tags over (GetObjectTagging, then x-amz-tagging)
        tags = s3.get_object_tagging(Bucket=dst, Key="cp/hundred")["TagSet"]
        expect(tags == [{"Key": "tier", "Value": "hot"}], "CLI v2: the copy has the source's tags (%s)" % tags)
    # 5 MiB + 1 byte with 5 MiB parts: two parts copied, the last of one byte.
    aws5("s3", "cp", "s3://src/dir/five", "s3://%s/cp/five" % dst)
    want = multipart_etag(file_parts(files["five"], 5 * MIB))
    expect(object_sha256(s3, dst, "cp/five") == sha256(files["five"]) and etag_of(s3, dst, "cp/five") == want
           and want.endswith("-2"), "CLI %s: aws s3 cp s3->s3 5 MiB + 1 with 5 MiB parts: ETag %s" % (cli, want))
    expect(s3.list_multipart_uploads(Bucket=dst).get("Uploads", []) == [], "no upload is left open in " + dst)

    # aws s3 mv: copied, then the source is gone.
    aws("s3", "cp", "s3://src/dir/eight", "s3://src/moving/eight")
    aws("s3", "mv", "s3://src/moving/eight", "s3://%s/mv/eight" % dst)
    expect(object_sha256(s3, dst, "mv/eight") == sha256(files["eight"]),
           "CLI %s: aws s3 mv s3->s3 8 MiB: bytes equal" % cli)
    expect(error_of(lambda: s3.head_object(Bucket="src", Key="moving/eight"))[0] == 404, "aws s3 mv removed the source")

    # aws s3 sync of the prefix: every object, then nothing left to do.
    aws("s3", "sync", "s3://src/dir/", "s3://%s/" % synced)
    expect(keys(s3, synced) == ["eight", "five", "hundred"], "CLI %s: aws s3 sync s3->s3 copied the three" % cli)
    for name, path in files.items():
        expect(object_sha256(s3, synced, name) == sha256(path), "aws s3 sync: %s bytes equal" % name)
    expect(etag_of(s3, synced, "hundred") == multipart_etag(file_parts(files["hundred"], 8 * MIB)),
           "CLI %s: aws s3 sync: the 100 MiB copy has S3's -13 ETag" % cli)
    again = aws("s3", "sync", "s3://src/dir/", "s3://%s/" % synced).stdout
    expect("copy:" not in again, "a second aws s3 sync copies nothing: %r" % again[-300:])


def boto3_part_copies(s3, files):
    """boto3 upload_part_copy: ranges, whole sources, and what it refuses."""
    s3.create_bucket(Bucket="dst")
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
        expect(got == (416, "InvalidRange"), "range past the end of the %d-byte source %r: %s" % (size, rng, got))
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


def test_rb(server, tmp, clis):
    s3 = boto3_client(server)
    aws = Aws(clis[0][1], server, tmp)
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


def test_basics(server, tmp, clis):
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


def test_tagging(server, tmp, clis):
    """Object tagging: Put/Get/DeleteObjectTagging, x-amz-tagging on PUT, CreateMultipartUpload
    and CopyObject (x-amz-tagging-directive), x-amz-tagging-count, and the tag sets S3 refuses."""
    import botocore.exceptions
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="tags")
    data = os.urandom(3 * MIB + 7)
    put = s3.put_object(Bucket="tags", Key="obj", Body=data, Tagging="team=ml&stage=raw%20data")
    got = s3.get_object_tagging(Bucket="tags", Key="obj")["TagSet"]
    expect(sorted((t["Key"], t["Value"]) for t in got) == [("stage", "raw data"), ("team", "ml")],
           "PUT with x-amz-tagging stores the tags (%s)" % got)
    expect(s3.get_object(Bucket="tags", Key="obj")["ResponseMetadata"]["HTTPHeaders"].get("x-amz-tagging-count")
           == "2", "GET carries x-amz-tagging-count: 2")
    tagset = [{"Key": "k%d" % i, "Value": "v é %d" % i} for i in range(10)]
    s3.put_object_tagging(Bucket="tags", Key="obj", Tagging={"TagSet": tagset})
    got = s3.get_object_tagging(Bucket="tags", Key="obj")["TagSet"]
    expect(sorted(got, key=lambda t: t["Key"]) == sorted(tagset, key=lambda t: t["Key"]),
           "PutObjectTagging replaces the set with 10 tags (unicode values)")
    obj = s3.get_object(Bucket="tags", Key="obj")
    expect(obj["Body"].read() == data and obj["ETag"] == put["ETag"],
           "tagging leaves the bytes and the ETag as they were")
    s3.delete_object_tagging(Bucket="tags", Key="obj")
    expect(s3.get_object_tagging(Bucket="tags", Key="obj")["TagSet"] == [], "DeleteObjectTagging empties the set")
    expect("x-amz-tagging-count" not in s3.head_object(Bucket="tags", Key="obj")["ResponseMetadata"]["HTTPHeaders"],
           "no x-amz-tagging-count once there are none")
    expect(s3.get_object(Bucket="tags", Key="obj")["Body"].read() == data, "and the bytes are still the same")

    # Refused sets: 400 InvalidTag, nothing changed.
    s3.put_object_tagging(Bucket="tags", Key="obj", Tagging={"TagSet": [{"Key": "keep", "Value": "1"}]})
    refused = {
        "eleven tags": [{"Key": "k%d" % i, "Value": "v"} for i in range(11)],
        "a key twice": [{"Key": "a", "Value": "1"}, {"Key": "a", "Value": "2"}],
        "a 129-character key": [{"Key": "k" * 129, "Value": "v"}],
        "a 257-character value": [{"Key": "k", "Value": "v" * 257}],
        "an aws: key": [{"Key": "aws:owner", "Value": "v"}],
    }
    for what, tags in refused.items():
        got = error_of(lambda: s3.put_object_tagging(Bucket="tags", Key="obj", Tagging={"TagSet": tags}))
        expect(got == (400, "InvalidTag"), "PutObjectTagging with %s: 400 InvalidTag (%s)" % (what, got))
    got = error_of(lambda: s3.put_object(Bucket="tags", Key="bad", Body=b"x", Tagging="aws:x=1"))
    expect(got == (400, "InvalidTag"), "PUT with x-amz-tagging aws:x: 400 InvalidTag (%s)" % (got,))
    expect(error_of(lambda: s3.head_object(Bucket="tags", Key="bad"))[0] == 404, "and nothing stored")
    status, body = signed_request(server, "PUT", "/tags/obj?tagging", b"<Tagging><TagSet><Tag><Key></Key><Value>v"
                                  b"</Value></Tag></TagSet></Tagging>")
    expect(status == 400 and b"InvalidTag" in body, "an empty tag key (boto3 refuses to send one): 400 InvalidTag")
    status, body = signed_request(server, "PUT", "/tags/obj?tagging", b"<Tagging><TagSet><Tag><Key>x</Key></Tag>"
                                  b"</TagSet></Tagging>")
    expect(status == 400 and b"MalformedXML" in body, "a Tag without Value: 400 MalformedXML (%d)" % status)
    expect(s3.get_object_tagging(Bucket="tags", Key="obj")["TagSet"] == [{"Key": "keep", "Value": "1"}],
           "the refused requests changed nothing")
    got = error_of(lambda: s3.get_object_tagging(Bucket="tags", Key="missing"))
    expect(got == (404, "NoSuchKey"), "GetObjectTagging of a missing key: 404 NoSuchKey (%s)" % (got,))
    got = error_of(lambda: s3.put_object_tagging(Bucket="tags", Key="missing", Tagging={"TagSet": []}))
    expect(got == (404, "NoSuchKey"), "PutObjectTagging of a missing key: 404 NoSuchKey (%s)" % (got,))
    try:
        s3.get_bucket_tagging(Bucket="tags")
        expect(False, "the bucket has no tags of its own: 404 NoSuchTagSet")
    except botocore.exceptions.ClientError as e:
        expect(e.response["ResponseMetadata"]["HTTPStatusCode"] == 404 and e.response["Error"]["Code"] == "NoSuchTagSet",
               "the bucket has no tags of its own (object tags are apart): 404 NoSuchTagSet")

    # CopyObject: the tags come along (COPY, the default) or are replaced (REPLACE).
    s3.copy_object(Bucket="tags", Key="copied", CopySource={"Bucket": "tags", "Key": "obj"})
    expect(s3.get_object_tagging(Bucket="tags", Key="copied")["TagSet"] == [{"Key": "keep", "Value": "1"}],
           "CopyObject keeps the source's tags by default")
    s3.copy_object(Bucket="tags", Key="copied", CopySource={"Bucket": "tags", "Key": "obj"},
                   TaggingDirective="REPLACE", Tagging="new=yes")
    expect(s3.get_object_tagging(Bucket="tags", Key="copied")["TagSet"] == [{"Key": "new", "Value": "yes"}],
           "CopyObject with x-amz-tagging-directive REPLACE takes x-amz-tagging")
    # CreateMultipartUpload with x-amz-tagging: the completed object has them.
    upload = s3.create_multipart_upload(Bucket="tags", Key="mp", Tagging="part=whole")["UploadId"]
    etag = s3.upload_part(Bucket="tags", Key="mp", UploadId=upload, PartNumber=1, Body=b"abc")["ETag"]
    s3.complete_multipart_upload(Bucket="tags", Key="mp", UploadId=upload,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    expect(s3.get_object_tagging(Bucket="tags", Key="mp")["TagSet"] == [{"Key": "part", "Value": "whole"}],
           "CreateMultipartUpload's x-amz-tagging lands on the completed object")
    # Tags survive a restart (they are stored with the object's metadata).
    server.stop()
    server.start()
    s3 = boto3_client(server)
    expect(s3.get_object_tagging(Bucket="tags", Key="copied")["TagSet"] == [{"Key": "new", "Value": "yes"}],
           "tags survive a server restart")
    return None


def test_conditional(server, tmp, clis):
    """Conditional writes (PUT and CompleteMultipartUpload with If-None-Match: * / If-Match),
    CopyObject's x-amz-copy-source-if-*, and a repeated CompleteMultipartUpload."""
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="cond")

    def put(key, body, headers):
        return signed_request(server, "PUT", "/cond/" + key, body, headers)

    status, _ = put("new", b"first", {"If-None-Match": "*"})
    expect(status == 200, "PUT If-None-Match: * of a new key: 200 (%d)" % status)
    status, body = put("new", b"second", {"If-None-Match": "*"})
    expect(status == 412 and b"PreconditionFailed" in body, "again: 412 PreconditionFailed (%d)" % status)
    expect(s3.get_object(Bucket="cond", Key="new")["Body"].read() == b"first", "and the first version stays")
    etag = etag_of(s3, "cond", "new")
    status, body = put("new", b"third", {"If-Match": '"0123456789abcdef0123456789abcdef"'})
    expect(status == 412, "PUT If-Match with another ETag: 412 (%d)" % status)
    status, _ = put("new", b"third", {"If-Match": '"%s"' % etag})
    expect(status == 200 and s3.get_object(Bucket="cond", Key="new")["Body"].read() == b"third",
           "PUT If-Match with the current ETag: 200, replaced")
    status, body = put("absent", b"x", {"If-Match": '"%s"' % etag})
    expect(status == 404 and b"NoSuchKey" in body, "PUT If-Match of a missing key: 404 NoSuchKey (%d)" % status)
    status, body = put("new", b"x", {"If-None-Match": '"%s"' % etag})
    expect(status == 501, "If-None-Match other than * on a write: 501 (%d)" % status)

    # CompleteMultipartUpload with If-None-Match: * over an existing object: 412, the upload stays.
    upload = s3.create_multipart_upload(Bucket="cond", Key="new")["UploadId"]
    part = s3.upload_part(Bucket="cond", Key="new", UploadId=upload, PartNumber=1, Body=b"multipart")["ETag"]
    complete_body = ("<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>%s</ETag></Part>"
                     "</CompleteMultipartUpload>" % part).encode()
    status, _ = signed_request(server, "POST", "/cond/new?uploadId=" + upload, complete_body, {"If-None-Match": "*"})
    expect(status == 412, "CompleteMultipartUpload If-None-Match: * over an object: 412 (%d)" % status)
    expect(s3.get_object(Bucket="cond", Key="new")["Body"].read() == b"third", "the object is unchanged")
    expect(len(s3.list_parts(Bucket="cond", Key="new", UploadId=upload)["Parts"]) == 1, "and the upload stays")
    status, body = signed_request(server, "POST", "/cond/new?uploadId=" + upload, complete_body,
                                  {"If-Match": '"%s"' % etag_of(s3, "cond", "new")})
    expect(status == 200, "CompleteMultipartUpload If-Match of the current ETag: 200 (%d)" % status)
    first = body
    # The same completion again (a client retrying a lost answer): 200, the same ETag.
    status, body = signed_request(server, "POST", "/cond/new?uploadId=" + upload, complete_body)
    expect(status == 200 and body == first, "CompleteMultipartUpload repeated: 200 with the same answer (%d %s)"
           % (status, body[-120:]))
    got = error_of(lambda: s3.list_parts(Bucket="cond", Key="new", UploadId=upload))
    expect(got[0] == 404, "the upload itself is gone (%s)" % (got,))
    got = error_of(lambda: s3.complete_multipart_upload(
        Bucket="cond", Key="new", UploadId="0" * 32, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part}]}))
    expect(got == (404, "NoSuchUpload"), "completing an upload that never was: 404 (%s)" % (got,))
    s3.put_object(Bucket="cond", Key="new", Body=b"overwritten")
    got = error_of(lambda: s3.complete_multipart_upload(
        Bucket="cond", Key="new", UploadId=upload, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part}]}))
    expect(got == (404, "NoSuchUpload"), "once the object is overwritten, the retry is 404 NoSuchUpload (%s)" % (got,))

    # CopyObject's conditions on the source.
    src = s3.head_object(Bucket="cond", Key="new")
    modified = src["LastModified"]
    import datetime
    later, earlier = modified + datetime.timedelta(hours=1), modified - datetime.timedelta(hours=1)
    cases = [({"CopySourceIfMatch": src["ETag"]}, 200), ({"CopySourceIfMatch": '"ffff"'}, 412),
             ({"CopySourceIfNoneMatch": src["ETag"]}, 412), ({"CopySourceIfNoneMatch": '"ffff"'}, 200),
             ({"CopySourceIfModifiedSince": earlier}, 200), ({"CopySourceIfModifiedSince": later}, 412),
             ({"CopySourceIfUnmodifiedSince": later}, 200), ({"CopySourceIfUnmodifiedSince": earlier}, 412),
             ({"CopySourceIfMatch": src["ETag"], "CopySourceIfUnmodifiedSince": earlier}, 200)]
    for i, (condition, want) in enumerate(cases):
        got = error_of(lambda: s3.copy_object(Bucket="cond", Key="copy%d" % i,
                                              CopySource={"Bucket": "cond", "Key": "new"}, **condition))
        expect(got[0] == want, "CopyObject with %s: %d (%s)" % (sorted(condition), want, got))
        expect((error_of(lambda: s3.head_object(Bucket="cond", Key="copy%d" % i))[0] == 200) == (want == 200),
               "the copy exists only when the condition held")
    return None


def test_parts(server, tmp, clis):
    """GET/HEAD ?partNumber=N: a multipart object's part, x-amz-mp-parts-count, and the refusals."""
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="parts")
    chunks = [os.urandom(5 * MIB), os.urandom(5 * MIB + 3), os.urandom(1000)]
    upload = s3.create_multipart_upload(Bucket="parts", Key="mp")["UploadId"]
    done = [{"PartNumber": n + 1, "ETag": s3.upload_part(Bucket="parts", Key="mp", UploadId=upload, PartNumber=n + 1,
                                                          Body=c)["ETag"]} for n, c in enumerate(chunks)]
    s3.complete_multipart_upload(Bucket="parts", Key="mp", UploadId=upload, MultipartUpload={"Parts": done})
    offset = 0
    for n, chunk in enumerate(chunks, start=1):
        got = s3.get_object(Bucket="parts", Key="mp", PartNumber=n)
        headers = got["ResponseMetadata"]["HTTPHeaders"]
        expect(got["Body"].read() == chunk and got["ResponseMetadata"]["HTTPStatusCode"] == 206,
               "GET partNumber=%d: 206 with that part's bytes" % n)
        expect(headers.get("x-amz-mp-parts-count") == "3" and headers.get("content-range") ==
               "bytes %d-%d/%d" % (offset, offset + len(chunk) - 1, sum(map(len, chunks))),
               "with x-amz-mp-parts-count 3 and its Content-Range (%s)" % headers.get("content-range"))
        head = s3.head_object(Bucket="parts", Key="mp", PartNumber=n)
        expect(head["ContentLength"] == len(chunk) and head.get("PartsCount") == 3,
               "HEAD partNumber=%d: its length, PartsCount 3" % n)
        offset += len(chunk)
    got = error_of(lambda: s3.get_object(Bucket="parts", Key="mp", PartNumber=4))
    expect(got == (400, "InvalidPart"), "partNumber beyond the parts: 400 InvalidPart (%s)" % (got,))
    got = error_of(lambda: s3.get_object(Bucket="parts", Key="mp", PartNumber=1, Range="bytes=0-9"))
    expect(got == (400, "InvalidRequest"), "partNumber with Range: 400 InvalidRequest (%s)" % (got,))
    status, body = signed_request(server, "GET", "/parts/mp?partNumber=0")
    expect(status == 400 and b"InvalidArgument" in body, "partNumber=0: 400 InvalidArgument (%d)" % status)
    s3.put_object(Bucket="parts", Key="single", Body=b"0123456789")
    got = s3.get_object(Bucket="parts", Key="single", PartNumber=1)
    expect(got["Body"].read() == b"0123456789" and "x-amz-mp-parts-count" not in
           got["ResponseMetadata"]["HTTPHeaders"], "a plain object's part 1 is the whole object")
    got = error_of(lambda: s3.get_object(Bucket="parts", Key="single", PartNumber=2))
    expect(got == (400, "InvalidPart"), "its part 2: 400 InvalidPart (%s)" % (got,))
    return None


def test_headers(server, tmp, clis):
    """Stored and overridden headers: Expires and Content-Language, GET's response-* overrides
    (and a CR LF smuggled into one), aws-chunked dropped from Content-Encoding, CopyObject onto
    itself."""
    import datetime
    import urllib.request
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="hdr")
    expires = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    s3.put_object(Bucket="hdr", Key="obj", Body=b"body", ContentLanguage="de-CH", Expires=expires,
                  ContentType="text/plain")
    head = s3.head_object(Bucket="hdr", Key="obj")
    headers = head["ResponseMetadata"]["HTTPHeaders"]
    expect(headers.get("content-language") == "de-CH" and head.get("Expires") == expires,
           "Content-Language and Expires are stored and returned (%s, %s)" % (headers.get("content-language"),
                                                                            headers.get("expires")))
    overrides = {"ResponseContentType": "application/x-override", "ResponseContentLanguage": "fr",
                 "ResponseExpires": datetime.datetime(2031, 1, 1, tzinfo=datetime.timezone.utc),
                 "ResponseCacheControl": "no-cache", "ResponseContentDisposition": 'attachment; filename="a b.txt"',
                 "ResponseContentEncoding": "identity"}
    got = s3.get_object(Bucket="hdr", Key="obj", **overrides)
    headers = got["ResponseMetadata"]["HTTPHeaders"]
    expect(got["Body"].read() == b"body" and headers["content-type"] == "application/x-override" and
           headers["content-language"] == "fr" and headers["cache-control"] == "no-cache" and
           headers["content-disposition"] == 'attachment; filename="a b.txt"' and
           headers["content-encoding"] == "identity" and headers["expires"].startswith("Wed, 01 Jan 2031"),
           "GET with the six response-* overrides answers with them (%s)" % headers)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "hdr", "Key": "obj",
                                                          "ResponseContentType": "image/png"})
    with urllib.request.urlopen(url) as r:
        expect(r.headers["Content-Type"] == "image/png" and r.read() == b"body",
               "a presigned URL with response-content-type gets it")
    status, body = signed_request(server, "GET", "/hdr/obj?response-content-type=text%2Fplain%0D%0AX-Evil%3A%201")
    expect(status == 400 and b"X-Evil" not in body, "a CR LF in a response-* override: 400 (%d)" % status)
    expect(s3.head_object(Bucket="hdr", Key="obj")["ContentType"] == "text/plain", "stored Content-Type unchanged")

    status, _ = signed_request(server, "PUT", "/hdr/gz", b"zipped", {"Content-Encoding": "gzip, aws-chunked"})
    enc = s3.head_object(Bucket="hdr", Key="gz").get("ContentEncoding")
    expect(status == 200 and enc == "gzip", "Content-Encoding 'gzip, aws-chunked' is stored as gzip (%r)" % enc)
    status, _ = signed_request(server, "PUT", "/hdr/gz2", b"zipped", {"Content-Encoding": "aws-chunked,br , gzip"})
    enc = s3.head_object(Bucket="hdr", Key="gz2").get("ContentEncoding")
    expect(status == 200 and enc == "br, gzip", "'aws-chunked,br , gzip' is stored as 'br, gzip' (%r)" % enc)

    got = error_of(lambda: s3.copy_object(Bucket="hdr", Key="obj", CopySource={"Bucket": "hdr", "Key": "obj"}))
    expect(got == (400, "InvalidRequest"), "CopyObject onto itself without a change: 400 InvalidRequest (%s)" % (got,))
    s3.copy_object(Bucket="hdr", Key="obj", CopySource={"Bucket": "hdr", "Key": "obj"}, MetadataDirective="REPLACE",
                   ContentType="text/html", Metadata={"edited": "yes"})
    head = s3.head_object(Bucket="hdr", Key="obj")
    expect(head["ContentType"] == "text/html" and head["Metadata"] == {"edited": "yes"} and
           s3.get_object(Bucket="hdr", Key="obj")["Body"].read() == b"body",
           "CopyObject onto itself with REPLACE changes the metadata and keeps the bytes")
    return None


def test_listing(server, tmp, clis):
    """ListObjectsV2 fetch-owner and an empty continuation-token, ListObjects v1's echoes,
    ListObjectVersions, GetBucketLocation, HEAD bucket's region, DeleteObjects quiet."""
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="lst")
    for key in ("a b/1", "a b/2", "ü/3", "z"):
        s3.put_object(Bucket="lst", Key=key, Body=b"x")
    with_owner = s3.list_objects_v2(Bucket="lst", FetchOwner=True)["Contents"]
    expect(all(o.get("Owner", {}).get("ID") == AK for o in with_owner), "ListObjectsV2 fetch-owner=true: Owner")
    without = s3.list_objects_v2(Bucket="lst")["Contents"]
    expect(all("Owner" not in o for o in without), "ListObjectsV2 without fetch-owner: no Owner")
    status, body = signed_request(server, "GET", "/lst?list-type=2&continuation-token=")
    expect(status == 200 and (b"<ContinuationToken></ContinuationToken>" in body or b"<ContinuationToken/>" in body),
           "an empty continuation-token is echoed (%d)" % status)
    status, body = signed_request(server, "GET", "/lst?prefix=a%20b%2F&marker=a%20b%2F1")
    expect(status == 200 and b"<Prefix>a b/</Prefix>" in body and b"<Marker>a b/1</Marker>" in body and
           b"<Key>a b/2</Key>" in body and b"<Key>a b/1</Key>" not in body,
           "ListObjects v1 echoes Prefix and Marker decoded")
    status, body = signed_request(server, "GET", "/lst?prefix=a%20b%2F&marker=a%20b%2F1&encoding-type=url")
    expect(status == 200 and b"<Prefix>a b/</Prefix>" in body and b"<Marker>a%20b/1</Marker>" in body and
           b"<EncodingType>url</EncodingType>" in body,
           "with encoding-type=url: Marker url-encoded, Prefix as given (S3's v1, which botocore expects)")
    versions = s3.list_object_versions(Bucket="lst")["Versions"]
    expect(len(versions) == 4 and all(v["VersionId"] == "null" and v["IsLatest"] for v in versions),
           "ListObjectVersions: each object once, VersionId null, IsLatest")
    location = s3.get_bucket_location(Bucket="lst").get("LocationConstraint")
    expect(location in (None, ""), "GetBucketLocation of us-east-1: empty (%r)" % location)
    head = s3.head_bucket(Bucket="lst")["ResponseMetadata"]["HTTPHeaders"]
    expect(head.get("x-amz-bucket-region") == "us-east-1", "HEAD bucket carries x-amz-bucket-region")
    result = s3.delete_objects(Bucket="lst", Delete={"Objects": [{"Key": "z"}, {"Key": "never"}], "Quiet": True})
    expect(result.get("Deleted", []) == [] and result.get("Errors", []) == [], "DeleteObjects quiet: nothing listed")
    result = s3.delete_objects(Bucket="lst", Delete={"Objects": [{"Key": "ü/3"}]})
    expect([d["Key"] for d in result["Deleted"]] == ["ü/3"], "DeleteObjects: the deleted key listed")
    expect(keys(s3, "lst") == ["a b/1", "a b/2"], "and both are gone")
    return None


def test_errors(server, tmp, clis):
    """Error bodies say what is wrong: Message (not the Code again), Resource and RequestId."""
    import re
    import urllib.request
    s3 = boto3_client(server)
    s3.create_bucket(Bucket="err")

    def error_fields(body):
        return {k: (re.search(("<%s>(.*?)</%s>" % (k, k)).encode(), body) or [b"", b""])[1].decode()
                for k in ("Code", "Message", "Resource", "RequestId")}

    status, body = signed_request(server, "GET", "/err/missing")
    fields = error_fields(body)
    expect(status == 404 and fields["Code"] == "NoSuchKey" and fields["Message"] == "The specified key does not exist."
           and fields["Resource"] == "/err/missing" and fields["RequestId"], "NoSuchKey: %s" % fields)
    # A SigV4 PUT without x-amz-content-sha256: S3 names the missing header.
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    request = AWSRequest(method="PUT", url=server.url + "/err/k", data=b"abc")
    S3SigV4Auth(Credentials(AK, SK), "s3", "us-east-1").add_auth(request)
    del request.headers["x-amz-content-sha256"]
    req = urllib.request.Request(server.url + "/err/k", data=b"abc", method="PUT", headers=dict(request.headers))
    try:
        urllib.request.urlopen(req)
        expect(False, "a PUT without x-amz-content-sha256 is refused")
    except urllib.error.HTTPError as e:
        fields = error_fields(e.read())
        expect(e.code == 400 and fields["Code"] == "InvalidRequest" and "x-amz-content-sha256" in fields["Message"],
               "a PUT without x-amz-content-sha256: 400 InvalidRequest naming the header (%s)" % fields)
        expect(fields["RequestId"] == e.headers["x-amz-request-id"], "RequestId is the x-amz-request-id header")
    # Every error answered in this run says more than its code.
    for path, method in (("/nobucket/k", "GET"), ("/err?uploadId=x", "POST"), ("/err/k?partNumber=99", "GET")):
        status, body = signed_request(server, method, path)
        fields = error_fields(body)
        expect(status >= 400 and fields["Message"] and fields["Message"] != fields["Code"],
               "%s %s: %d %s says %r" % (method, path, status, fields["Code"], fields["Message"]))
    return None


def main():
    binary, scenario = sys.argv[1], sys.argv[2]
    tests = {"copy": test_copy, "copy-large": test_copy_large, "rb": test_rb, "basics": test_basics,
             "tagging": test_tagging, "conditional": test_conditional, "parts": test_parts, "headers": test_headers,
             "listing": test_listing, "errors": test_errors}
    if scenario not in tests:
        print("unknown scenario " + scenario)
        return 2
    try:
        import boto3  # noqa: F401
    except ImportError:
        print("SKIPPED: boto3 is not installed for " + sys.executable)
        return SKIP
    # Only copy, copy-large and rb run an AWS CLI: the others do not start one to ask its version
    # (two CLI starts, seconds each on a loaded machine).
    clis = find_aws_clis() if scenario in ("copy", "copy-large", "rb") else []
    if not clis and scenario in ("copy", "copy-large", "rb"):
        print("SKIPPED: no AWS CLI is installed (scripts/deps.sh installs Debian's awscli, v2)")
        return SKIP
    if clis:
        print("AWS CLIs: " + ", ".join("%s (%s)" % c for c in clis))
    return run_scenario(binary, scenario, "sluice-semantics-", AK, SK,
                        lambda server, tmp: tests[scenario](server, tmp, clis))


if __name__ == "__main__":
    sys.exit(main())
