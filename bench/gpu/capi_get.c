// SPDX-License-Identifier: Apache-2.0
/* The C path of the Python-vs-C comparison (bench/gpu/python_get.py): the same GET into device
 * memory through the C API (sluice_get_object_to_device), timed in a loop after one untimed GET.
 * Built on the GPU host by build/device-carry/run.sh python against the carried libsluice_c.so:
 *   capi_get ENDPOINT ACCESS_KEY SECRET_KEY GRANT_SOCKET BUCKET KEY BYTES REPEAT
 * Prints one line: "c: median S s, GiB/s G, path P". Exit 1 on any error. */
#include <sluice/sluice.h>

#include <cuda_runtime_api.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a;
  const double y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  if (argc != 9) {
    fprintf(stderr, "usage: capi_get ENDPOINT AK SK GRANT_SOCKET BUCKET KEY BYTES REPEAT\n");
    return 2;
  }
  const size_t bytes = (size_t)strtoull(argv[7], NULL, 10);
  const int repeat = atoi(argv[8]);
  if (bytes == 0 || repeat < 1 || repeat > 1000) return 2;
  sluice_client_options options;
  memset(&options, 0, sizeof options);
  options.endpoint = argv[1];
  options.access_key = argv[2];
  options.secret_key = argv[3];
  options.grant_socket = argv[4];
  sluice_client* client = NULL;
  sluice_error error;
  memset(&error, 0, sizeof error);
  if (sluice_client_create(&options, &client, &error) != 0) {
    fprintf(stderr, "capi_get: client: %s\n", error.message);
    return 1;
  }
  void* device = NULL;
  if (cudaMalloc(&device, bytes) != cudaSuccess) {
    fprintf(stderr, "capi_get: cudaMalloc of %zu bytes failed\n", bytes);
    return 1;
  }
  double* seconds = calloc((size_t)repeat, sizeof(double));
  sluice_transfer_report report;
  int status = 0;
  for (int i = -1; i < repeat && status == 0; ++i) { /* i == -1: untimed */
    uint64_t got = 0;
    const double start = now();
    status = sluice_get_object_to_device(client, argv[5], argv[6], device, bytes, &got, &report, &error);
    if (i >= 0) seconds[i] = now() - start;
    if (status == 0 && got != bytes) {
      fprintf(stderr, "capi_get: short GET (%llu of %zu bytes)\n", (unsigned long long)got, bytes);
      status = 1;
    }
  }
  if (status != 0) {
    fprintf(stderr, "capi_get: GET: %s\n", error.message);
  } else {
    qsort(seconds, (size_t)repeat, sizeof(double), by_value);
    const double median = seconds[repeat / 2];
    printf("c: median %.5f s, GiB/s %.2f, path %s\n", median, (double)bytes / median / (1u << 30), report.path_name);
  }
  free(seconds);
  cudaFree(device);
  sluice_client_destroy(client);
  return status == 0 ? 0 : 1;
}
