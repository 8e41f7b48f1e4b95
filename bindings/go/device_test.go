// SPDX-License-Identifier: Apache-2.0
//go:build cuda

package sluice_test

import (
	"bytes"
	"context"
	"math/rand"
	"path/filepath"
	"testing"

	"sluice.dev/sluice"
	"sluice.dev/sluice/internal/cudamem"
)

// A segment GET into GPU memory and PUT from it, as Milvus would load an index segment: through
// the same-host grant (CUDA IPC) of the server's grant socket. Runs with -tags cuda on a GPU host
// (build/device-carry/run.sh go); skipped without a GPU.
func TestSegmentIntoDeviceMemory(t *testing.T) {
	ctx := context.Background()
	if cudamem.DeviceCount() == 0 {
		t.Skip("no CUDA device here")
	}
	if !sluice.BuiltWithCUDA() {
		t.Fatal("libsluice_c was built without CUDA")
	}
	endpoint, root := startServerWithRoot(t)
	c, err := sluice.NewClient(sluice.Options{Endpoint: endpoint, AccessKey: "AK", SecretKey: "SK",
		GrantSocket: filepath.Join(root, "grants.sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateBucket("segments"); err != nil {
		t.Fatal(err)
	}
	segment := make([]byte, 64<<20+12345)
	rand.New(rand.NewSource(21)).Read(segment)
	if _, err := c.Put(ctx, "segments", "seg-0001", segment); err != nil {
		t.Fatal(err)
	}
	gpu, err := cudamem.Alloc(len(segment))
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Free()
	if err := gpu.Fill(0xAB); err != nil {
		t.Fatal(err)
	}
	n, report, err := c.GetToDevice("segments", "seg-0001", gpu.Ptr, gpu.Size)
	if err != nil || n != len(segment) {
		t.Fatalf("GetToDevice: %d bytes, %v", n, err)
	}
	t.Logf("GET into GPU memory: %+v", report)
	if report.Path != "direct" || report.RDMABytes != uint64(len(segment)) {
		t.Fatalf("GET went %q with %d bytes by RDMA/grant, want direct, all", report.Path, report.RDMABytes)
	}
	back := make([]byte, len(segment))
	if err := gpu.ToHost(back); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, segment) {
		t.Fatal("the GPU memory does not hold the segment")
	}
	put, err := c.PutFromDevice("segments", "seg-0001-copy", gpu.Ptr, gpu.Size)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("PUT from GPU memory: %+v", put)
	got := make([]byte, len(segment))
	if n, _, err := c.Get(ctx, "segments", "seg-0001-copy", got); err != nil || n != len(segment) || !bytes.Equal(got, segment) {
		t.Fatalf("the object PUT from GPU memory differs (%d bytes, %v)", n, err)
	}
}
