// Implementation of include/sluice/s3/chunked.hpp; included by src/s3/s3.cpp.
