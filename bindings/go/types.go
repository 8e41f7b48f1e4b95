// SPDX-License-Identifier: Apache-2.0

package sluice

/*
#include <sluice/sluice.h>
*/
import "C"

import (
	"errors"
	"fmt"
)

// Error is a failed call: the C API's status, and for answers from the server the S3 error code
// ("NoSuchKey") and HTTP status (404). Match it with errors.As, or its status with errors.Is and
// the Err* values (errors.Is(err, sluice.ErrRange)); a cancelled call also matches its context's
// error (errors.Is(err, context.Canceled)), a call on a closed client ErrClosed.
type Error struct {
	Status     int    // the C API's SLUICE_ERR_* value
	StatusName string // its name, "SLUICE_ERR_S3"
	Code       string // the S3 error code; empty when the server did not answer with one
	HTTPStatus int    // the HTTP status of the answer; 0 when none
	Message    string
	cause      error // context.Canceled, context.DeadlineExceeded, ErrClosed, or nil
}

func (e *Error) Error() string { return "sluice: " + e.Message }

// Unwrap is the context's error of a cancelled call, ErrClosed for a closed client, else nil.
func (e *Error) Unwrap() error { return e.cause }

// Is matches the Err* status values.
func (e *Error) Is(target error) bool {
	s, ok := target.(statusError)
	return ok && int(s) == e.Status
}

// statusError is a C API status as an error value, for errors.Is.
type statusError int

func (s statusError) Error() string { return "sluice: " + C.GoString(C.sluice_status_name(C.int(s))) }

// The C API's statuses, for errors.Is.
var (
	ErrInvalidArgument error = statusError(C.SLUICE_ERR_INVALID_ARGUMENT)
	ErrS3              error = statusError(C.SLUICE_ERR_S3) // the server answered with an S3 error (Error.Code)
	ErrBufferTooSmall  error = statusError(C.SLUICE_ERR_BUFFER_TOO_SMALL)
	ErrNoCUDA          error = statusError(C.SLUICE_ERR_NO_CUDA)
	ErrConnection      error = statusError(C.SLUICE_ERR_CONNECTION)
	ErrUnsupported     error = statusError(C.SLUICE_ERR_UNSUPPORTED)
	ErrCUDA            error = statusError(C.SLUICE_ERR_CUDA)
	ErrInternal        error = statusError(C.SLUICE_ERR_INTERNAL)
	ErrCancelled       error = statusError(C.SLUICE_ERR_CANCELLED)
	ErrTimeout         error = statusError(C.SLUICE_ERR_TIMEOUT)
	ErrRange           error = statusError(C.SLUICE_ERR_RANGE)
	ErrTLS             error = statusError(C.SLUICE_ERR_TLS)
)

// ErrClosed is wrapped by the *Error of a call on a closed client.
var ErrClosed = errors.New("sluice: the client is closed")

// IsCode reports whether err is a sluice *Error with this S3 code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

func newError(status C.int, e *C.sluice_error, cause error) error {
	return &Error{
		Status:     int(status),
		StatusName: C.GoString(C.sluice_status_name(status)),
		Code:       C.GoString(&e.s3_code[0]),
		HTTPStatus: int(e.http_status),
		Message:    C.GoString(&e.message[0]),
		cause:      cause,
	}
}

// newStatusError is an *Error made on the Go side (the C API was not called).
func newStatusError(status C.int, message string, cause error) error {
	return &Error{Status: int(status), StatusName: C.GoString(C.sluice_status_name(status)), Message: message,
		cause: cause}
}

func errClosed() error {
	return newStatusError(C.SLUICE_ERR_INVALID_ARGUMENT, "the client is closed", ErrClosed)
}

// check is nil for SLUICE_OK, else the *Error.
func check(status C.int, e *C.sluice_error) error {
	if status == C.SLUICE_OK {
		return nil
	}
	return newError(status, e, nil)
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

// String describes a report.
func (r Report) String() string {
	return fmt.Sprintf("%d bytes by %s (rdma %d, http %d)", r.Bytes, r.Path, r.RDMABytes, r.HTTPBytes)
}

// ObjectInfo is what HEAD returns.
type ObjectInfo struct {
	Size         uint64
	ETag         string
	ContentType  string
	LastModified int64 // seconds since the epoch
}

// ObjectSummary is one key of a listing.
type ObjectSummary struct {
	Key  string
	Size uint64
	ETag string
}
