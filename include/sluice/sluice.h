// SPDX-License-Identifier: Apache-2.0
/* sluice.h: the C API of sluice (libsluice_c.so), for programs and languages that cannot use the
 * C++ headers: C, Go through cgo, Python through its bindings, anything with a C FFI.
 *
 * Pure C (C99 and later, and C++): opaque handles, plain structs, int status codes. No C++ type
 * or exception crosses it. docs/embedding.md describes the rules; in short:
 *
 * Errors. Every function that can fail returns an int: SLUICE_OK (0) or one of the
 * SLUICE_ERR_* codes below. Each takes a last argument `sluice_error* error` that may be NULL;
 * when it is not, it is filled in on failure (code, the S3 error code and HTTP status when the
 * server answered, a message) and cleared (code SLUICE_OK, empty strings) on success. Null
 * pointers, zero lengths where a length is needed and strings that are not valid arguments give
 * SLUICE_ERR_INVALID_ARGUMENT, never a crash.
 *
 * Ownership. A handle made by a *_create / *_start function belongs to the caller, who releases
 * it exactly once with the matching *_destroy / *_stop. Strings passed in are copied before the
 * call returns; buffers passed in are used only during the call (every call blocks until its
 * transfer ends). Strings handed out live in caller-owned structs (fixed-size, NUL-terminated,
 * truncated when longer) or are valid only during a callback.
 *
 * Threads. A client may be used from several threads at once; its calls block the calling
 * thread and run the transfer on the client's own threads. Do not destroy a client while another
 * thread is inside a call on it. A server handle is used by one thread at a time.
 */
#ifndef SLUICE_SLUICE_H
#define SLUICE_SLUICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* NOLINTBEGIN(modernize-use-using): C has no `using`; this header is C first. */

#if defined(__GNUC__)
#define SLUICE_C_API __attribute__((visibility("default")))
#else
#define SLUICE_C_API
#endif

/* ---- Status codes ---------------------------------------------------------------------------- */

#define SLUICE_OK 0
#define SLUICE_ERR_INVALID_ARGUMENT 1 /* a null pointer, a zero length, an invalid option */
#define SLUICE_ERR_S3 2               /* the server answered with an S3 error: see s3_code, http_status */
#define SLUICE_ERR_BUFFER_TOO_SMALL 3 /* the destination cannot hold the object (nothing past its end written) */
#define SLUICE_ERR_NO_CUDA 4          /* a device-memory call on a library built without CUDA */
#define SLUICE_ERR_CONNECTION 5       /* connect, TLS, timeout or a broken answer: the request did not complete */
#define SLUICE_ERR_UNSUPPORTED 6      /* a plane or memory kind this build or host cannot use */
#define SLUICE_ERR_CUDA 7             /* a CUDA runtime error (no GPU, not device memory, ...) */
#define SLUICE_ERR_SERVER_START 8     /* the embedded server could not open its store or listen */
#define SLUICE_ERR_INTERNAL 9         /* anything else (out of memory, a bug): see the message */
#define SLUICE_ERR_CANCELLED 10       /* the call's sluice_cancel was triggered before it completed */
#define SLUICE_ERR_TIMEOUT 11         /* a request ran past the client's timeout_seconds */
#define SLUICE_ERR_RANGE 12           /* the byte range asked for lies outside the object (nothing read) */
#define SLUICE_ERR_TLS 13             /* https: the certificate was refused (wrong CA or host) or TLS failed */

/* ---- Errors ---------------------------------------------------------------------------------- */

/* What went wrong; filled in by every call that takes one (may be NULL there). */
typedef struct sluice_error {
  int code;          /* SLUICE_OK or a SLUICE_ERR_* code, the same as the call returned */
  int http_status;   /* the HTTP status of the server's answer (404, 403, ...), 0 when none */
  char s3_code[64];  /* the S3 error code ("NoSuchKey", "AccessDenied"), empty when not from S3 */
  char message[512]; /* a human-readable description, NUL-terminated; empty on success */
} sluice_error;

/* The name of a status code ("SLUICE_ERR_S3"); "SLUICE_ERR_UNKNOWN" for values outside the list.
 * The string is static. */
SLUICE_C_API const char* sluice_status_name(int code);

/* The library's version, "MAJOR.MINOR.PATCH" (static string). */
SLUICE_C_API const char* sluice_version(void);

/* 1 when this library was built with the CUDA tier (device-memory calls work on a GPU host),
 * 0 when those calls return SLUICE_ERR_NO_CUDA. */
SLUICE_C_API int sluice_built_with_cuda(void);

/* ---- Client ---------------------------------------------------------------------------------- */

/* Which data plane carries the bytes. */
#define SLUICE_PLANE_AUTO 0 /* RDMA (libfabric "auto") when it opens here and the server accepts, else HTTP */
#define SLUICE_PLANE_HTTP 1 /* HTTP bodies only */

/* How to build a client. Zero-initialize it ({0} or memset) and fill in what you need: every
 * zero or NULL member takes its default. */
typedef struct sluice_client_options {
  const char* endpoint;     /* required: "http://host[:port]" or "https://host[:port]" */
  const char* access_key;   /* the key pair that signs requests; both NULL/empty: anonymous */
  const char* secret_key;   /*   (only one of the two is SLUICE_ERR_INVALID_ARGUMENT) */
  const char* region;       /* the region requests are signed for; NULL/empty: "us-east-1" */
  const char* ca_bundle;    /* https: a PEM file of CAs to trust; NULL: the system's store */
  const char* grant_socket; /* a sluice server's same-host grant socket (sluice serve --grant-socket);
                               NULL: none. With CUDA, GETs into and PUTs from device memory then go
                               by CUDA IPC straight between the server and the GPU. */
  uint64_t part_size;       /* bytes per part of a multipart transfer, 5 MiB..5 GiB; 0: 8 MiB */
  uint32_t parts_in_flight; /* parts of one transfer moving at once; 0: 4 */
  int plane;                /* SLUICE_PLANE_AUTO (0) or SLUICE_PLANE_HTTP */
  uint32_t timeout_seconds; /* deadline of one attempt of a request (connect, send, receive); past it
                               the call fails with SLUICE_ERR_TIMEOUT. 0: 300 s */
} sluice_client_options;

/* A connection pool and its threads, for one endpoint and one key pair. Opaque. */
typedef struct sluice_client sluice_client;

/* Builds a client into *out (NULL on failure). Connects to nothing until the first request.
 * Errors: SLUICE_ERR_INVALID_ARGUMENT (options or out NULL, endpoint missing or malformed, a bad
 * part size, a ca_bundle that cannot be read), SLUICE_ERR_CONNECTION (the grant socket cannot
 * be opened). With SLUICE_PLANE_AUTO a fabric that does not open is not an error: HTTP is used. */
SLUICE_C_API int sluice_client_create(const sluice_client_options* options, sluice_client** out, sluice_error* error);

/* Cancels nothing (no call is in flight when it is legal to call this), closes the connections,
 * joins the client's threads and frees it. NULL is ignored. */
SLUICE_C_API void sluice_client_destroy(sluice_client* client);

/* Transfer path names, in sluice_transfer_report::path. */
#define SLUICE_PATH_NONE 0   /* nothing moved (an empty object) */
#define SLUICE_PATH_HTTP 1   /* every byte in HTTP bodies */
#define SLUICE_PATH_RDMA 2   /* every byte by RDMA or a same-host grant */
#define SLUICE_PATH_MIXED 3  /* some parts each way (the server declined some tokens) */
#define SLUICE_PATH_STAGED 4 /* device memory through pinned host staging (RDMA or HTTP per part) */
#define SLUICE_PATH_DIRECT 5 /* device memory moved straight by the server (CUDA IPC grant or FI_HMEM) */

/* What carried one transfer's bytes. */
typedef struct sluice_transfer_report {
  uint64_t bytes;         /* object bytes moved (GET: written into the buffer; PUT: uploaded) */
  uint64_t rdma_bytes;    /* of them, by RDMA or a same-host grant */
  uint64_t http_bytes;    /* of them, in HTTP bodies */
  uint32_t rdma_requests; /* requests answered over RDMA (0 for device transfers) */
  uint32_t http_requests; /* requests whose bytes went in the body (0 for device transfers) */
  uint32_t declined;      /* requests whose token the server declined (0 for device transfers) */
  int path;               /* SLUICE_PATH_* */
  char path_name[16];     /* "none", "http", "rdma", "mixed", "staged", "direct" */
  char etag[128];         /* PUT: the object's ETag without quotes; GET: empty */
} sluice_transfer_report;

/* GETs the whole object bucket/key into `buffer` (host memory, `capacity` bytes) and stores its
 * size in *bytes (may be NULL). `report` (may be NULL) is filled in on success.
 * Errors: SLUICE_ERR_INVALID_ARGUMENT (a NULL client, bucket, key or buffer with capacity > 0),
 * SLUICE_ERR_S3 ("NoSuchKey", "NoSuchBucket", "AccessDenied", ...), SLUICE_ERR_BUFFER_TOO_SMALL
 * (the object is larger than capacity), SLUICE_ERR_CONNECTION. The buffer's bytes are
 * unspecified after an error. A capacity of 0 reads only an empty object. */
SLUICE_C_API int sluice_get_object(sluice_client* client, const char* bucket, const char* key, void* buffer,
                                   size_t capacity, uint64_t* bytes, sluice_transfer_report* report,
                                   sluice_error* error);

/* ---- Cancellation ---------------------------------------------------------------------------- */

/* A cancel handle: triggered once, from any thread, it aborts every call it was given to (in
 * sluice_get_options / sluice_put_options) that is in flight, and makes every later call given it
 * fail at once; those calls return SLUICE_ERR_CANCELLED (unless they had already completed). A
 * PUT it interrupts is aborted on the server, best effort (an object already published stays).
 * Other calls on the same client go on. Opaque; thread-safe. */
typedef struct sluice_cancel sluice_cancel;

/* Makes an untriggered handle into *out (NULL on failure). Errors: SLUICE_ERR_INVALID_ARGUMENT
 * (out NULL), SLUICE_ERR_INTERNAL (out of memory). */
SLUICE_C_API int sluice_cancel_create(sluice_cancel** out, sluice_error* error);

/* Triggers the handle: returns at once (the calls it aborts return soon after, on their own
 * threads). Any thread, any number of times; NULL is ignored. */
SLUICE_C_API void sluice_cancel_trigger(sluice_cancel* cancel);

/* 1 when the handle was triggered, else 0 (and 0 for NULL). */
SLUICE_C_API int sluice_cancel_triggered(const sluice_cancel* cancel);

/* Frees the handle; no call given it may still be in flight. NULL is ignored. */
SLUICE_C_API void sluice_cancel_destroy(sluice_cancel* cancel);

/* How sluice_get_object_ex reads. Zero-initialize it: all zero reads the whole object. */
typedef struct sluice_get_options {
  uint64_t offset;       /* the first byte to read */
  uint64_t length;       /* bytes to read from offset; 0: to the end of the object */
  sluice_cancel* cancel; /* NULL: only sluice_client_destroy's rules apply */
} sluice_get_options;

/* As sluice_get_object, for the bytes [offset, offset + length) of the object (to its end when
 * length is 0), written at the start of `buffer`; *bytes is the count read. `options` may be NULL
 * (the whole object). Errors as sluice_get_object, and SLUICE_ERR_RANGE (offset past the end of
 * the object, or offset + length past it: nothing is read, nothing shortened),
 * SLUICE_ERR_CANCELLED. Nothing is ever written past buffer + capacity. */
SLUICE_C_API int sluice_get_object_ex(sluice_client* client, const char* bucket, const char* key,
                                      const sluice_get_options* options, void* buffer, size_t capacity,
                                      uint64_t* bytes, sluice_transfer_report* report, sluice_error* error);

/* As sluice_get_object into device memory: `device_buffer` is a CUDA device pointer (cudaMalloc)
 * of `capacity` bytes on the current host's GPU; the device is found from the pointer. Staged
 * through at most 64 MiB of pinned memory, or direct with a grant socket on the server's host.
 * Errors as sluice_get_object, and SLUICE_ERR_NO_CUDA (built without CUDA), SLUICE_ERR_CUDA (no
 * GPU, or the pointer is not device memory). */
SLUICE_C_API int sluice_get_object_to_device(sluice_client* client, const char* bucket, const char* key,
                                             void* device_buffer, size_t capacity, uint64_t* bytes,
                                             sluice_transfer_report* report, sluice_error* error);

/* PUTs `length` bytes at `data` (host memory) as bucket/key, replacing any object there;
 * content_type may be NULL (application/octet-stream). Multipart above 16 MiB, aborted on
 * failure so nothing is left behind. `report` (may be NULL) gets the ETag. `data` may be NULL
 * only when length is 0 (an empty object). Errors: SLUICE_ERR_INVALID_ARGUMENT, SLUICE_ERR_S3
 * ("NoSuchBucket", "EntityTooLarge", ...), SLUICE_ERR_CONNECTION. */
SLUICE_C_API int sluice_put_object(sluice_client* client, const char* bucket, const char* key, const void* data,
                                   size_t length, const char* content_type, sluice_transfer_report* report,
                                   sluice_error* error);

/* How sluice_put_object_ex writes. Zero-initialize it. */
typedef struct sluice_put_options {
  const char* content_type; /* NULL: application/octet-stream */
  sluice_cancel* cancel;    /* NULL: none */
} sluice_put_options;

/* As sluice_put_object with `options` (may be NULL); errors as sluice_put_object, and
 * SLUICE_ERR_CANCELLED. */
SLUICE_C_API int sluice_put_object_ex(sluice_client* client, const char* bucket, const char* key, const void* data,
                                      size_t length, const sluice_put_options* options, sluice_transfer_report* report,
                                      sluice_error* error);

/* As sluice_put_object from device memory (a CUDA device pointer of `length` > 0 bytes).
 * Errors as sluice_put_object, and SLUICE_ERR_NO_CUDA, SLUICE_ERR_CUDA. */
SLUICE_C_API int sluice_put_object_from_device(sluice_client* client, const char* bucket, const char* key,
                                               const void* device_data, size_t length, sluice_transfer_report* report,
                                               sluice_error* error);

/* Copies the report of the last GET or PUT that succeeded on this client (from any thread) into
 * *report; all zero ("none") before the first. Errors: SLUICE_ERR_INVALID_ARGUMENT (NULL). */
SLUICE_C_API int sluice_client_last_report(const sluice_client* client, sluice_transfer_report* report,
                                           sluice_error* error);

/* An object's metadata (HEAD). */
typedef struct sluice_object_info {
  uint64_t size;          /* bytes */
  int64_t last_modified;  /* seconds since 1970-01-01 UTC */
  char etag[128];         /* without quotes */
  char content_type[256]; /* as the server reports it (sluice: "binary/octet-stream" when none was given) */
} sluice_object_info;

/* HEADs bucket/key into *info. Errors: SLUICE_ERR_INVALID_ARGUMENT, SLUICE_ERR_S3 ("NoSuchKey",
 * http_status 404), SLUICE_ERR_CONNECTION. */
SLUICE_C_API int sluice_head_object(sluice_client* client, const char* bucket, const char* key,
                                    sluice_object_info* info, sluice_error* error);

/* Called once per key of a listing, in key order. `key` and `etag` are valid only during the
 * call. Return 0 to go on, anything else to stop the listing (sluice_list_objects then returns
 * SLUICE_OK). */
typedef int (*sluice_list_callback)(void* context, const char* key, uint64_t size, const char* etag);

/* Lists every key of `bucket` that starts with `prefix` (NULL or "" for all), following the
 * pages, calling `callback(context, ...)` for each on the calling thread. Errors:
 * SLUICE_ERR_INVALID_ARGUMENT (NULL client, bucket or callback), SLUICE_ERR_S3 ("NoSuchBucket"),
 * SLUICE_ERR_CONNECTION. */
SLUICE_C_API int sluice_list_objects(sluice_client* client, const char* bucket, const char* prefix,
                                     sluice_list_callback callback, void* context, sluice_error* error);

/* Deletes bucket/key; a key that does not exist is not an error (as in S3). */
SLUICE_C_API int sluice_delete_object(sluice_client* client, const char* bucket, const char* key, sluice_error* error);

/* Creates `bucket`. Errors: SLUICE_ERR_S3 ("BucketAlreadyOwnedByYou" outside us-east-1,
 * "BucketAlreadyExists", "InvalidBucketName"), ... */
SLUICE_C_API int sluice_create_bucket(sluice_client* client, const char* bucket, sluice_error* error);

/* Deletes the empty `bucket`. Errors: SLUICE_ERR_S3 ("BucketNotEmpty", "NoSuchBucket"), ... */
SLUICE_C_API int sluice_delete_bucket(sluice_client* client, const char* bucket, sluice_error* error);

/* ---- Embedded server ------------------------------------------------------------------------- */

/* One S3 user of an embedded server: a key pair. */
typedef struct sluice_user {
  const char* access_key;
  const char* secret_key;
} sluice_user;

/* How to start an embedded server (sluice serve in-process, over a directory). Zero-initialize
 * it and fill in what you need. */
typedef struct sluice_server_options {
  const char* root;           /* required: the store's directory (made when missing) */
  const char* listen_address; /* NULL/empty: "127.0.0.1" */
  uint16_t port;              /* 0: an ephemeral port (read it with sluice_server_port) */
  const sluice_user* users;   /* user_count users; at least one unless allow_anonymous */
  size_t user_count;
  int allow_anonymous;      /* non-zero: unsigned requests act as the first user */
  const char* region;       /* when set, requests signed for another region fail */
  const char* grant_socket; /* a Unix socket path for same-host grants; NULL: none */
  int plane;                /* SLUICE_PLANE_AUTO: open every libfabric provider that works (none is
                               not an error); SLUICE_PLANE_HTTP: no RDMA */
} sluice_server_options;

/* A running server. Opaque. */
typedef struct sluice_server sluice_server;

/* Opens the store, binds, listens and starts serving on the server's own threads; *out is the
 * handle (NULL on failure). Errors: SLUICE_ERR_INVALID_ARGUMENT (options or out NULL, root
 * missing, no users without allow_anonymous, a user with a NULL or empty key),
 * SLUICE_ERR_SERVER_START (the store cannot be opened, the address is in use, the grant socket
 * cannot be made). */
SLUICE_C_API int sluice_server_start(const sluice_server_options* options, sluice_server** out, sluice_error* error);

/* The TCP port the server listens on (the real one when options.port was 0); 0 for NULL. */
SLUICE_C_API uint16_t sluice_server_port(const sluice_server* server);

/* Stops accepting, closes every connection, joins the server's threads and frees the handle.
 * NULL is ignored. */
SLUICE_C_API void sluice_server_stop(sluice_server* server);

/* NOLINTEND(modernize-use-using) */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SLUICE_SLUICE_H */
