// Implementation of include/sluice/s3/xml.hpp; included by src/s3/s3.cpp.
