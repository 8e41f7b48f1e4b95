// SPDX-License-Identifier: Apache-2.0

// A Go module outside the tree (tests/install/acceptance.py go writes its go.mod, with `replace
// sluice.dev/sluice => CHECKOUT/bindings/go`), built against the installed sluice-c.pc: the
// version, a ranged GET, a GET cancelled by its context mid-transfer (through a throttled
// loopback proxy, so the transfer is surely under way), a ranged GET over HTTPS with a private
// CA, and the bad inputs (a closed client, a buffer too small, a negative offset, a length past
// the object, the wrong CA), each a typed error with nothing written past the buffer.
// Usage: go_consumer VERSION HTTP HTTPS CA WRONG_CA AK SK
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"sluice.dev/sluice"
)

var failures int

func check(ok bool, format string, args ...any) {
	if ok {
		fmt.Printf("ok: "+format+"\n", args...)
	} else {
		failures++
		fmt.Printf("FAILED: "+format+"\n", args...)
	}
}

// throttle forwards 127.0.0.1:PORT to target, the answers at about bytesPerSecond.
func throttle(target string, bytesPerSecond int) (string, func()) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() {
		for {
			client, err := listener.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			go func() { _, _ = io.Copy(server, client); server.Close() }()
			go func() {
				defer client.Close()
				chunk := make([]byte, 16<<10)
				for {
					n, err := server.Read(chunk)
					if n > 0 {
						if _, werr := client.Write(chunk[:n]); werr != nil {
							return
						}
						time.Sleep(time.Duration(n) * time.Second / time.Duration(bytesPerSecond))
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + listener.Addr().String(), func() { listener.Close() }
}

func main() {
	if len(os.Args) != 8 {
		fmt.Fprintln(os.Stderr, "usage: go_consumer VERSION HTTP HTTPS CA WRONG_CA AK SK")
		os.Exit(2)
	}
	version, httpURL, httpsURL, ca, wrongCA, ak, sk := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5],
		os.Args[6], os.Args[7]
	ctx := context.Background()
	check(sluice.Version() == version && sluice.BindingVersion == version, "library %s, package %s, want %s",
		sluice.Version(), sluice.BindingVersion, version)

	c, err := sluice.NewClient(sluice.Options{Endpoint: httpURL, AccessKey: ak, SecretKey: sk, HTTPOnly: true,
		Timeout: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	if err := c.CreateBucket("go-consumer"); err != nil {
		panic(err)
	}
	data := make([]byte, 32<<20)
	for i := range data {
		data[i] = byte(i*37 + i>>10)
	}
	if _, err := c.Put(ctx, "go-consumer", "blob", data); err != nil {
		panic(err)
	}
	buf := bytes.Repeat([]byte{0xee}, 5000+64)
	n, _, err := c.GetRange(ctx, "go-consumer", "blob", 1000, 5000, buf[:5000])
	check(err == nil && n == 5000 && bytes.Equal(buf[:5000], data[1000:6000]), "ranged GET: %d bytes, %v", n, err)

	// bad input
	_, _, err = c.GetRange(ctx, "go-consumer", "blob", 0, 5001, buf[:5000])
	check(errors.Is(err, sluice.ErrBufferTooSmall), "buffer too small: %v", err)
	_, _, err = c.GetRange(ctx, "go-consumer", "blob", -1, 10, buf[:5000])
	check(errors.Is(err, sluice.ErrRange), "negative offset: %v", err)
	_, _, err = c.GetRange(ctx, "go-consumer", "blob", int64(len(data))-10, 11, buf[:5000])
	check(errors.Is(err, sluice.ErrRange), "length past the object: %v", err)
	_, _, err = c.Get(ctx, "go-consumer", "blob", buf[:5000])
	check(errors.Is(err, sluice.ErrBufferTooSmall), "whole object into a small buffer: %v", err)
	check(bytes.Equal(buf[5000:], bytes.Repeat([]byte{0xee}, 64)), "nothing written past the buffer")
	var typed *sluice.Error
	check(errors.As(err, &typed) && typed.StatusName == "SLUICE_ERR_BUFFER_TOO_SMALL", "a *sluice.Error: %+v", typed)

	// cancelled mid-transfer: 32 MiB through a proxy at 16 MiB/s takes 2 s; cancel after 300 ms
	slowURL, stop := throttle(strings.TrimPrefix(httpURL, "http://"), 16<<20)
	slow, err := sluice.NewClient(sluice.Options{Endpoint: slowURL, AccessKey: ak, SecretKey: sk, HTTPOnly: true,
		PartsInFlight: 1})
	if err != nil {
		panic(err)
	}
	whole := make([]byte, len(data))
	cctx, cancel := context.WithCancel(ctx)
	start := time.Now()
	time.AfterFunc(300*time.Millisecond, cancel)
	_, _, err = slow.Get(cctx, "go-consumer", "blob", whole)
	elapsed := time.Since(start)
	check(errors.Is(err, context.Canceled) && errors.Is(err, sluice.ErrCancelled),
		"GET cancelled by its context: %v", err)
	check(elapsed > 250*time.Millisecond && elapsed < 1500*time.Millisecond,
		"cancelled mid-transfer, returned after %v (the whole transfer takes about 2 s)", elapsed)
	dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, _, err = slow.Get(dctx, "go-consumer", "blob", whole)
	dcancel()
	check(errors.Is(err, context.DeadlineExceeded), "GET past its context's deadline: %v", err)
	n, _, err = slow.GetRange(ctx, "go-consumer", "blob", 0, 1<<20, whole) // the client goes on
	check(err == nil && n == 1<<20 && bytes.Equal(whole[:n], data[:n]), "the same client after: %d, %v", n, err)
	slow.Close()
	stop()

	c.Close()
	_, _, err = c.GetRange(ctx, "go-consumer", "blob", 0, 10, buf)
	check(errors.Is(err, sluice.ErrClosed), "closed client: %v", err)

	// HTTPS with the private CA, and with the wrong one
	s, err := sluice.NewClient(sluice.Options{Endpoint: httpsURL, AccessKey: ak, SecretKey: sk, HTTPOnly: true,
		CABundle: ca, Timeout: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	n, _, err = s.GetRange(ctx, "go-consumer", "blob", int64(len(data))-100, 0, buf)
	check(err == nil && n == 100 && bytes.Equal(buf[:100], data[len(data)-100:]), "ranged GET over HTTPS: %d, %v", n, err)
	s.Close()
	w, err := sluice.NewClient(sluice.Options{Endpoint: httpsURL, AccessKey: ak, SecretKey: sk, HTTPOnly: true,
		CABundle: wrongCA})
	if err != nil {
		panic(err)
	}
	_, _, err = w.GetRange(ctx, "go-consumer", "blob", 0, 100, buf)
	check(errors.Is(err, sluice.ErrTLS), "wrong CA: %v", err)
	w.Close()

	if failures > 0 {
		fmt.Printf("go_consumer: %d FAILED\n", failures)
		os.Exit(1)
	}
	fmt.Println("go_consumer: passed")
}
