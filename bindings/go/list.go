// SPDX-License-Identifier: Apache-2.0

package sluice

/*
#include <stdint.h>
#include <sluice/sluice.h>
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

// lister collects a listing; its cgo.Handle is the C callback's context.
type lister struct{ objects []ObjectSummary }

//export sluiceGoListObject
func sluiceGoListObject(context unsafe.Pointer, key *C.char, size C.uint64_t, etag *C.char) C.int {
	l := cgo.Handle(uintptr(context)).Value().(*lister)
	l.objects = append(l.objects, ObjectSummary{Key: C.GoString(key), Size: uint64(size), ETag: C.GoString(etag)})
	return 0
}
