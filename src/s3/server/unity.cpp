// SPDX-License-Identifier: Apache-2.0
// The S3 server's parts as one translation unit: what src/CMakeLists.txt compiles instead of
// the eight files when SLUICE_UNITY_SERVER is ON (scripts/test.sh, the CI, turns it on). Each
// part instantiates the same Beast and Asio machinery for both streams; compiled together that
// happens once, which halves the server's compile time for a whole build (an edit of one part
// then recompiles all eight). The parts include relatively, so ccache finds the same input in
// another clone of the same commit.
#include "bodies.cpp"      // NOLINT(bugprone-suspicious-include)
#include "bucket_ops.cpp"  // NOLINT(bugprone-suspicious-include)
#include "config.cpp"      // NOLINT(bugprone-suspicious-include)
#include "dispatch.cpp"    // NOLINT(bugprone-suspicious-include)
#include "get_object.cpp"  // NOLINT(bugprone-suspicious-include)
#include "multipart.cpp"   // NOLINT(bugprone-suspicious-include)
#include "object_ops.cpp"  // NOLINT(bugprone-suspicious-include)
#include "server.cpp"      // NOLINT(bugprone-suspicious-include)
