// Implementation of include/sluice/s3/fs_store.hpp; included by src/s3/s3.cpp.
