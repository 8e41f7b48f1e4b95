#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""boto3 (Debian's python3-boto3) against sluice serve: usage boto3_client.py URL AK SK TMPDIR."""
import hashlib
import os
import sys
import urllib.request

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

url, ak, sk, tmp = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=url, aws_access_key_id=ak, aws_secret_access_key=sk, region_name="us-east-1",
                  config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))


def ok(cond, what):
    if not cond:
        raise AssertionError(what)
    print("  ok: boto3:", what)


s3.create_bucket(Bucket="boto")
data = os.urandom(3 * 1024 * 1024 + 5)
s3.put_object(Bucket="boto", Key="a/b c+d.bin", Body=data, Metadata={"x": "1"}, ContentType="application/x-a",
              CacheControl="no-cache", ContentDisposition="attachment")
got = s3.get_object(Bucket="boto", Key="a/b c+d.bin")
ok(got["Body"].read() == data, "put_object/get_object byte-exact (key with space and +)")
ok(got["Metadata"] == {"x": "1"} and got["ContentType"] == "application/x-a", "metadata and content type")
ok(got["CacheControl"] == "no-cache" and got["ContentDisposition"] == "attachment", "cache-control, disposition")
part = s3.get_object(Bucket="boto", Key="a/b c+d.bin", Range="bytes=100-199")["Body"].read()
ok(part == data[100:200], "ranged get")
ok(s3.head_object(Bucket="boto", Key="a/b c+d.bin")["ETag"] == '"%s"' % hashlib.md5(data).hexdigest(), "ETag is MD5")

# Multipart through the transfer manager (5 MiB parts, 4 threads).
big = os.urandom(17 * 1024 * 1024 + 3)
path = os.path.join(tmp, "boto-big")
open(path, "wb").write(big)
cfg = TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024, max_concurrency=4)
s3.upload_file(path, "boto", "big", Config=cfg)
s3.download_file("boto", "big", path + ".out", Config=cfg)
ok(open(path + ".out", "rb").read() == big, "multipart upload + parallel ranged download byte-exact")
ok(s3.head_object(Bucket="boto", Key="big")["ETag"].endswith('-4"'), "multipart ETag -4")

# Abort leaves nothing.
mpu = s3.create_multipart_upload(Bucket="boto", Key="aborted")
s3.upload_part(Bucket="boto", Key="aborted", UploadId=mpu["UploadId"], PartNumber=1, Body=b"x" * 1000)
ok(len(s3.list_parts(Bucket="boto", Key="aborted", UploadId=mpu["UploadId"])["Parts"]) == 1, "list_parts")
ok(len(s3.list_multipart_uploads(Bucket="boto").get("Uploads", [])) == 1, "list_multipart_uploads")
s3.abort_multipart_upload(Bucket="boto", Key="aborted", UploadId=mpu["UploadId"])
ok(len(s3.list_multipart_uploads(Bucket="boto").get("Uploads", [])) == 0, "abort removes the upload")
ok("Contents" not in s3.list_objects_v2(Bucket="boto", Prefix="aborted"), "aborted upload left no object")

# Listing: 25 keys in 3 "directories", pages of 4, with a delimiter.
for i in range(25):
    s3.put_object(Bucket="boto", Key="list/d%d/k%02d" % (i % 3, i), Body=b"v")
    s3.put_object(Bucket="boto", Key="list/top%02d" % i, Body=b"v")
keys, prefixes = [], []
for page in s3.get_paginator("list_objects_v2").paginate(Bucket="boto", Prefix="list/", Delimiter="/",
                                                          PaginationConfig={"PageSize": 4}):
    keys += [c["Key"] for c in page.get("Contents", [])]
    prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
ok(prefixes == ["list/d0/", "list/d1/", "list/d2/"], "v2 pagination: common prefixes once each")
ok(keys == ["list/top%02d" % i for i in range(25)], "v2 pagination: every key once, in order")
keys = []
for page in s3.get_paginator("list_objects").paginate(Bucket="boto", Prefix="list/d1/", PaginationConfig={"PageSize": 3}):
    keys += [c["Key"] for c in page.get("Contents", [])]
ok(keys == sorted("list/d1/k%02d" % i for i in range(25) if i % 3 == 1), "v1 pagination with marker")
versions = s3.list_object_versions(Bucket="boto", Prefix="list/top0")
ok(len(versions["Versions"]) == 10 and versions["Versions"][0]["VersionId"] == "null", "list_object_versions flat")

# Copy (COPY and REPLACE), delete_objects.
s3.copy_object(Bucket="boto", Key="copy", CopySource={"Bucket": "boto", "Key": "a/b c+d.bin"})
ok(s3.get_object(Bucket="boto", Key="copy")["Metadata"] == {"x": "1"}, "copy_object keeps metadata (COPY)")
s3.copy_object(Bucket="boto", Key="copy2", CopySource="boto/a/b c+d.bin", MetadataDirective="REPLACE", Metadata={"y": "2"})
c2 = s3.get_object(Bucket="boto", Key="copy2")
ok(c2["Metadata"] == {"y": "2"} and c2["Body"].read() == data, "copy_object REPLACE metadata, same bytes")
res = s3.delete_objects(Bucket="boto", Delete={"Objects": [{"Key": "copy"}, {"Key": "copy2"}, {"Key": "missing"}]})
ok(len(res["Deleted"]) == 3, "delete_objects")

# Presigned GET and PUT.
put_url = s3.generate_presigned_url("put_object", Params={"Bucket": "boto", "Key": "pre"}, ExpiresIn=300)
urllib.request.urlopen(urllib.request.Request(put_url, data=b"presigned body", method="PUT")).read()
get_url = s3.generate_presigned_url("get_object", Params={"Bucket": "boto", "Key": "pre"}, ExpiresIn=300)
ok(urllib.request.urlopen(get_url).read() == b"presigned body", "presigned PUT then GET")
ok(s3.get_bucket_location(Bucket="boto")["LocationConstraint"] in (None, "", "us-east-1"), "get_bucket_location")
s3.head_bucket(Bucket="boto")
ok(any(b["Name"] == "boto" for b in s3.list_buckets()["Buckets"]), "list_buckets")
