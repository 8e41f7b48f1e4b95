// SPDX-License-Identifier: Apache-2.0
/* A C program outside the tree, built only through `pkg-config sluice-c` (tests/install/acceptance.py c):
 * a ranged GET over HTTP and over HTTPS with a private CA, and the bad inputs (NULL client, a
 * buffer too small, offsets and lengths outside the object, the wrong CA), each a typed status
 * with nothing written past the buffer.
 * Usage: c_consumer HTTP_ENDPOINT HTTPS_ENDPOINT CA_PEM WRONG_CA_PEM ACCESS_KEY SECRET_KEY */
#include <sluice/sluice.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

static void expect(int got, int want, const sluice_error* e, const char* what) {
  if (got != want || (e != NULL && e->code != got)) {
    ++failures;
    fprintf(stderr, "FAILED: %s: %s (%s), wanted %s\n", what, sluice_status_name(got), e != NULL ? e->message : "",
            sluice_status_name(want));
  } else {
    printf("ok: %s: %s%s%s\n", what, sluice_status_name(got), got != SLUICE_OK && e != NULL ? ": " : "",
           got != SLUICE_OK && e != NULL ? e->message : "");
  }
}

static sluice_client* make_client(const char* endpoint, const char* ca, const char* ak, const char* sk) {
  sluice_client_options o;
  memset(&o, 0, sizeof o);
  o.endpoint = endpoint;
  o.access_key = ak;
  o.secret_key = sk;
  o.ca_bundle = ca;
  o.plane = SLUICE_PLANE_HTTP;
  o.timeout_seconds = 30;
  sluice_client* c = NULL;
  sluice_error e;
  expect(sluice_client_create(&o, &c, &e), SLUICE_OK, &e, endpoint);
  return c;
}

enum { object_size = 1 << 20, guard = 64 };

int main(int argc, char** argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: %s HTTP HTTPS CA WRONG_CA AK SK\n", argv[0]);
    return 2;
  }
  printf("libsluice_c %s\n", sluice_version());
  sluice_error e;
  sluice_client* http = make_client(argv[1], NULL, argv[5], argv[6]);
  if (http == NULL) return 1;
  unsigned char* data = malloc(object_size);
  unsigned char* buffer = malloc(object_size + guard);
  if (data == NULL || buffer == NULL) return 1;
  for (size_t i = 0; i < object_size; ++i) data[i] = (unsigned char)(i * 31 + (i >> 9));
  expect(sluice_create_bucket(http, "c-consumer", &e), SLUICE_OK, &e, "create bucket");
  expect(sluice_put_object(http, "c-consumer", "blob", data, object_size, NULL, NULL, &e), SLUICE_OK, &e, "put");

  sluice_get_options range;
  memset(&range, 0, sizeof range);
  range.offset = 1000;
  range.length = 5000;
  uint64_t bytes = 0;
  memset(buffer, 0xee, object_size + guard);
  expect(sluice_get_object_ex(http, "c-consumer", "blob", &range, buffer, 5000, &bytes, NULL, &e), SLUICE_OK, &e,
         "ranged GET over HTTP");
  if (bytes != 5000 || memcmp(buffer, data + 1000, 5000) != 0 || buffer[5000] != 0xee) {
    ++failures;
    fprintf(stderr, "FAILED: the ranged GET read the wrong bytes\n");
  }

  /* bad input */
  expect(sluice_get_object_ex(NULL, "c-consumer", "blob", &range, buffer, 5000, &bytes, NULL, &e),
         SLUICE_ERR_INVALID_ARGUMENT, &e, "NULL client (a closed one in C is NULL)");
  memset(buffer, 0xee, object_size + guard);
  expect(sluice_get_object(http, "c-consumer", "blob", buffer, object_size - 1, &bytes, NULL, &e),
         SLUICE_ERR_BUFFER_TOO_SMALL, &e, "buffer too small");
  range.offset = UINT64_MAX; /* C has no negative offset: the largest one */
  range.length = 0;
  expect(sluice_get_object_ex(http, "c-consumer", "blob", &range, buffer, object_size, &bytes, NULL, &e),
         SLUICE_ERR_RANGE, &e, "offset UINT64_MAX");
  range.offset = object_size + 1;
  expect(sluice_get_object_ex(http, "c-consumer", "blob", &range, buffer, object_size, &bytes, NULL, &e),
         SLUICE_ERR_RANGE, &e, "offset past the object");
  range.offset = 10;
  range.length = object_size;
  expect(sluice_get_object_ex(http, "c-consumer", "blob", &range, buffer, object_size, &bytes, NULL, &e),
         SLUICE_ERR_RANGE, &e, "length past the object");
  for (size_t i = object_size - 1; i < object_size + guard; ++i) {
    if (buffer[i] != 0xee) {
      ++failures;
      fprintf(stderr, "FAILED: byte %zu past the buffer was written\n", i);
      break;
    }
  }

  /* HTTPS with the private CA, then with the wrong one */
  sluice_client* https = make_client(argv[2], argv[3], argv[5], argv[6]);
  if (https != NULL) {
    range.offset = object_size - 100;
    range.length = 0;
    expect(sluice_get_object_ex(https, "c-consumer", "blob", &range, buffer, object_size, &bytes, NULL, &e), SLUICE_OK,
           &e, "ranged GET over HTTPS (private CA)");
    if (bytes != 100 || memcmp(buffer, data + object_size - 100, 100) != 0) {
      ++failures;
      fprintf(stderr, "FAILED: the HTTPS ranged GET read the wrong bytes\n");
    }
  }
  sluice_client* wrong = make_client(argv[2], argv[4], argv[5], argv[6]);
  if (wrong != NULL) {
    expect(sluice_get_object_ex(wrong, "c-consumer", "blob", &range, buffer, object_size, &bytes, NULL, &e),
           SLUICE_ERR_TLS, &e, "wrong CA");
  }
  sluice_client_destroy(wrong);
  sluice_client_destroy(https);
  sluice_client_destroy(http);
  free(buffer);
  free(data);
  printf("%s\n", failures == 0 ? "c_consumer: passed" : "c_consumer: FAILED");
  return failures == 0 ? 0 : 1;
}
