// The compiled part of sluice::s3, one translation unit (asio's impl/*.ipp pattern): each
// .ipp included here implements one header of include/sluice/s3/. The two large ones include
// their parts themselves: fs_store.ipp (fs_store_format, fs_store_writer, fs_store_multipart)
// and client.ipp (client_connection, client_exchange, client_get, client_put, client_ops).
// clang-format off
#include "error.ipp"
#include "checksum.ipp"
#include "sigv4.ipp"
#include "sigv2.ipp"
#include "chunked.ipp"
#include "rdma_token.ipp"
#include "xml.ipp"
#include "xml_client.ipp"
#include "fs_store.ipp"
#include "router.ipp"
#include "access_log.ipp"
#include "metrics.ipp"

// The network parts (Beast, coroutines). Off in the fuzz build, which needs only the parsers.
#ifndef SLUICE_S3_SANS_IO_ONLY
#include "server.ipp"
// The client last: it opens sluice::s3::detail, which would hide sluice::detail from the files above.
#include "client.ipp"
// The gateway store uses the client.
#include "gateway_store.ipp"
#endif
// clang-format on
