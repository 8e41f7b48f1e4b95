// SPDX-License-Identifier: Apache-2.0

package sluice

// BindingVersion is the version of this package: sluice's project(VERSION) in CMakeLists.txt
// (the install.version test checks that they agree). Version() is the linked library's.
const BindingVersion = "0.2.0"
