// The compiled part of sluice::s3, one translation unit (asio's impl/*.ipp pattern): each
// .ipp beside this file implements one header of include/sluice/s3/.
#include "checksum.ipp"
#include "chunked.ipp"
#include "error.ipp"
#include "fs_store.ipp"
#include "router.ipp"
#include "server.ipp"
#include "sigv4.ipp"
#include "xml.ipp"
