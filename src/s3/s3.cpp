// The compiled part of sluice::s3, one translation unit (asio's impl/*.ipp pattern): each
// .ipp beside this file implements one header of include/sluice/s3/.
#include "error.ipp"
#include "checksum.ipp"
#include "sigv4.ipp"
#include "chunked.ipp"
#include "xml.ipp"
#include "fs_store.ipp"
