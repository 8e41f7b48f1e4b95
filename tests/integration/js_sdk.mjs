// SPDX-License-Identifier: Apache-2.0
// @aws-sdk/client-s3 (v3) against sluice serve: usage node js_sdk.mjs URL AK SK
// The SDK streams bodies with Content-Encoding: aws-chunked and a trailing CRC32
// (STREAMING-UNSIGNED-PAYLOAD-TRAILER), sends ?x-id=..., and checksum-mode GETs.
import { S3Client, CreateBucketCommand, PutObjectCommand, GetObjectCommand, HeadObjectCommand,
         ListObjectsV2Command, DeleteObjectsCommand } from "@aws-sdk/client-s3";
import { Readable } from "node:stream";
import { createHash, randomBytes } from "node:crypto";

const [url, ak, sk] = process.argv.slice(2);
const s3 = new S3Client({ endpoint: url, forcePathStyle: true, region: "us-east-1",
                          credentials: { accessKeyId: ak, secretAccessKey: sk } });
const ok = (cond, what) => { if (!cond) throw new Error("FAILED: " + what); console.log("  ok: js-sdk:", what); };
const md5 = (b) => createHash("md5").update(b).digest("hex");
const body = async (r) => Buffer.concat(await r.Body.toArray());

await s3.send(new CreateBucketCommand({ Bucket: "js-bucket" }));
const small = randomBytes(1000);
await s3.send(new PutObjectCommand({ Bucket: "js-bucket", Key: "small", Body: small, Metadata: { a: "b" } }));
ok((await body(await s3.send(new GetObjectCommand({ Bucket: "js-bucket", Key: "small" })))).equals(small), "PutObject buffer");

// A stream body: sent aws-chunked with a trailing checksum.
const big = randomBytes(3 * 1024 * 1024 + 17);
const put = await s3.send(new PutObjectCommand({ Bucket: "js-bucket", Key: "streamed", ContentLength: big.length,
                                                 Body: Readable.from([big.subarray(0, 100000), big.subarray(100000)]) }));
ok(put.ETag === `"${md5(big)}"`, "streamed PutObject (aws-chunked) stores the decoded bytes, ETag is their MD5");
const got = await s3.send(new GetObjectCommand({ Bucket: "js-bucket", Key: "streamed", ChecksumMode: "ENABLED" }));
ok((await body(got)).equals(big), "GetObject of the streamed object is byte-exact");
const head = await s3.send(new HeadObjectCommand({ Bucket: "js-bucket", Key: "streamed" }));
ok(head.ContentLength === big.length && head.ContentEncoding === undefined, "no aws-chunked framing or encoding stored");
const list = await s3.send(new ListObjectsV2Command({ Bucket: "js-bucket" }));
ok(list.KeyCount === 2, "ListObjectsV2");
const del = await s3.send(new DeleteObjectsCommand({ Bucket: "js-bucket", Delete: { Objects: [{ Key: "small" }, { Key: "streamed" }] } }));
ok(del.Deleted.length === 2, "DeleteObjects (with a CRC32 checksum header)");
