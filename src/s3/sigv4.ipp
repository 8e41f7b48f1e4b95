// Implementation of include/sluice/s3/sigv4.hpp; included by src/s3/s3.cpp.
