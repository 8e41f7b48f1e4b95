// Implementation of include/sluice/s3/checksum.hpp; included by src/s3/s3.cpp.
