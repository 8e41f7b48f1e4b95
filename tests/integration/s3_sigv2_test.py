#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""AWS Signature Version 2 against a real `sluice serve` (issue 12), with the clients that make it:
  s3_sigv2_test.py SLUICE_BINARY
- boto3 with signature_version "s3" (header auth, `Authorization: AWS AK:sig`, checked on the
  wire): CreateBucket, PUT/GET/HEAD/DELETE of keys with spaces, '+', '=' and non-ASCII
  characters, metadata, a ListObjects with a prefix, response-content-type (signed), a multipart
  upload (uploads, uploadId and partNumber in the signed resource; signed by botocore's HmacV1Auth), a wrong Content-MD5 (400 BadDigest:
  the body is still checked), and a virtual-hosted request (Host bucket.localhost, the bucket in
  the signed resource; signed without it: 403);
- `aws s3 presign` of the AWS CLI v1 (a SigV2 URL) fetched by curl, bytes compared;
- boto3 generate_presigned_url("put_object") with signature_version "s3", used by `curl -T`;
- refusals: a tampered signature (403 SignatureDoesNotMatch), an expired URL (403 AccessDenied,
  "Request has expired"), an unknown access key (403 InvalidAccessKeyId), a Date an hour old,
  in the year 9999 or 1900 (403 RequestTimeTooSkewed), an aws-chunked payload claimed under SigV2 (400, nothing stored);
- `sluice serve --no-sigv2`: every SigV2 form is 403 AccessDenied while SigV4 still works.
Exit 0: passed; 77: skipped (boto3, curl or the AWS CLI v1 missing); anything else: failed."""
import email.utils
import hashlib
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MIB, Server, expect  # noqa: E402

AK, SK = "SIGV2AK", "sigv2-secret-key"
SKIP = 77
BUCKET = "sigv2"
KEYS = ["plain.txt", "with space/and + plus = eq.bin", "ünïcødé/€ ✓ 日本.dat"]


def find_aws_v1():
    """The AWS CLI v1 (pip's, as the interop tests find it), or None."""
    aws = shutil.which("aws", path=os.path.expanduser("~/.pyenv/shims") + ":/usr/local/bin") or shutil.which("aws")
    if not aws:
        return None
    r = subprocess.run([aws, "--version"], capture_output=True, text=True)
    return aws if (r.stdout + r.stderr).startswith("aws-cli/1.") else None


def client(server, access_key=AK, secret_key=SK, signature_version="s3"):
    """A boto3 client of `server`, path style; SigV2 ("s3") unless told otherwise. Every request's
    Authorization header is recorded in client.sent_authorizations."""
    import boto3
    from botocore.config import Config
    s3 = boto3.client("s3", endpoint_url=server.url, aws_access_key_id=access_key, aws_secret_access_key=secret_key,
                      region_name="us-east-1",
                      config=Config(signature_version=signature_version, s3={"addressing_style": "path"},
                                    retries={"max_attempts": 1}))
    sent = []
    def record(request, **kwargs):
        value = request.headers.get("Authorization")
        sent.append(value.decode() if isinstance(value, bytes) else value)

    s3.meta.events.register("before-send.s3", record)
    s3.sent_authorizations = sent
    return s3


def error_of(call):
    """(HTTP status, S3 error code, message) of a call that must fail; (200, None, None) if it did not."""
    import botocore.exceptions
    try:
        call()
    except botocore.exceptions.ClientError as e:
        return (e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"].get("Code"),
                e.response["Error"].get("Message"))
    return 200, None, None


def curl(*args):
    """(HTTP status, body) of a curl run."""
    r = subprocess.run(["curl", "-sS", "-g", "-o", "-", "-w", "\n%{http_code}"] + list(args), capture_output=True,
                       timeout=120)
    if r.returncode != 0:
        raise AssertionError("curl %s failed: %s" % (args, r.stderr.decode(errors="replace")))
    body, _, status = r.stdout.rpartition(b"\n")
    return int(status), body


def raw_v2(server, method, path, host, auth_path, headers=None, body=b"", date=None, sign_path=None):
    """(status, body) of one request signed by botocore's HmacV1Auth (SigV2) and sent as is to
    the server's address with `host` as the Host header; `auth_path` is the resource botocore signs
    (None: the request path), `sign_path` the path and query it signs (None: `path`)."""
    from botocore.auth import HmacV1Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    class Signer(HmacV1Auth):
        def _get_date(self):
            return date if date is not None else super()._get_date()

    request = AWSRequest(method=method, url="http://%s%s" % (host, sign_path or path), data=body,
                         headers=dict(headers or {}))
    request.auth_path = auth_path
    Signer(Credentials(AK, SK)).add_auth(request)
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    connection.putheader("Host", host)
    for name, value in request.headers.items():
        connection.putheader(name, value)
    connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body)
    response = connection.getresponse()
    got = response.status, response.read()
    connection.close()
    return got


def payload(key):
    return hashlib.sha256(key.encode()).digest() * 4096 + key.encode()  # 128 KiB and a tail


def test_header_auth(server):
    s3 = client(server)
    s3.create_bucket(Bucket=BUCKET)
    expect(s3.sent_authorizations and all(a and a.startswith("AWS " + AK + ":") for a in s3.sent_authorizations),
           "boto3 with signature_version 's3' signs with SigV2 (%s)" % s3.sent_authorizations[:1])
    for key in KEYS:
        data = payload(key)
        s3.put_object(Bucket=BUCKET, Key=key, Body=data, Metadata={"colour": "blue"}, ContentType="text/x-test")
        got = s3.get_object(Bucket=BUCKET, Key=key)
        expect(got["Body"].read() == data, "SigV2 PUT then GET of %r: same bytes" % key)
        head = s3.head_object(Bucket=BUCKET, Key=key)
        expect(head["ContentLength"] == len(data) and head["Metadata"] == {"colour": "blue"} and
               head["ContentType"] == "text/x-test", "SigV2 HEAD of %r: length, metadata, type" % key)
    # ListObjects (v1): botocore signs path-style ListObjectsV2 under SigV2 with "?list-type=2" in
    # the resource, which S3 refuses too (boto/boto3#4433).
    listing = s3.list_objects(Bucket=BUCKET, Prefix="with space/")
    expect([o["Key"] for o in listing.get("Contents", [])] == [KEYS[1]],
           "SigV2 ListObjects with a prefix (not in the signed resource)")
    # response-content-type is a sub-resource: its value is signed (decoded).
    here = "127.0.0.1:%d" % server.port
    override = "/%s/%s?response-content-type=" % (BUCKET, KEYS[0])
    status, body = raw_v2(server, "GET", override + "application%2Fx-override", here, None)
    expect(status == 200 and body == payload(KEYS[0]), "SigV2 GET with response-content-type: 200 (%d)" % status)
    status, body = raw_v2(server, "GET", override + "text%2Fhtml", here, None,
                          sign_path=override + "application%2Fx-override")
    expect(status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in body,
           "SigV2 GET whose response-content-type is not the one signed: 403 SignatureDoesNotMatch (%d)" % status)
    # Content-MD5 is still checked although SigV2 does not sign the payload.
    status, code, _ = error_of(lambda: s3.put_object(Bucket=BUCKET, Key="bad-md5", Body=b"abc",
                                                     ContentMD5="1B2M2Y8AsgTpgAmY7PhCfg=="))
    expect((status, code) == (400, "BadDigest"), "SigV2 PUT with a wrong Content-MD5: 400 BadDigest (%s %s)"
           % (status, code))
    expect(error_of(lambda: s3.head_object(Bucket=BUCKET, Key="bad-md5"))[0] == 404, "and nothing stored")
    # Multipart: uploads, uploadId and partNumber are in the signed resource. Signed by botocore's
    # HmacV1Auth over the URL as sent (boto3's own multipart calls sign "?uploads?uploads" in
    # botocore 1.29, Debian's, which S3 would refuse as well).
    key = "multi part ü"
    path = "/%s/%s" % (BUCKET, urllib.parse.quote(key))
    status, body = raw_v2(server, "POST", path + "?uploads", here, None)
    expect(status == 200 and b"<UploadId>" in body, "SigV2 CreateMultipartUpload (?uploads): 200 (%d)" % status)
    upload = body.split(b"<UploadId>")[1].split(b"</UploadId>")[0].decode()
    parts = [os.urandom(5 * MIB), b"tail"]
    etags = []
    for n, part in enumerate(parts):
        status, _ = raw_v2(server, "PUT", "%s?partNumber=%d&uploadId=%s" % (path, n + 1, urllib.parse.quote(upload)),
                           here, None, body=part)
        expect(status == 200, "SigV2 UploadPart %d (?partNumber&uploadId): 200 (%d)" % (n + 1, status))
        etags.append('"%s"' % hashlib.md5(part).hexdigest())
    status, _ = raw_v2(server, "PUT", "%s?partNumber=3&uploadId=%s" % (path, urllib.parse.quote(upload)), here,
                       None, body=b"x", sign_path="%s?partNumber=4&uploadId=%s" % (path, urllib.parse.quote(upload)))
    expect(status == 403, "an UploadPart signed for another partNumber: 403 (%d)" % status)
    complete = "<CompleteMultipartUpload>%s</CompleteMultipartUpload>" % "".join(
        "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>" % (n + 1, e) for n, e in enumerate(etags))
    status, body = raw_v2(server, "POST", "%s?uploadId=%s" % (path, urllib.parse.quote(upload)), here, None,
                          body=complete.encode())
    expect(status == 200 and b"<ETag>" in body, "SigV2 CompleteMultipartUpload (?uploadId): 200 (%d)" % status)
    expect(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"".join(parts),
           "the multipart object has the bytes of its parts")
    s3.delete_object(Bucket=BUCKET, Key=key)
    # Virtual-hosted style: the bucket comes from Host and belongs in the signed resource.
    host = "%s.localhost:%d" % (BUCKET, server.port)
    status, body = raw_v2(server, "GET", "/" + urllib.parse.quote(KEYS[2]), host, "/%s/%s" % (
        BUCKET, urllib.parse.quote(KEYS[2])))
    expect(status == 200 and body == payload(KEYS[2]), "SigV2 virtual-hosted GET: 200, same bytes (%d)" % status)
    status, body = raw_v2(server, "GET", "/" + urllib.parse.quote(KEYS[2]), host, None)
    expect(status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in body,
           "virtual-hosted, signed without the bucket in the resource: 403 SignatureDoesNotMatch (%d)" % status)
    status, _ = raw_v2(server, "PUT", "/vhost-put", host, "/%s/vhost-put" % BUCKET, body=b"vhost")
    expect(status == 200 and s3.get_object(Bucket=BUCKET, Key="vhost-put")["Body"].read() == b"vhost",
           "SigV2 virtual-hosted PUT: stored (%d)" % status)
    # DELETE, then gone.
    for key in KEYS + ["vhost-put"]:
        s3.delete_object(Bucket=BUCKET, Key=key)
        expect(error_of(lambda: s3.head_object(Bucket=BUCKET, Key=key))[0] == 404, "SigV2 DELETE of %r" % key)


def test_presigned(server, aws, tmp):
    s3 = client(server)
    key = KEYS[2]
    data = payload(key)
    s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    env = dict(os.environ, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK, AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    r = subprocess.run([aws, "--endpoint-url", server.url, "s3", "presign", "s3://%s/%s" % (BUCKET, key),
                        "--expires-in", "300"], env=env, capture_output=True, text=True, timeout=60)
    url = r.stdout.strip()
    expect(r.returncode == 0 and "AWSAccessKeyId=" + AK in url and "Signature=" in url and "X-Amz-" not in url,
           "aws s3 presign (CLI v1) makes a SigV2 URL: %s" % url)
    status, body = curl(url)
    expect(status == 200 and body == data, "curl of the CLI v1's presigned URL: 200, same bytes (%d, %d bytes)"
           % (status, len(body)))
    status, body = curl("-I", url.replace("/" + BUCKET + "/", "/" + BUCKET + "/x", 1))
    expect(status == 403, "the same signature for another key: 403 (%d)" % status)

    # Presigned PUT by boto3, used by curl -T.
    src = os.path.join(tmp, "upload.bin")
    upload = os.urandom(3 * MIB + 5)
    with open(src, "wb") as f:
        f.write(upload)
    put_key = "presigned put ü+.bin"
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": BUCKET, "Key": put_key}, ExpiresIn=300)
    expect("AWSAccessKeyId=" in put_url and "Expires=" in put_url, "boto3 presigns a SigV2 PUT: %s" % put_url)
    status, _ = curl("-T", src, put_url)
    expect(status == 200, "curl -T of the presigned PUT: 200 (%d)" % status)
    expect(s3.get_object(Bucket=BUCKET, Key=put_key)["Body"].read() == upload, "and the object has the bytes sent")

    # Refusals.
    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": key}, ExpiresIn=300)
    parts = urllib.parse.urlsplit(get_url)
    query = urllib.parse.parse_qs(parts.query)
    signature = query["Signature"][0]
    tampered_signature = ("B" if signature[0] != "B" else "C") + signature[1:]
    tampered = get_url.replace(urllib.parse.quote(signature, safe=""), urllib.parse.quote(tampered_signature, safe=""))
    expect(tampered != get_url, "the tampered URL differs")
    status, body = curl(tampered)
    expect(status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in body,
           "a tampered SigV2 signature: 403 SignatureDoesNotMatch (%d %s)" % (status, body[:200]))
    status, body = curl(get_url.replace("Expires=", "Expires=1", 1))
    expect(status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in body,
           "a changed Expires: 403 SignatureDoesNotMatch (%d)" % status)
    expired = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": key}, ExpiresIn=-60)
    status, body = curl(expired)
    expect(status == 403 and b"<Code>AccessDenied</Code>" in body and b"Request has expired" in body,
           "an expired SigV2 URL: 403 AccessDenied, Request has expired (%d %s)" % (status, body[:300]))
    stranger = client(server, access_key="NOSUCHKEY", secret_key="whatever")
    got = error_of(lambda: stranger.get_object(Bucket=BUCKET, Key=key))
    expect(got[:2] == (403, "InvalidAccessKeyId"), "an unknown access key (header): 403 InvalidAccessKeyId (%s)"
           % (got,))
    status, body = curl(stranger.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": key}))
    expect(status == 403 and b"<Code>InvalidAccessKeyId</Code>" in body,
           "an unknown access key (presigned): 403 InvalidAccessKeyId (%d)" % status)
    wrong_secret = client(server, secret_key="not-the-secret")
    got = error_of(lambda: wrong_secret.get_object(Bucket=BUCKET, Key=key))
    expect(got[:2] == (403, "SignatureDoesNotMatch"), "a wrong secret: 403 SignatureDoesNotMatch (%s)" % (got,))
    old = email.utils.formatdate(time.time() - 3600, usegmt=True)
    status, body = raw_v2(server, "GET", "/%s/%s" % (BUCKET, urllib.parse.quote(key)), "127.0.0.1:%d" % server.port,
                          None, date=old)
    expect(status == 403 and b"<Code>RequestTimeTooSkewed</Code>" in body,
           "a SigV2 Date an hour old: 403 RequestTimeTooSkewed (%d %s)" % (status, body[:200]))
    for far in ("Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 01 Jan 1900 00:00:00 GMT"):
        status, body = raw_v2(server, "GET", "/%s/%s" % (BUCKET, urllib.parse.quote(key)),
                              "127.0.0.1:%d" % server.port, None, date=far)
        expect(status == 403 and b"<Code>RequestTimeTooSkewed</Code>" in body,
               "a SigV2 Date of %s: 403 RequestTimeTooSkewed (%d %s)" % (far[12:16], status, body[:120]))
    status, body = raw_v2(server, "PUT", "/%s/chunked" % BUCKET, "127.0.0.1:%d" % server.port, None,
                          headers={"x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
                                   "Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": "3"},
                          body=b"3;chunk-signature=" + b"0" * 64 + b"\r\nabc\r\n0;chunk-signature=" + b"0" * 64 +
                          b"\r\n\r\n")
    expect(status == 400 and b"<Code>InvalidRequest</Code>" in body,
           "an aws-chunked payload under SigV2: 400 InvalidRequest (%d %s)" % (status, body[:200]))
    expect(error_of(lambda: s3.head_object(Bucket=BUCKET, Key="chunked"))[0] == 404, "and nothing stored")


def test_switched_off(binary, tmp, aws):
    server = Server(binary, os.path.join(tmp, "root-off"), AK, SK,
                    ["--fabric", "off", "--grant-socket", "off", "--no-sigv2"]).start()
    try:
        v4 = client(server, signature_version="s3v4")
        v4.create_bucket(Bucket=BUCKET)
        v4.put_object(Bucket=BUCKET, Key="k", Body=b"v4 still works")
        expect(v4.get_object(Bucket=BUCKET, Key="k")["Body"].read() == b"v4 still works",
               "--no-sigv2: SigV4 still works")
        v2 = client(server)
        got = error_of(lambda: v2.get_object(Bucket=BUCKET, Key="k"))
        expect(got[:2] == (403, "AccessDenied") and "Version 2 is disabled" in (got[2] or ""),
               "--no-sigv2: a SigV2 header GET is 403 AccessDenied, SigV2 disabled (%s)" % (got,))
        got = error_of(lambda: v2.put_object(Bucket=BUCKET, Key="v2", Body=b"x"))
        expect(got[:2] == (403, "AccessDenied"), "--no-sigv2: a SigV2 PUT is 403 AccessDenied (%s)" % (got,))
        expect(error_of(lambda: v4.head_object(Bucket=BUCKET, Key="v2"))[0] == 404, "and nothing stored")
        got = error_of(lambda: v2.delete_object(Bucket=BUCKET, Key="k"))
        expect(got[:2] == (403, "AccessDenied"), "--no-sigv2: a SigV2 DELETE is 403 AccessDenied (%s)" % (got,))
        status, body = curl(v2.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": "k"}))
        expect(status == 403 and b"<Code>AccessDenied</Code>" in body,
               "--no-sigv2: a SigV2 presigned URL is 403 AccessDenied (%d)" % status)
        env = dict(os.environ, AWS_ACCESS_KEY_ID=AK, AWS_SECRET_ACCESS_KEY=SK, AWS_DEFAULT_REGION="us-east-1",
                   AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
        url = subprocess.run([aws, "--endpoint-url", server.url, "s3", "presign", "s3://%s/k" % BUCKET], env=env,
                             capture_output=True, text=True, timeout=60).stdout.strip()
        status, body = curl(url)
        expect(status == 403 and b"<Code>AccessDenied</Code>" in body,
               "--no-sigv2: the CLI v1's presigned URL is 403 AccessDenied (%d)" % status)
        expect(v4.get_object(Bucket=BUCKET, Key="k")["Body"].read() == b"v4 still works", "and the object is there")
    finally:
        server.stop()


def main():
    binary = sys.argv[1]
    try:
        import boto3  # noqa: F401
    except ImportError:
        print("SKIPPED: boto3 is not installed for " + sys.executable)
        return SKIP
    if not shutil.which("curl"):
        print("SKIPPED: curl is not installed")
        return SKIP
    aws = find_aws_v1()
    if not aws:
        print("SKIPPED: the AWS CLI v1 is not installed")
        return SKIP
    tmp = tempfile.mkdtemp(prefix="sluice-sigv2-")
    try:
        server = Server(binary, os.path.join(tmp, "root"), AK, SK, ["--fabric", "off", "--grant-socket", "off"]).start()
        try:
            print("SigV2 against sluice serve on %s" % server.url)
            test_header_auth(server)
            test_presigned(server, aws, tmp)
        finally:
            server.stop()
        test_switched_off(binary, tmp, aws)
        print("PASSED: sigv2")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
