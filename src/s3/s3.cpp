// SPDX-License-Identifier: Apache-2.0
// sluice::s3 without the network, one translation unit (asio's impl/*.ipp pattern): each .ipp
// included here implements one header of include/sluice/s3/ (error codes, checksums, SigV4 and
// SigV2, chunked bodies, the token codec, XML, the checks of a gateway's upstream answers,
// fs_store, the router, the access log, metrics);
// fs_store.ipp includes its parts itself (fs_store_format, fs_store_writer, fs_store_multipart).
// SigV4 and XML come in two parts each: sigv4.ipp then sigv4_authorization.ipp (parsing a
// request's authorization), xml.ipp then xml_object.ipp (ACLs, GetObjectAttributes) and
// xml_time.ipp (the date formats).
// The network parts are translation units of their own, so that the heavy ones (Beast and
// coroutines) compile in parallel: the server's parts (server/), the client's (client*.cpp),
// gateway_store.cpp.
// clang-format off
#include "error.ipp"
#include "checksum.ipp"
#include "sigv4.ipp"
#include "sigv4_authorization.ipp"
#include "sigv2.ipp"
#include "chunked.ipp"
#include "rdma_token.ipp"
#include "xml.ipp"
#include "xml_object.ipp"
#include "xml_time.ipp"
#include "xml_client.ipp"
#include "fs_store.ipp"
#include "router.ipp"
#include "access_log.ipp"
#include "metrics.ipp"
// Last: it opens sluice::s3::detail, which would hide sluice::detail from the files above.
#include "gateway_upstream.ipp"
// clang-format on
