// SPDX-License-Identifier: Apache-2.0
package sluice_test

import "unsafe"

// unsafePointer is the address of b's first byte (a host address the device calls must refuse).
func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }
