// Package sluice calls the sluice S3 client (libsluice_c.so, include/sluice/sluice.h) through cgo,
// as a Go service embeds it: GET into a caller's []byte or into GPU memory, PUT from either, HEAD,
// DELETE, buckets. Every call blocks until its transfer ends; a Client may be shared by goroutines.
//
// Build with the header and library on cgo's paths, e.g.
//
//	CGO_CFLAGS=-I$SLUICE/include CGO_LDFLAGS="-L$SLUICE/build/release/src -Wl,-rpath,$SLUICE/build/release/src"
package sluice

/*
#cgo LDFLAGS: -lsluice_c
#include <stdlib.h>
#include <sluice/sluice.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Error is a failed call: the C API's status, and for answers from the server the S3 error code
// ("NoSuchKey") and HTTP status (404). Match it with errors.As.
type Error struct {
	Status     int    // the C API's SLUICE_ERR_* value
	StatusName string // its name, "SLUICE_ERR_S3"
	Code       string // the S3 error code; empty when the server did not answer with one
	HTTPStatus int    // the HTTP status of the answer; 0 when none
	Message    string
}

func (e *Error) Error() string { return "sluice: " + e.Message }

// IsCode reports whether err is a sluice *Error with this S3 code.
func IsCode(err error, code string) bool {
	e, ok := err.(*Error)
	return ok && e.Code == code
}

func newError(status C.int, e *C.sluice_error) error {
	return &Error{
		Status:     int(status),
		StatusName: C.GoString(C.sluice_status_name(status)),
		Code:       C.GoString(&e.s3_code[0]),
		HTTPStatus: int(e.http_status),
		Message:    C.GoString(&e.message[0]),
	}
}

// Report says what carried a transfer's bytes.
type Report struct {
	Bytes     uint64
	RDMABytes uint64
	HTTPBytes uint64
	Path      string // "none", "http", "rdma", "mixed", "staged", "direct"
	ETag      string // PUT only
}

func toReport(r *C.sluice_transfer_report) Report {
	return Report{Bytes: uint64(r.bytes), RDMABytes: uint64(r.rdma_bytes), HTTPBytes: uint64(r.http_bytes),
		Path: C.GoString(&r.path_name[0]), ETag: C.GoString(&r.etag[0])}
}

// ObjectInfo is what HEAD returns.
type ObjectInfo struct {
	Size         uint64
	ETag         string
	ContentType  string
	LastModified int64 // seconds since the epoch
}

// Options build a Client; zero values take the library's defaults.
type Options struct {
	Endpoint      string // "http://host:port"
	AccessKey     string
	SecretKey     string
	Region        string // "us-east-1" when empty
	GrantSocket   string // a sluice server's same-host grant socket (GPU memory by CUDA IPC); "" for none
	PartSize      uint64 // bytes per part of large transfers; 0: 8 MiB
	PartsInFlight uint32 // 0: 4
	HTTPOnly      bool   // false: RDMA when both ends can, else HTTP
}

// Client is an S3 client with its own connection pool and threads. Close it when done.
type Client struct {
	c *C.sluice_client
}

// cstring is a C copy of s, freed by the caller.
func cstring(s string) *C.char {
	if s == "" {
		return nil
	}
	return C.CString(s)
}

// NewClient builds a client; it connects on the first request.
func NewClient(o Options) (*Client, error) {
	var opts C.sluice_client_options
	strs := []*C.char{cstring(o.Endpoint), cstring(o.AccessKey), cstring(o.SecretKey), cstring(o.Region),
		cstring(o.GrantSocket)}
	defer func() {
		for _, s := range strs {
			C.free(unsafe.Pointer(s))
		}
	}()
	opts.endpoint, opts.access_key, opts.secret_key, opts.region, opts.grant_socket = strs[0], strs[1], strs[2], strs[3], strs[4]
	opts.part_size = C.uint64_t(o.PartSize)
	opts.parts_in_flight = C.uint32_t(o.PartsInFlight)
	if o.HTTPOnly {
		opts.plane = C.SLUICE_PLANE_HTTP
	}
	var e C.sluice_error
	var c *C.sluice_client
	if status := C.sluice_client_create(&opts, &c, &e); status != C.SLUICE_OK {
		return nil, newError(status, &e)
	}
	client := &Client{c: c}
	runtime.SetFinalizer(client, (*Client).Close)
	return client, nil
}

// Close releases the client (its connections and threads). Safe to call twice.
func (c *Client) Close() {
	if c.c != nil {
		C.sluice_client_destroy(c.c)
		c.c = nil
	}
}

// names converts bucket and key to C strings, freed by the returned function.
func names(bucket, key string) (*C.char, *C.char, func()) {
	b, k := C.CString(bucket), C.CString(key)
	return b, k, func() { C.free(unsafe.Pointer(b)); C.free(unsafe.Pointer(k)) }
}

// bytesPointer is the address of buf's first byte, or nil for an empty slice.
func bytesPointer(buf []byte) unsafe.Pointer {
	if len(buf) == 0 {
		return nil
	}
	return unsafe.Pointer(&buf[0])
}

// Get reads the whole object into buf and returns its size (an *Error with StatusName
// SLUICE_ERR_BUFFER_TOO_SMALL when it does not fit).
func (c *Client) Get(bucket, key string, buf []byte) (int, Report, error) {
	b, k, free := names(bucket, key)
	defer free()
	var n C.uint64_t
	var r C.sluice_transfer_report
	var e C.sluice_error
	status := C.sluice_get_object(c.c, b, k, bytesPointer(buf), C.size_t(len(buf)), &n, &r, &e)
	runtime.KeepAlive(buf)
	if status != C.SLUICE_OK {
		return 0, Report{}, newError(status, &e)
	}
	return int(n), toReport(&r), nil
}

// GetToDevice reads the whole object into GPU memory at devicePtr (a CUDA device pointer of
// capacity bytes) and returns its size. Fails with SLUICE_ERR_NO_CUDA on a library without CUDA.
func (c *Client) GetToDevice(bucket, key string, devicePtr uintptr, capacity int) (int, Report, error) {
	b, k, free := names(bucket, key)
	defer free()
	var n C.uint64_t
	var r C.sluice_transfer_report
	var e C.sluice_error
	// A device address, not Go memory: cgo's pointer rules do not apply to it.
	status := C.sluice_get_object_to_device(c.c, b, k, *(*unsafe.Pointer)(unsafe.Pointer(&devicePtr)),
		C.size_t(capacity), &n, &r, &e)
	if status != C.SLUICE_OK {
		return 0, Report{}, newError(status, &e)
	}
	return int(n), toReport(&r), nil
}

// Put writes data as the object (multipart above 16 MiB) and returns the report with its ETag.
func (c *Client) Put(bucket, key string, data []byte) (Report, error) {
	b, k, free := names(bucket, key)
	defer free()
	var r C.sluice_transfer_report
	var e C.sluice_error
	status := C.sluice_put_object(c.c, b, k, bytesPointer(data), C.size_t(len(data)), nil, &r, &e)
	runtime.KeepAlive(data)
	if status != C.SLUICE_OK {
		return Report{}, newError(status, &e)
	}
	return toReport(&r), nil
}

// PutFromDevice writes length bytes of GPU memory at devicePtr as the object.
func (c *Client) PutFromDevice(bucket, key string, devicePtr uintptr, length int) (Report, error) {
	b, k, free := names(bucket, key)
	defer free()
	var r C.sluice_transfer_report
	var e C.sluice_error
	status := C.sluice_put_object_from_device(c.c, b, k, *(*unsafe.Pointer)(unsafe.Pointer(&devicePtr)),
		C.size_t(length), &r, &e)
	if status != C.SLUICE_OK {
		return Report{}, newError(status, &e)
	}
	return toReport(&r), nil
}

// Head returns the object's size, ETag, content type and time.
func (c *Client) Head(bucket, key string) (ObjectInfo, error) {
	b, k, free := names(bucket, key)
	defer free()
	var info C.sluice_object_info
	var e C.sluice_error
	if status := C.sluice_head_object(c.c, b, k, &info, &e); status != C.SLUICE_OK {
		return ObjectInfo{}, newError(status, &e)
	}
	return ObjectInfo{Size: uint64(info.size), ETag: C.GoString(&info.etag[0]),
		ContentType: C.GoString(&info.content_type[0]), LastModified: int64(info.last_modified)}, nil
}

// Delete removes the object; a missing key is not an error.
func (c *Client) Delete(bucket, key string) error {
	b, k, free := names(bucket, key)
	defer free()
	var e C.sluice_error
	if status := C.sluice_delete_object(c.c, b, k, &e); status != C.SLUICE_OK {
		return newError(status, &e)
	}
	return nil
}

// CreateBucket makes a bucket.
func (c *Client) CreateBucket(bucket string) error {
	b := C.CString(bucket)
	defer C.free(unsafe.Pointer(b))
	var e C.sluice_error
	if status := C.sluice_create_bucket(c.c, b, &e); status != C.SLUICE_OK {
		return newError(status, &e)
	}
	return nil
}

// BuiltWithCUDA reports whether GetToDevice and PutFromDevice can work.
func BuiltWithCUDA() bool { return C.sluice_built_with_cuda() != 0 }

// Version is the library's version.
func Version() string { return C.GoString(C.sluice_version()) }

// String describes a report.
func (r Report) String() string {
	return fmt.Sprintf("%d bytes by %s (rdma %d, http %d)", r.Bytes, r.Path, r.RDMABytes, r.HTTPBytes)
}
