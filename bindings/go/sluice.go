// SPDX-License-Identifier: Apache-2.0

// Package sluice calls the sluice S3 client (libsluice_c.so, <sluice/sluice.h>) through cgo, as a
// Go service embeds it: GET (whole objects or byte ranges) into a caller's []byte or into GPU
// memory, PUT from either, HEAD, LIST, DELETE, buckets, over HTTP or HTTPS (a private CA bundle),
// with per-request timeouts, and transfers cancelled by their context.Context. Every call blocks
// until it ends; a Client may be shared by goroutines.
//
// cgo finds the library through pkg-config (sluice-c.pc, installed by `cmake --install`):
//
//	PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig go build ./...
//
// and the program finds libsluice_c.so at run time on the loader's path (LD_LIBRARY_PATH, or an
// rpath: CGO_LDFLAGS=-Wl,-rpath,$PREFIX/lib).
package sluice

/*
#cgo pkg-config: sluice-c
#include <stdlib.h>
#include <sluice/sluice.h>

// The listing callback (list.go): context carries a cgo.Handle.
extern int sluiceGoListObject(void* context, char* key, uint64_t size, char* etag);
static int sluice_go_list(sluice_client* client, const char* bucket, const char* prefix, uintptr_t handle,
                          sluice_error* error) {
	return sluice_list_objects(client, bucket, prefix, (sluice_list_callback)sluiceGoListObject, (void*)handle, error);
}
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"runtime/cgo"
	"sync"
	"time"
	"unsafe"
)

// Options build a Client; zero values take the library's defaults.
type Options struct {
	Endpoint      string        // "http://host:port" or "https://host:port"
	AccessKey     string        // both keys empty: anonymous requests
	SecretKey     string        //
	Region        string        // "us-east-1" when empty
	CABundle      string        // https: a PEM file of the CAs to trust; "": the system's
	Timeout       time.Duration // deadline of one request attempt, rounded up to whole seconds; 0: 300 s
	GrantSocket   string        // a sluice server's same-host grant socket (GPU memory by CUDA IPC); "" for none
	PartSize      uint64        // bytes per part of large transfers; 0: 8 MiB
	PartsInFlight uint32        // 0: 4
	HTTPOnly      bool          // false: RDMA when both ends can, else HTTP
}

// Client is an S3 client with its own connection pool and threads. Close it when done.
type Client struct {
	mu sync.RWMutex // calls share it; Close takes it alone
	c  *C.sluice_client
}

// cstring is a C copy of s (nil for ""), freed by the caller.
func cstring(s string) *C.char {
	if s == "" {
		return nil
	}
	return C.CString(s)
}

// NewClient builds a client; it connects on the first request.
func NewClient(o Options) (*Client, error) {
	if o.Timeout < 0 {
		return nil, newStatusError(C.SLUICE_ERR_INVALID_ARGUMENT, "Timeout is negative", nil)
	}
	var opts C.sluice_client_options
	strs := []*C.char{cstring(o.Endpoint), cstring(o.AccessKey), cstring(o.SecretKey), cstring(o.Region),
		cstring(o.GrantSocket), cstring(o.CABundle)}
	defer func() {
		for _, s := range strs {
			C.free(unsafe.Pointer(s))
		}
	}()
	opts.endpoint, opts.access_key, opts.secret_key, opts.region = strs[0], strs[1], strs[2], strs[3]
	opts.grant_socket, opts.ca_bundle = strs[4], strs[5]
	opts.part_size = C.uint64_t(o.PartSize)
	opts.parts_in_flight = C.uint32_t(o.PartsInFlight)
	if o.Timeout > 0 {
		seconds := math.Ceil(o.Timeout.Seconds())
		if seconds > math.MaxUint32 {
			seconds = math.MaxUint32
		}
		opts.timeout_seconds = C.uint32_t(seconds)
	}
	if o.HTTPOnly {
		opts.plane = C.SLUICE_PLANE_HTTP
	}
	var e C.sluice_error
	var c *C.sluice_client
	if status := C.sluice_client_create(&opts, &c, &e); status != C.SLUICE_OK {
		return nil, newError(status, &e, nil)
	}
	client := &Client{c: c}
	runtime.SetFinalizer(client, (*Client).Close)
	return client, nil
}

// Close releases the client (its connections and threads) after the calls in flight on other
// goroutines return. Calls afterwards fail with ErrClosed. Safe to call twice.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c != nil {
		C.sluice_client_destroy(c.c)
		c.c = nil
	}
}

// use runs call with the open client under the shared lock; ErrClosed after Close.
func (c *Client) use(call func(*C.sluice_client) error) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.c == nil {
		return errClosed()
	}
	return call(c.c)
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

// cancellable runs call with a C cancel handle that ctx's cancellation triggers (nil for a
// context that is never cancelled), and turns SLUICE_ERR_CANCELLED into an *Error wrapping
// ctx.Err() (context.Canceled or context.DeadlineExceeded).
func cancellable(ctx context.Context, call func(*C.sluice_cancel, *C.sluice_error) C.int) error {
	if err := ctx.Err(); err != nil {
		return newStatusError(C.SLUICE_ERR_CANCELLED, "cancelled before the call: "+err.Error(), err)
	}
	var handle *C.sluice_cancel
	if done := ctx.Done(); done != nil {
		var e C.sluice_error
		if status := C.sluice_cancel_create(&handle, &e); status != C.SLUICE_OK {
			return newError(status, &e, nil)
		}
		defer C.sluice_cancel_destroy(handle) // runs last: after the watcher below stopped
		stop, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			select {
			case <-done:
				C.sluice_cancel_trigger(handle)
			case <-stop:
			}
		}()
		defer func() { close(stop); <-stopped }()
	}
	var e C.sluice_error
	if status := call(handle, &e); status != C.SLUICE_OK {
		var cause error
		if status == C.SLUICE_ERR_CANCELLED {
			cause = ctx.Err()
		}
		return newError(status, &e, cause)
	}
	return nil
}

// Get reads the whole object into buf and returns its size (ErrBufferTooSmall when it does not
// fit: nothing is written past len(buf)). Cancelling ctx aborts the transfer: the error then
// wraps ctx.Err() (errors.Is(err, context.Canceled)).
func (c *Client) Get(ctx context.Context, bucket, key string, buf []byte) (int, Report, error) {
	return c.get(ctx, bucket, key, 0, 0, buf)
}

// GetRange reads the bytes [offset, offset+length) of the object (to its end when length is 0)
// into the start of buf and returns their count. A negative offset or length, or a range outside
// the object, is ErrRange; otherwise as Get.
func (c *Client) GetRange(ctx context.Context, bucket, key string, offset, length int64, buf []byte) (int, Report, error) {
	if offset < 0 || length < 0 {
		return 0, Report{}, newStatusError(C.SLUICE_ERR_RANGE, fmt.Sprintf("GET %s/%s: negative offset %d or length %d",
			bucket, key, offset, length), nil)
	}
	return c.get(ctx, bucket, key, uint64(offset), uint64(length), buf)
}

func (c *Client) get(ctx context.Context, bucket, key string, offset, length uint64, buf []byte) (int, Report, error) {
	b, k, free := names(bucket, key)
	defer free()
	var n C.uint64_t
	var r C.sluice_transfer_report
	err := c.use(func(client *C.sluice_client) error {
		return cancellable(ctx, func(cancel *C.sluice_cancel, e *C.sluice_error) C.int {
			var o C.sluice_get_options
			o.offset, o.length, o.cancel = C.uint64_t(offset), C.uint64_t(length), cancel
			return C.sluice_get_object_ex(client, b, k, &o, bytesPointer(buf), C.size_t(len(buf)), &n, &r, e)
		})
	})
	runtime.KeepAlive(buf)
	if err != nil {
		return 0, Report{}, err
	}
	return int(n), toReport(&r), nil
}

// Put writes data as the object (multipart above 16 MiB) and returns the report with its ETag.
// Cancelling ctx aborts the upload (a multipart upload is aborted on the server).
func (c *Client) Put(ctx context.Context, bucket, key string, data []byte) (Report, error) {
	b, k, free := names(bucket, key)
	defer free()
	var r C.sluice_transfer_report
	err := c.use(func(client *C.sluice_client) error {
		return cancellable(ctx, func(cancel *C.sluice_cancel, e *C.sluice_error) C.int {
			var o C.sluice_put_options
			o.cancel = cancel
			return C.sluice_put_object_ex(client, b, k, bytesPointer(data), C.size_t(len(data)), &o, &r, e)
		})
	})
	runtime.KeepAlive(data)
	if err != nil {
		return Report{}, err
	}
	return toReport(&r), nil
}

// GetToDevice reads the whole object into GPU memory at devicePtr (a CUDA device pointer of
// capacity bytes) and returns its size. ErrNoCUDA on a library without CUDA. Not cancellable
// (the C API's device calls take no cancel handle): Options.Timeout bounds each request.
func (c *Client) GetToDevice(bucket, key string, devicePtr uintptr, capacity int) (int, Report, error) {
	b, k, free := names(bucket, key)
	defer free()
	var n C.uint64_t
	var r C.sluice_transfer_report
	err := c.use(func(client *C.sluice_client) error {
		var e C.sluice_error
		// A device address, not Go memory: cgo's pointer rules do not apply to it.
		status := C.sluice_get_object_to_device(client, b, k, *(*unsafe.Pointer)(unsafe.Pointer(&devicePtr)),
			C.size_t(capacity), &n, &r, &e)
		return check(status, &e)
	})
	if err != nil {
		return 0, Report{}, err
	}
	return int(n), toReport(&r), nil
}

// PutFromDevice writes length bytes of GPU memory at devicePtr as the object.
func (c *Client) PutFromDevice(bucket, key string, devicePtr uintptr, length int) (Report, error) {
	b, k, free := names(bucket, key)
	defer free()
	var r C.sluice_transfer_report
	err := c.use(func(client *C.sluice_client) error {
		var e C.sluice_error
		status := C.sluice_put_object_from_device(client, b, k, *(*unsafe.Pointer)(unsafe.Pointer(&devicePtr)),
			C.size_t(length), &r, &e)
		return check(status, &e)
	})
	if err != nil {
		return Report{}, err
	}
	return toReport(&r), nil
}

// Head returns the object's size, ETag, content type and time.
func (c *Client) Head(bucket, key string) (ObjectInfo, error) {
	b, k, free := names(bucket, key)
	defer free()
	var info C.sluice_object_info
	err := c.use(func(client *C.sluice_client) error {
		var e C.sluice_error
		return check(C.sluice_head_object(client, b, k, &info, &e), &e)
	})
	if err != nil {
		return ObjectInfo{}, err
	}
	return ObjectInfo{Size: uint64(info.size), ETag: C.GoString(&info.etag[0]),
		ContentType: C.GoString(&info.content_type[0]), LastModified: int64(info.last_modified)}, nil
}

// Delete removes the object; a missing key is not an error.
func (c *Client) Delete(bucket, key string) error {
	b, k, free := names(bucket, key)
	defer free()
	return c.use(func(client *C.sluice_client) error {
		var e C.sluice_error
		return check(C.sluice_delete_object(client, b, k, &e), &e)
	})
}

// CreateBucket makes a bucket.
func (c *Client) CreateBucket(bucket string) error {
	b := C.CString(bucket)
	defer C.free(unsafe.Pointer(b))
	return c.use(func(client *C.sluice_client) error {
		var e C.sluice_error
		return check(C.sluice_create_bucket(client, b, &e), &e)
	})
}

// DeleteBucket deletes an empty bucket.
func (c *Client) DeleteBucket(bucket string) error {
	b := C.CString(bucket)
	defer C.free(unsafe.Pointer(b))
	return c.use(func(client *C.sluice_client) error {
		var e C.sluice_error
		return check(C.sluice_delete_bucket(client, b, &e), &e)
	})
}

// LastReport is the report of the last GET or PUT that succeeded on this client.
func (c *Client) LastReport() (Report, error) {
	var r C.sluice_transfer_report
	err := c.use(func(client *C.sluice_client) error {
		var e C.sluice_error
		return check(C.sluice_client_last_report(client, &r, &e), &e)
	})
	if err != nil {
		return Report{}, err
	}
	return toReport(&r), nil
}

// List returns every key of the bucket that starts with prefix ("" for all), in key order.
func (c *Client) List(bucket, prefix string) ([]ObjectSummary, error) {
	b, p, free := names(bucket, prefix)
	defer free()
	l := &lister{}
	h := cgo.NewHandle(l)
	defer h.Delete()
	err := c.use(func(client *C.sluice_client) error {
		var e C.sluice_error
		return check(C.sluice_go_list(client, b, p, C.uintptr_t(h), &e), &e)
	})
	if err != nil {
		return nil, err
	}
	return l.objects, nil
}

// BuiltWithCUDA reports whether GetToDevice and PutFromDevice can work.
func BuiltWithCUDA() bool { return C.sluice_built_with_cuda() != 0 }

// Version is the linked library's version (sluice_version()).
func Version() string { return C.GoString(C.sluice_version()) }
