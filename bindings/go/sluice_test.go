// SPDX-License-Identifier: Apache-2.0
package sluice_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice.dev/sluice"
)

// startServer runs `sluice serve` ($SLUICE_BINARY) on an ephemeral loopback port and returns its URL.
func startServer(t *testing.T) string {
	endpoint, _ := startServerWithRoot(t)
	return endpoint
}

// startServerWithRoot is startServer, also returning the directory that holds the store and the
// grant socket (grants.sock).
func startServerWithRoot(t *testing.T) (string, string) {
	binary := os.Getenv("SLUICE_BINARY")
	if binary == "" {
		t.Skip("SLUICE_BINARY is not set (the path of the sluice binary; CTest sets it)")
	}
	root := t.TempDir()
	cmd := exec.Command(binary, "serve", "--root", filepath.Join(root, "store"), "--listen", "127.0.0.1:0",
		"--access-key", "AK", "--secret-key", "SK", "--grant-socket", filepath.Join(root, "grants.sock"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		line := lines.Text()
		t.Log(line)
		// "sluice serve: listening on 127.0.0.1:PORT, store ..."
		if i := strings.Index(line, "listening on "); i >= 0 {
			address := strings.SplitN(line[i+len("listening on "):], ",", 2)[0]
			go func() { // keep draining its output
				for lines.Scan() {
				}
			}()
			return "http://" + address, root
		}
	}
	t.Fatal("sluice serve did not start")
	return "", ""
}

func newClient(t *testing.T, endpoint string, httpOnly bool) *sluice.Client {
	c, err := sluice.NewClient(sluice.Options{Endpoint: endpoint, AccessKey: "AK", SecretKey: "SK", HTTPOnly: httpOnly})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// A segment file PUT and read back, as a vector database loads one, over HTTP and the automatic plane.
func TestSegmentRoundTrip(t *testing.T) {
	ctx := context.Background()
	endpoint := startServer(t)
	segment := filepath.Join(t.TempDir(), "segment-0001.bin")
	data := make([]byte, 20<<20+12345)
	rand.New(rand.NewSource(15)).Read(data)
	if err := os.WriteFile(segment, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, plane := range []struct {
		name     string
		httpOnly bool
	}{{"http", true}, {"auto", false}} {
		t.Run(plane.name, func(t *testing.T) {
			c := newClient(t, endpoint, plane.httpOnly)
			bucket := "segments-" + plane.name
			if err := c.CreateBucket(bucket); err != nil {
				t.Fatal(err)
			}
			contents, err := os.ReadFile(segment)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			put, err := c.Put(ctx, bucket, "collection/segment-0001.bin", contents)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("PUT %v in %v, etag %s", put, time.Since(start), put.ETag)
			if put.Bytes != uint64(len(data)) || put.ETag == "" {
				t.Fatalf("PUT report %+v", put)
			}
			info, err := c.Head(bucket, "collection/segment-0001.bin")
			if err != nil || info.Size != uint64(len(data)) || info.ETag != put.ETag {
				t.Fatalf("HEAD %+v, %v", info, err)
			}
			buf := make([]byte, len(data))
			start = time.Now()
			n, got, err := c.Get(ctx, bucket, "collection/segment-0001.bin", buf)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("GET %v in %v", got, time.Since(start))
			if n != len(data) || !bytes.Equal(buf, data) {
				t.Fatalf("GET returned %d bytes, equal %v", n, bytes.Equal(buf[:n], data))
			}
			if got.Path != "http" && got.Path != "rdma" && got.Path != "mixed" {
				t.Fatalf("GET path %q", got.Path)
			}
			if plane.httpOnly && got.Path != "http" {
				t.Fatalf("HTTPOnly GET went by %q", got.Path)
			}
			// too small a buffer: a clean error, not a crash
			_, _, err = c.Get(ctx, bucket, "collection/segment-0001.bin", buf[:100])
			var e *sluice.Error
			if !errors.As(err, &e) || e.StatusName != "SLUICE_ERR_BUFFER_TOO_SMALL" {
				t.Fatalf("small buffer: %v", err)
			}
			if err := c.Delete(bucket, "collection/segment-0001.bin"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A missing key is an *sluice.Error carrying S3's code and status.
func TestMissingKey(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, startServer(t), false)
	if err := c.CreateBucket("errors"); err != nil {
		t.Fatal(err)
	}
	_, _, err := c.Get(ctx, "errors", "no-such-segment", make([]byte, 16))
	var e *sluice.Error
	if !errors.As(err, &e) {
		t.Fatalf("want *sluice.Error, got %v", err)
	}
	if e.Code != "NoSuchKey" || e.HTTPStatus != 404 || e.StatusName != "SLUICE_ERR_S3" || !sluice.IsCode(err, "NoSuchKey") {
		t.Fatalf("want NoSuchKey 404, got %+v", e)
	}
	t.Log(err)
	if _, err := c.Head("errors", "no-such-segment"); !sluice.IsCode(err, "NoSuchKey") {
		t.Fatalf("HEAD: %v", err)
	}
	if err := c.Delete("errors", "no-such-segment"); err != nil { // as in S3
		t.Fatalf("DELETE of a missing key: %v", err)
	}
	if _, err := c.Put(ctx, "no-such-bucket", "k", []byte("x")); !sluice.IsCode(err, "NoSuchBucket") {
		t.Fatalf("PUT into a missing bucket: %v", err)
	}
	if _, _, err := c.Get(ctx, "", "k", nil); err == nil || err.(*sluice.Error).StatusName != "SLUICE_ERR_INVALID_ARGUMENT" {
		t.Fatalf("empty bucket name: %v", err)
	}
	want := "SLUICE_ERR_NO_CUDA"
	if sluice.BuiltWithCUDA() {
		want = "SLUICE_ERR_CUDA" // host memory is not device memory (or there is no GPU)
	}
	host := make([]byte, 16)
	if _, _, err := c.GetToDevice("errors", "k", uintptr(unsafePointer(host)), len(host)); err == nil ||
		err.(*sluice.Error).StatusName != want {
		t.Fatalf("GetToDevice of host memory: %v, want %s", err, want)
	}
	if _, err := c.PutFromDevice("errors", "k", 0, 16); err == nil ||
		err.(*sluice.Error).StatusName != "SLUICE_ERR_INVALID_ARGUMENT" {
		t.Fatalf("PutFromDevice of a null pointer: %v", err)
	}
	bad, err := sluice.NewClient(sluice.Options{Endpoint: "ftp://nowhere"})
	if err == nil || bad != nil || err.(*sluice.Error).StatusName != "SLUICE_ERR_INVALID_ARGUMENT" {
		t.Fatalf("bad endpoint: %v", err)
	}
	c.Close()
	c.Close() // twice is fine; calls after Close fail cleanly
	if err := c.Delete("errors", "k"); !errors.Is(err, sluice.ErrClosed) {
		t.Fatalf("a closed client: %v, want ErrClosed", err)
	}
	if _, _, err := c.Get(ctx, "errors", "k", make([]byte, 16)); !errors.Is(err, sluice.ErrClosed) {
		t.Fatalf("GET on a closed client: %v, want ErrClosed", err)
	}
}

// Ranged GETs, their errors (nothing written past the buffer), and a context cancelled before
// the call; the consumer in tests/install/go_consumer cancels one mid-transfer.
func TestRanges(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, startServer(t), true)
	if err := c.CreateBucket("ranges"); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1000)
	rand.New(rand.NewSource(3)).Read(data)
	if _, err := c.Put(ctx, "ranges", "obj", data); err != nil {
		t.Fatal(err)
	}
	buf := bytes.Repeat([]byte{0xee}, 316)
	n, _, err := c.GetRange(ctx, "ranges", "obj", 100, 300, buf[:300])
	if err != nil || n != 300 || !bytes.Equal(buf[:300], data[100:400]) || buf[300] != 0xee {
		t.Fatalf("GetRange(100, 300): %d, %v", n, err)
	}
	if n, _, err := c.GetRange(ctx, "ranges", "obj", 900, 0, buf[:300]); err != nil || n != 100 ||
		!bytes.Equal(buf[:100], data[900:]) {
		t.Fatalf("GetRange(900, to the end): %d, %v", n, err)
	}
	for _, bad := range []struct {
		offset, length int64
		want           error
	}{{-1, 0, sluice.ErrRange}, {0, -5, sluice.ErrRange}, {1001, 0, sluice.ErrRange}, {900, 101, sluice.ErrRange},
		{0, 301, sluice.ErrBufferTooSmall}} {
		if _, _, err := c.GetRange(ctx, "ranges", "obj", bad.offset, bad.length, buf[:300]); !errors.Is(err, bad.want) {
			t.Fatalf("GetRange(%d, %d): %v, want %v", bad.offset, bad.length, err, bad.want)
		}
	}
	if buf[300] != 0xee || buf[315] != 0xee {
		t.Fatal("a byte past the buffer was written")
	}
	if list, err := c.List("ranges", ""); err != nil || len(list) != 1 || list[0].Key != "obj" || list[0].Size != 1000 {
		t.Fatalf("List: %+v, %v", list, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := c.Get(cancelled, "ranges", "obj", buf); !errors.Is(err, context.Canceled) ||
		!errors.Is(err, sluice.ErrCancelled) {
		t.Fatalf("GET with a cancelled context: %v", err)
	}
	if _, err := c.Put(cancelled, "ranges", "obj2", data); !errors.Is(err, context.Canceled) {
		t.Fatalf("PUT with a cancelled context: %v", err)
	}
}
