// SPDX-License-Identifier: Apache-2.0
/* The C API (include/sluice/sluice.h), compiled as C11, against an embedded server started through
 * the C API itself (a real fs_store on a temporary directory, real HTTP on loopback). Every
 * function is called with good arguments and with the hostile ones (NULL, zero lengths, bad
 * options), and with error == NULL. Exit 0 when every check passes, 1 otherwise. */
#define _DEFAULT_SOURCE /* mkdtemp */
#include <sluice/sluice.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int failures = 0;
static int checks = 0;

#define CHECK(cond)                                                      \
  do {                                                                   \
    ++checks;                                                            \
    if (!(cond)) {                                                       \
      ++failures;                                                        \
      fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                    \
  } while (0)

/* The call returned `want`, and the error struct says the same. */
#define CHECK_STATUS(call, want)                                                                        \
  do {                                                                                                  \
    sluice_error e_;                                                                                    \
    memset(&e_, 0x5a, sizeof e_); /* garbage in: the call must overwrite it */                          \
    const int got_ = (call);                                                                            \
    ++checks;                                                                                           \
    if (got_ != (want) || e_.code != got_ || (got_ != SLUICE_OK && e_.message[0] == '\0') ||            \
        (got_ == SLUICE_OK && e_.message[0] != '\0')) {                                                 \
      ++failures;                                                                                       \
      fprintf(stderr, "%s:%d: FAILED: %s returned %s (%s), wanted %s\n", __FILE__, __LINE__, #call,     \
              sluice_status_name(got_), got_ != SLUICE_OK ? e_.message : "", sluice_status_name(want)); \
    }                                                                                                   \
  } while (0)
/* Inside CHECK_STATUS's call, `&e_` is the error struct. */
#define ERR (&e_)

/* The call failed with an S3 error of this code and HTTP status. */
static void check_s3(int status, const sluice_error* e, const char* code, int http, const char* what, int line) {
  ++checks;
  if (status != SLUICE_ERR_S3 || e->code != SLUICE_ERR_S3 || strcmp(e->s3_code, code) != 0 || e->http_status != http) {
    ++failures;
    fprintf(stderr, "capi_test.c:%d: FAILED: %s: %s %s %d (%s), wanted SLUICE_ERR_S3 %s %d\n", line, what,
            sluice_status_name(status), e->s3_code, e->http_status, e->message, code, http);
  }
}

static int count_keys(void* context, const char* key, uint64_t size, const char* etag) {
  (void)key;
  (void)size;
  CHECK(etag != NULL);
  ++*(int*)context;
  return 0;
}

static int stop_after_one(void* context, const char* key, uint64_t size, const char* etag) {
  (void)size;
  (void)etag;
  strncpy((char*)context, key, 63);
  return 1;
}

static void test_basics(void) {
  CHECK(strcmp(sluice_status_name(SLUICE_OK), "SLUICE_OK") == 0);
  CHECK(strcmp(sluice_status_name(SLUICE_ERR_INVALID_ARGUMENT), "SLUICE_ERR_INVALID_ARGUMENT") == 0);
  CHECK(strcmp(sluice_status_name(SLUICE_ERR_S3), "SLUICE_ERR_S3") == 0);
  CHECK(strcmp(sluice_status_name(SLUICE_ERR_BUFFER_TOO_SMALL), "SLUICE_ERR_BUFFER_TOO_SMALL") == 0);
  CHECK(strcmp(sluice_status_name(SLUICE_ERR_NO_CUDA), "SLUICE_ERR_NO_CUDA") == 0);
  CHECK(strcmp(sluice_status_name(SLUICE_ERR_CONNECTION), "SLUICE_ERR_CONNECTION") == 0);
  CHECK(strcmp(sluice_status_name(SLUICE_ERR_UNSUPPORTED), "SLUICE_ERR_UNSUPPORTED") == 0);
  CHECK(strcmp(sluice_status_name(SLUICE_ERR_CUDA), "SLUICE_ERR_CUDA") == 0);
  CHECK(strcmp(sluice_status_name(SLUICE_ERR_SERVER_START), "SLUICE_ERR_SERVER_START") == 0);
  CHECK(strcmp(sluice_status_name(SLUICE_ERR_INTERNAL), "SLUICE_ERR_INTERNAL") == 0);
  CHECK(strcmp(sluice_status_name(-1), "SLUICE_ERR_UNKNOWN") == 0);
  CHECK(strcmp(sluice_status_name(1000), "SLUICE_ERR_UNKNOWN") == 0);
  CHECK(sluice_version() != NULL && sluice_version()[0] >= '0' && sluice_version()[0] <= '9');
  CHECK(sluice_built_with_cuda() == 0 || sluice_built_with_cuda() == 1);
  printf("sluice %s, cuda %d\n", sluice_version(), sluice_built_with_cuda());
}

static void test_server_arguments(const char* root) {
  sluice_server* server = (sluice_server*)1;
  sluice_server_options o;
  memset(&o, 0, sizeof o);
  sluice_user users[1] = {{"AK", "SK"}};
  sluice_user bad_users[1] = {{"AK", NULL}};

  CHECK_STATUS(sluice_server_start(NULL, &server, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK(server == NULL);
  CHECK_STATUS(sluice_server_start(&o, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_server_start(&o, &server, ERR), SLUICE_ERR_INVALID_ARGUMENT); /* no root */
  o.root = "";
  CHECK_STATUS(sluice_server_start(&o, &server, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  o.root = root;
  CHECK_STATUS(sluice_server_start(&o, &server, ERR), SLUICE_ERR_INVALID_ARGUMENT); /* no users */
  o.user_count = 1;
  CHECK_STATUS(sluice_server_start(&o, &server, ERR), SLUICE_ERR_INVALID_ARGUMENT); /* users NULL */
  o.users = bad_users;
  CHECK_STATUS(sluice_server_start(&o, &server, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  o.users = users;
  o.plane = 7;
  CHECK_STATUS(sluice_server_start(&o, &server, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  o.plane = SLUICE_PLANE_HTTP;
  o.listen_address = "not an address";
  CHECK_STATUS(sluice_server_start(&o, &server, ERR), SLUICE_ERR_SERVER_START);
  CHECK(server == NULL);
  o.listen_address = NULL;
  o.root = "/proc/sluice-cannot-make-this";
  CHECK_STATUS(sluice_server_start(&o, &server, ERR), SLUICE_ERR_SERVER_START);
  CHECK(sluice_server_start(NULL, NULL, NULL) == SLUICE_ERR_INVALID_ARGUMENT); /* error may be NULL */
  CHECK(sluice_server_port(NULL) == 0);
  sluice_server_stop(NULL); /* ignored */
}

static void test_client_arguments(uint16_t port, const char* root) {
  char endpoint[64];
  snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%u", (unsigned)port);
  sluice_client* client = (sluice_client*)1;
  sluice_client_options o;
  memset(&o, 0, sizeof o);
  CHECK_STATUS(sluice_client_create(NULL, &client, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK(client == NULL);
  CHECK_STATUS(sluice_client_create(&o, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_client_create(&o, &client, ERR), SLUICE_ERR_INVALID_ARGUMENT); /* no endpoint */
  o.endpoint = "ftp://127.0.0.1";
  CHECK_STATUS(sluice_client_create(&o, &client, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  o.endpoint = endpoint;
  o.access_key = "AK"; /* without its secret */
  CHECK_STATUS(sluice_client_create(&o, &client, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  o.secret_key = "SK";
  o.part_size = 1024; /* below S3's 5 MiB */
  CHECK_STATUS(sluice_client_create(&o, &client, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  o.part_size = 0;
  o.plane = -1;
  CHECK_STATUS(sluice_client_create(&o, &client, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  o.plane = SLUICE_PLANE_HTTP;
  char missing[512];
  snprintf(missing, sizeof missing, "%s/no-such.sock", root);
  o.grant_socket = missing;
  CHECK_STATUS(sluice_client_create(&o, &client, ERR), SLUICE_ERR_CONNECTION);
  CHECK(client == NULL);
  o.grant_socket = NULL;
  o.ca_bundle = "/no/such/ca.pem"; /* a CA bundle with an http:// endpoint */
  CHECK_STATUS(sluice_client_create(&o, &client, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK(sluice_client_create(NULL, NULL, NULL) == SLUICE_ERR_INVALID_ARGUMENT);
  sluice_client_destroy(NULL); /* ignored */
}

/* Every object call with NULL and empty arguments. */
static void test_object_arguments(sluice_client* c) {
  char buffer[16];
  uint64_t bytes = 0;
  sluice_transfer_report report;
  sluice_object_info info;
  int n = 0;
  CHECK_STATUS(sluice_get_object(NULL, "b", "k", buffer, sizeof buffer, &bytes, NULL, ERR),
               SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_get_object(c, NULL, "k", buffer, sizeof buffer, &bytes, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_get_object(c, "", "k", buffer, sizeof buffer, &bytes, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_get_object(c, "b", NULL, buffer, sizeof buffer, &bytes, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_get_object(c, "b", "", buffer, sizeof buffer, &bytes, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_get_object(c, "b", "k", NULL, 16, &bytes, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_get_object_to_device(NULL, "b", "k", buffer, 16, &bytes, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_get_object_to_device(c, NULL, "k", buffer, 16, &bytes, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_get_object_to_device(c, "b", "k", NULL, 16, &bytes, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_get_object_to_device(c, "b", "k", buffer, 0, &bytes, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_put_object(NULL, "b", "k", buffer, 16, NULL, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_put_object(c, NULL, "k", buffer, 16, NULL, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_put_object(c, "b", NULL, buffer, 16, NULL, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_put_object(c, "b", "k", NULL, 16, NULL, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_put_object_from_device(NULL, "b", "k", buffer, 16, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_put_object_from_device(c, "b", "", buffer, 16, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_put_object_from_device(c, "b", "k", NULL, 16, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_put_object_from_device(c, "b", "k", buffer, 0, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_client_last_report(NULL, &report, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_client_last_report(c, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_head_object(NULL, "b", "k", &info, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_head_object(c, "b", NULL, &info, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_head_object(c, "b", "k", NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_list_objects(NULL, "b", "", count_keys, &n, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_list_objects(c, NULL, "", count_keys, &n, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_list_objects(c, "b", "", NULL, &n, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_delete_object(NULL, "b", "k", ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_delete_object(c, "", "k", ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_delete_object(c, "b", NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_create_bucket(NULL, "b", ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_create_bucket(c, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_create_bucket(c, "", ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_delete_bucket(NULL, "b", ERR), SLUICE_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(sluice_delete_bucket(c, NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  /* error == NULL is allowed everywhere */
  CHECK(sluice_get_object(NULL, NULL, NULL, NULL, 1, NULL, NULL, NULL) == SLUICE_ERR_INVALID_ARGUMENT);
  CHECK(sluice_put_object(NULL, NULL, NULL, NULL, 1, NULL, NULL, NULL) == SLUICE_ERR_INVALID_ARGUMENT);
  CHECK(sluice_head_object(NULL, NULL, NULL, NULL, NULL) == SLUICE_ERR_INVALID_ARGUMENT);
  CHECK(sluice_list_objects(NULL, NULL, NULL, NULL, NULL, NULL) == SLUICE_ERR_INVALID_ARGUMENT);
  CHECK(sluice_delete_object(NULL, NULL, NULL, NULL) == SLUICE_ERR_INVALID_ARGUMENT);
  CHECK(sluice_create_bucket(NULL, NULL, NULL) == SLUICE_ERR_INVALID_ARGUMENT);
  CHECK(sluice_delete_bucket(NULL, NULL, NULL) == SLUICE_ERR_INVALID_ARGUMENT);
  CHECK(sluice_client_last_report(NULL, NULL, NULL) == SLUICE_ERR_INVALID_ARGUMENT);
  CHECK(sluice_get_object_to_device(NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL) == SLUICE_ERR_INVALID_ARGUMENT);
  CHECK(sluice_put_object_from_device(NULL, NULL, NULL, NULL, 0, NULL, NULL) == SLUICE_ERR_INVALID_ARGUMENT);
}

/* PUT, GET, HEAD, LIST, DELETE and the reports, through `c` (plane `name`). */
static void test_round_trip(sluice_client* c, const char* name) {
  printf("round trip (%s)\n", name);
  const size_t size = (size_t)20 << 20; /* above the multipart threshold: parts in parallel */
  unsigned char* data = malloc(size);
  unsigned char* back = malloc(size + 1);
  CHECK(data != NULL && back != NULL);
  if (data == NULL || back == NULL) return;
  uint32_t x = 12345;
  for (size_t i = 0; i < size; ++i) {
    x = x * 1103515245u + 12345u;
    data[i] = (unsigned char)(x >> 16);
  }
  sluice_error e;
  sluice_transfer_report put_report;
  memset(&put_report, 0, sizeof put_report);
  CHECK_STATUS(sluice_create_bucket(c, "capi", ERR), SLUICE_OK);
  CHECK_STATUS(sluice_put_object(c, "capi", "segment-1", data, size, "application/x-segment", &put_report, ERR),
               SLUICE_OK);
  CHECK(put_report.bytes == size);
  CHECK(put_report.rdma_bytes + put_report.http_bytes == size);
  CHECK(put_report.etag[0] != '\0');
  char segment_etag[128];
  memcpy(segment_etag, put_report.etag, sizeof segment_etag);
  CHECK(put_report.path == SLUICE_PATH_HTTP || put_report.path == SLUICE_PATH_RDMA ||
        put_report.path == SLUICE_PATH_MIXED);
  printf("  PUT %zu bytes: path %s (rdma %llu, http %llu), etag %s\n", size, put_report.path_name,
         (unsigned long long)put_report.rdma_bytes, (unsigned long long)put_report.http_bytes, put_report.etag);

  sluice_transfer_report last;
  CHECK_STATUS(sluice_client_last_report(c, &last, ERR), SLUICE_OK);
  CHECK(memcmp(&last, &put_report, sizeof last) == 0);

  uint64_t bytes = 0;
  sluice_transfer_report get_report;
  memset(back, 0, size + 1);
  CHECK_STATUS(sluice_get_object(c, "capi", "segment-1", back, size + 1, &bytes, &get_report, ERR), SLUICE_OK);
  CHECK(bytes == size);
  CHECK(memcmp(back, data, size) == 0);
  CHECK(get_report.bytes == size && get_report.etag[0] == '\0');
  CHECK(strcmp(get_report.path_name, "http") == 0 || strcmp(get_report.path_name, "rdma") == 0 ||
        strcmp(get_report.path_name, "mixed") == 0);
  printf("  GET %llu bytes: path %s\n", (unsigned long long)bytes, get_report.path_name);
  CHECK_STATUS(sluice_client_last_report(c, &last, ERR), SLUICE_OK);
  CHECK(last.bytes == size && strcmp(last.path_name, get_report.path_name) == 0);

  /* too small a buffer, a missing key, a missing bucket */
  int status = sluice_get_object(c, "capi", "segment-1", back, size - 1, &bytes, NULL, &e);
  CHECK(status == SLUICE_ERR_BUFFER_TOO_SMALL && e.code == status);
  status = sluice_get_object(c, "capi", "no-such-key", back, size, &bytes, NULL, &e);
  check_s3(status, &e, "NoSuchKey", 404, "GET missing key", __LINE__);
  CHECK(strstr(e.message, "no-such-key") != NULL);
  status = sluice_get_object(c, "no-such-bucket", "k", back, size, &bytes, NULL, &e);
  check_s3(status, &e, "NoSuchBucket", 404, "GET missing bucket", __LINE__);
  status = sluice_put_object(c, "no-such-bucket", "k", data, 10, NULL, NULL, &e);
  check_s3(status, &e, "NoSuchBucket", 404, "PUT missing bucket", __LINE__);
  CHECK(sluice_get_object(c, "capi", "no-such-key", back, size, &bytes, NULL, NULL) == SLUICE_ERR_S3);

  /* an empty object: NULL data with length 0, read with capacity 0 */
  CHECK_STATUS(sluice_put_object(c, "capi", "empty", NULL, 0, NULL, &put_report, ERR), SLUICE_OK);
  CHECK(put_report.bytes == 0 && put_report.path == SLUICE_PATH_NONE);
  bytes = 99;
  CHECK_STATUS(sluice_get_object(c, "capi", "empty", NULL, 0, &bytes, NULL, ERR), SLUICE_OK);
  CHECK(bytes == 0);

  /* HEAD */
  sluice_object_info info;
  CHECK_STATUS(sluice_head_object(c, "capi", "segment-1", &info, ERR), SLUICE_OK);
  CHECK(info.size == size);
  CHECK(strcmp(info.etag, segment_etag) == 0);
  CHECK(strcmp(info.content_type, "application/x-segment") == 0);
  CHECK(info.last_modified > 1600000000);
  CHECK_STATUS(sluice_head_object(c, "capi", "empty", &info, ERR), SLUICE_OK);
  CHECK(info.size == 0);
  printf("  HEAD empty: content type %s\n", info.content_type);
  status = sluice_head_object(c, "capi", "no-such-key", &info, &e);
  check_s3(status, &e, "NoSuchKey", 404, "HEAD missing key", __LINE__);

  /* LIST: all, by prefix, stopped early, a missing bucket */
  CHECK_STATUS(sluice_put_object(c, "capi", "dir/a", "a", 1, NULL, NULL, ERR), SLUICE_OK);
  CHECK_STATUS(sluice_put_object(c, "capi", "dir/b", "bb", 2, NULL, NULL, ERR), SLUICE_OK);
  int n = 0;
  CHECK_STATUS(sluice_list_objects(c, "capi", NULL, count_keys, &n, ERR), SLUICE_OK);
  CHECK(n == 4);
  n = 0;
  CHECK_STATUS(sluice_list_objects(c, "capi", "dir/", count_keys, &n, ERR), SLUICE_OK);
  CHECK(n == 2);
  char first[64] = {0};
  CHECK_STATUS(sluice_list_objects(c, "capi", "", stop_after_one, first, ERR), SLUICE_OK);
  CHECK(strcmp(first, "dir/a") == 0);
  status = sluice_list_objects(c, "no-such-bucket", "", count_keys, &n, &e);
  check_s3(status, &e, "NoSuchBucket", 404, "LIST missing bucket", __LINE__);

  /* DELETE, DELETE BUCKET */
  status = sluice_delete_bucket(c, "capi", &e);
  check_s3(status, &e, "BucketNotEmpty", 409, "DELETE BUCKET not empty", __LINE__);
  const char* keys[] = {"segment-1", "empty", "dir/a", "dir/b"};
  for (size_t i = 0; i < 4; ++i) CHECK_STATUS(sluice_delete_object(c, "capi", keys[i], ERR), SLUICE_OK);
  CHECK_STATUS(sluice_delete_object(c, "capi", "never-was", ERR), SLUICE_OK);
  n = 0;
  CHECK_STATUS(sluice_list_objects(c, "capi", "", count_keys, &n, ERR), SLUICE_OK);
  CHECK(n == 0);
  CHECK_STATUS(sluice_delete_bucket(c, "capi", ERR), SLUICE_OK);
  status = sluice_delete_bucket(c, "capi", &e);
  check_s3(status, &e, "NoSuchBucket", 404, "DELETE BUCKET missing", __LINE__);
  status = sluice_create_bucket(c, "Not_A_Bucket", &e);
  check_s3(status, &e, "InvalidBucketName", 400, "CREATE BUCKET invalid name", __LINE__);

  free(data);
  free(back);
}

/* Device memory: without CUDA, SLUICE_ERR_NO_CUDA; with it, a host pointer is refused. */
static void test_device_refusals(sluice_client* c) {
  char host[64] = {0};
  uint64_t bytes = 0;
  const int want = sluice_built_with_cuda() ? SLUICE_ERR_CUDA : SLUICE_ERR_NO_CUDA;
  CHECK_STATUS(sluice_get_object_to_device(c, "b", "k", host, sizeof host, &bytes, NULL, ERR), want);
  CHECK_STATUS(sluice_put_object_from_device(c, "b", "k", host, sizeof host, NULL, ERR), want);
}

static void* trigger_soon(void* cancel) {
  usleep(2000);
  sluice_cancel_trigger((sluice_cancel*)cancel);
  return NULL;
}

/* sluice_get_object_ex's ranges, the errors of a range outside the object, nothing written past
 * the buffer, sluice_put_object_ex, and cancel handles. */
static void test_ranges_and_cancel(sluice_client* c) {
  CHECK_STATUS(sluice_create_bucket(c, "ranges", ERR), SLUICE_OK);
  unsigned char data[1000];
  for (size_t i = 0; i < sizeof data; ++i) data[i] = (unsigned char)(i * 7 + 3);
  sluice_put_options po;
  memset(&po, 0, sizeof po);
  po.content_type = "application/x-test";
  CHECK_STATUS(sluice_put_object_ex(c, "ranges", "obj", data, sizeof data, &po, NULL, ERR), SLUICE_OK);
  CHECK_STATUS(sluice_put_object_ex(c, "ranges", "obj", data, sizeof data, NULL, NULL, ERR), SLUICE_OK);

  unsigned char buffer[300 + 16];
  memset(buffer, 0xee, sizeof buffer);
  sluice_get_options go;
  memset(&go, 0, sizeof go);
  go.offset = 100;
  go.length = 300;
  uint64_t bytes = 0;
  CHECK_STATUS(sluice_get_object_ex(c, "ranges", "obj", &go, buffer, 300, &bytes, NULL, ERR), SLUICE_OK);
  CHECK(bytes == 300 && memcmp(buffer, data + 100, 300) == 0);
  CHECK(buffer[300] == 0xee && buffer[315] == 0xee); /* nothing past capacity */
  go.offset = 900;
  go.length = 0; /* to the end */
  CHECK_STATUS(sluice_get_object_ex(c, "ranges", "obj", &go, buffer, 300, &bytes, NULL, ERR), SLUICE_OK);
  CHECK(bytes == 100 && memcmp(buffer, data + 900, 100) == 0);
  CHECK_STATUS(sluice_get_object_ex(c, "ranges", "obj", NULL, buffer, 300, &bytes, NULL, ERR),
               SLUICE_ERR_BUFFER_TOO_SMALL); /* the whole object into 300 bytes */
  CHECK(buffer[300] == 0xee && buffer[315] == 0xee);
  go.offset = 1001; /* past the end */
  CHECK_STATUS(sluice_get_object_ex(c, "ranges", "obj", &go, buffer, 300, &bytes, NULL, ERR), SLUICE_ERR_RANGE);
  go.offset = 900;
  go.length = 101; /* a length past the end */
  CHECK_STATUS(sluice_get_object_ex(c, "ranges", "obj", &go, buffer, 300, &bytes, NULL, ERR), SLUICE_ERR_RANGE);
  go.offset = 0;
  go.length = 301; /* more than the buffer holds */
  CHECK_STATUS(sluice_get_object_ex(c, "ranges", "obj", &go, buffer, 300, &bytes, NULL, ERR),
               SLUICE_ERR_BUFFER_TOO_SMALL);
  CHECK(buffer[300] == 0xee && buffer[315] == 0xee);
  CHECK_STATUS(sluice_get_object_ex(NULL, "ranges", "obj", &go, buffer, 300, &bytes, NULL, ERR),
               SLUICE_ERR_INVALID_ARGUMENT);

  /* cancel handles */
  CHECK_STATUS(sluice_cancel_create(NULL, ERR), SLUICE_ERR_INVALID_ARGUMENT);
  sluice_cancel_trigger(NULL);
  sluice_cancel_destroy(NULL);
  CHECK(sluice_cancel_triggered(NULL) == 0);
  sluice_cancel* cancel = NULL;
  CHECK_STATUS(sluice_cancel_create(&cancel, ERR), SLUICE_OK);
  CHECK(cancel != NULL && sluice_cancel_triggered(cancel) == 0);
  go.offset = 0;
  go.length = 300;
  go.cancel = cancel;
  CHECK_STATUS(sluice_get_object_ex(c, "ranges", "obj", &go, buffer, sizeof buffer, &bytes, NULL, ERR), SLUICE_OK);
  sluice_cancel_trigger(cancel);
  sluice_cancel_trigger(cancel); /* twice is fine */
  CHECK(sluice_cancel_triggered(cancel) == 1);
  CHECK_STATUS(sluice_get_object_ex(c, "ranges", "obj", &go, buffer, sizeof buffer, &bytes, NULL, ERR),
               SLUICE_ERR_CANCELLED); /* triggered before: fails at once */
  po.cancel = cancel;
  CHECK_STATUS(sluice_put_object_ex(c, "ranges", "obj2", data, sizeof data, &po, NULL, ERR), SLUICE_ERR_CANCELLED);
  sluice_cancel_destroy(cancel);

  /* a trigger from another thread during a 64 MiB GET: cancelled, or done first; the client goes on */
  const size_t big = (size_t)64 << 20;
  unsigned char* large = malloc(big);
  CHECK(large != NULL);
  if (large == NULL) return;
  memset(large, 0x42, big);
  CHECK_STATUS(sluice_put_object(c, "ranges", "large", large, big, NULL, NULL, ERR), SLUICE_OK);
  CHECK_STATUS(sluice_cancel_create(&cancel, ERR), SLUICE_OK);
  go.length = 0;
  go.cancel = cancel;
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, trigger_soon, cancel) == 0);
  sluice_error e;
  const int status = sluice_get_object_ex(c, "ranges", "large", &go, large, big, &bytes, NULL, &e);
  pthread_join(thread, NULL);
  CHECK(status == SLUICE_OK || (status == SLUICE_ERR_CANCELLED && e.code == status));
  printf("GET of 64 MiB with a trigger after 2 ms: %s\n", sluice_status_name(status));
  sluice_cancel_destroy(cancel);
  go.cancel = NULL;
  CHECK_STATUS(sluice_get_object_ex(c, "ranges", "large", &go, large, big, &bytes, NULL, ERR), SLUICE_OK);
  CHECK(bytes == big && large[0] == 0x42 && large[big - 1] == 0x42);
  free(large);
}

/* timeout_seconds: a server that accepts the connection and never answers. */
static void test_timeout(void) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in address;
  memset(&address, 0, sizeof address);
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  CHECK(listener >= 0 && bind(listener, (struct sockaddr*)&address, sizeof address) == 0 && listen(listener, 4) == 0 &&
        getsockname(listener, (struct sockaddr*)&address, &length) == 0);
  char endpoint[64];
  snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%u", (unsigned)ntohs(address.sin_port));
  sluice_client_options o;
  memset(&o, 0, sizeof o);
  o.endpoint = endpoint;
  o.plane = SLUICE_PLANE_HTTP;
  o.timeout_seconds = 1;
  sluice_client* c = NULL;
  CHECK_STATUS(sluice_client_create(&o, &c, ERR), SLUICE_OK);
  sluice_object_info info;
  CHECK_STATUS(sluice_head_object(c, "b", "k", &info, ERR), SLUICE_ERR_TIMEOUT);
  sluice_client_destroy(c);
  close(listener);
}

static void test_auth_and_connection(uint16_t port) {
  char endpoint[64];
  snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%u", (unsigned)port);
  sluice_client_options o;
  memset(&o, 0, sizeof o);
  o.endpoint = endpoint;
  o.access_key = "AK";
  o.secret_key = "wrong";
  o.plane = SLUICE_PLANE_HTTP;
  sluice_client* c = NULL;
  CHECK_STATUS(sluice_client_create(&o, &c, ERR), SLUICE_OK);
  sluice_error e;
  const int status = sluice_create_bucket(c, "denied", &e);
  check_s3(status, &e, "SignatureDoesNotMatch", 403, "wrong secret", __LINE__);
  sluice_client_destroy(c);
}

int main(void) {
  char root[] = "/tmp/sluice-capi-XXXXXX";
  if (mkdtemp(root) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  char store[256], socket_path[256];
  snprintf(store, sizeof store, "%s/store", root);
  snprintf(socket_path, sizeof socket_path, "%s/grants.sock", root);
  test_basics();
  CHECK(strcmp(sluice_status_name(SLUICE_ERR_CANCELLED), "SLUICE_ERR_CANCELLED") == 0);
  CHECK(strcmp(sluice_status_name(SLUICE_ERR_TIMEOUT), "SLUICE_ERR_TIMEOUT") == 0);
  CHECK(strcmp(sluice_status_name(SLUICE_ERR_RANGE), "SLUICE_ERR_RANGE") == 0);
  CHECK(strcmp(sluice_status_name(SLUICE_ERR_TLS), "SLUICE_ERR_TLS") == 0);
  test_server_arguments(store);

  sluice_user users[2] = {{"AK", "SK"}, {"AK2", "SK2"}};
  sluice_server_options so;
  memset(&so, 0, sizeof so);
  so.root = store;
  so.users = users;
  so.user_count = 2;
  so.grant_socket = socket_path;
  so.plane = SLUICE_PLANE_AUTO; /* every libfabric provider that opens here */
  sluice_server* server = NULL;
  CHECK_STATUS(sluice_server_start(&so, &server, ERR), SLUICE_OK);
  if (server == NULL) return 1;
  const uint16_t port = sluice_server_port(server);
  CHECK(port != 0);
  printf("embedded server on 127.0.0.1:%u\n", (unsigned)port);

  /* the same port again: in use */
  sluice_server_options taken = so;
  taken.port = port;
  taken.grant_socket = NULL;
  sluice_server* second = (sluice_server*)1;
  CHECK_STATUS(sluice_server_start(&taken, &second, ERR), SLUICE_ERR_SERVER_START);
  CHECK(second == NULL);

  test_client_arguments(port, root);

  char endpoint[64];
  snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%u", (unsigned)port);
  sluice_client_options co;
  memset(&co, 0, sizeof co);
  co.endpoint = endpoint;
  co.access_key = "AK";
  co.secret_key = "SK";
  co.plane = SLUICE_PLANE_HTTP;
  co.part_size = (uint64_t)8 << 20;
  co.parts_in_flight = 2;
  sluice_client* http = NULL;
  CHECK_STATUS(sluice_client_create(&co, &http, ERR), SLUICE_OK);
  sluice_transfer_report none;
  CHECK_STATUS(sluice_client_last_report(http, &none, ERR), SLUICE_OK);
  CHECK(none.bytes == 0 && none.path == SLUICE_PATH_NONE && strcmp(none.path_name, "none") == 0);
  test_object_arguments(http);
  test_round_trip(http, "http");
  test_device_refusals(http);
  test_ranges_and_cancel(http);
  test_timeout();

  /* the automatic plane with the server's grant socket (and libfabric when a provider opens) */
  co.plane = SLUICE_PLANE_AUTO;
  co.grant_socket = socket_path;
  co.region = "us-east-1";
  sluice_client* automatic = NULL;
  CHECK_STATUS(sluice_client_create(&co, &automatic, ERR), SLUICE_OK);
  if (automatic != NULL) test_round_trip(automatic, "auto, grant socket");
  sluice_client_destroy(automatic);

  test_auth_and_connection(port);

  sluice_server_stop(server);
  /* the server is gone: the client's requests cannot connect */
  sluice_error e;
  const int status = sluice_create_bucket(http, "gone", &e);
  CHECK(status == SLUICE_ERR_CONNECTION && e.code == status && e.s3_code[0] == '\0' && e.http_status == 0);
  printf("after stop: %s: %s\n", sluice_status_name(status), e.message);
  sluice_client_destroy(http);

  char command[512];
  snprintf(command, sizeof command, "rm -rf '%s'", root);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", root);
  printf("%d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
