// SPDX-License-Identifier: Apache-2.0
//go:build cuda

// Package cudamem allocates CUDA device memory for the GPU test of package sluice (build tag
// cuda: it needs the CUDA runtime's header and library on cgo's paths, e.g.
// CGO_CFLAGS=-I/usr/local/cuda/include CGO_LDFLAGS="-L/usr/local/cuda/lib64 -lcudart").
package cudamem

/*
#cgo LDFLAGS: -lcudart
#include <cuda_runtime_api.h>
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Buffer is device memory from cudaMalloc.
type Buffer struct {
	Ptr  uintptr
	Size int
}

// DeviceCount is the number of CUDA devices this process sees (0 without a GPU or driver).
func DeviceCount() int {
	var n C.int
	if C.cudaGetDeviceCount(&n) != C.cudaSuccess {
		return 0
	}
	return int(n)
}

// Alloc returns size bytes of device memory.
func Alloc(size int) (Buffer, error) {
	var p unsafe.Pointer
	if e := C.cudaMalloc(&p, C.size_t(size)); e != C.cudaSuccess {
		return Buffer{}, fmt.Errorf("cudaMalloc(%d): %s", size, C.GoString(C.cudaGetErrorString(e)))
	}
	return Buffer{uintptr(p), size}, nil
}

// Free releases the memory.
func (b Buffer) Free() { C.cudaFree(*(*unsafe.Pointer)(unsafe.Pointer(&b.Ptr))) }

// ToHost copies the whole buffer into out (len(out) >= Size).
func (b Buffer) ToHost(out []byte) error {
	if len(out) < b.Size {
		return fmt.Errorf("ToHost: %d bytes for %d", len(out), b.Size)
	}
	src := *(*unsafe.Pointer)(unsafe.Pointer(&b.Ptr))
	if e := C.cudaMemcpy(unsafe.Pointer(&out[0]), src, C.size_t(b.Size), C.cudaMemcpyDeviceToHost); e != C.cudaSuccess {
		return fmt.Errorf("cudaMemcpy: %s", C.GoString(C.cudaGetErrorString(e)))
	}
	return nil
}

// Fill sets every byte to v.
func (b Buffer) Fill(v byte) error {
	if e := C.cudaMemset(*(*unsafe.Pointer)(unsafe.Pointer(&b.Ptr)), C.int(v), C.size_t(b.Size)); e != C.cudaSuccess {
		return fmt.Errorf("cudaMemset: %s", C.GoString(C.cudaGetErrorString(e)))
	}
	return nil
}
