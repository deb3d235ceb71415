package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// netTool runs one network attack and returns the exit status: 0 when
// the attempt got through, 1 when it was stopped, 2 on bad usage.
//
//	net tcp HOST:PORT             dial directly; print what the peer sent
//	net udp HOST:PORT             send a datagram, wait for an answer
//	net dns NAME                  resolve with the container's resolver
//	net get URL [CAFILE]          GET through $HTTP(S)_PROXY; print status and body
//	net raw PROXY TEXT            send TEXT (\r \n unescaped) to PROXY; print the answer
//	net flood PROXY TARGET N      N concurrent CONNECTs; print counts by status
//	net serve ADDR TEXT           (host side) answer every TCP connection with TEXT
func netTool(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: net tcp|udp|dns|get|raw|flood|serve ...")
		return 2
	}
	switch args[0] {
	case "tcp":
		c, err := net.DialTimeout("tcp", args[1], 3*time.Second)
		if err != nil {
			fmt.Println("blocked:", err)
			return 1
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		b, _ := io.ReadAll(c)
		fmt.Printf("connected: %s\n", b)
		return 0
	case "udp":
		c, err := net.Dial("udp", args[1])
		if err != nil {
			fmt.Println("blocked:", err)
			return 1
		}
		defer c.Close()
		if _, err := c.Write([]byte("ping")); err != nil {
			fmt.Println("blocked:", err)
			return 1
		}
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		b := make([]byte, 512)
		n, err := c.Read(b)
		if err != nil {
			fmt.Println("blocked:", err)
			return 1
		}
		fmt.Printf("answered: %s\n", b[:n])
		return 0
	case "dns":
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, args[1])
		if err != nil {
			fmt.Println("blocked:", err)
			return 1
		}
		fmt.Println("resolved:", addrs)
		return 0
	case "get":
		tr := &http.Transport{Proxy: http.ProxyFromEnvironment}
		if len(args) > 2 {
			pem, err := os.ReadFile(args[2])
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(pem)
			tr.TLSClientConfig = &tls.Config{RootCAs: pool}
		}
		hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
		resp, err := hc.Get(args[1])
		if err != nil {
			fmt.Println("blocked:", err)
			return 1
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d %s\n", resp.StatusCode, b)
		if resp.StatusCode != 200 {
			return 1
		}
		return 0
	case "raw":
		if len(args) < 3 {
			return 2
		}
		c, err := net.DialTimeout("tcp", args[1], 3*time.Second)
		if err != nil {
			fmt.Println("blocked:", err)
			return 1
		}
		defer c.Close()
		text := strings.NewReplacer(`\r`, "\r", `\n`, "\n").Replace(args[2])
		if _, err := io.WriteString(c, text); err != nil {
			fmt.Println("blocked:", err)
			return 1
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		fmt.Printf("%s", b)
		return 0
	case "flood":
		if len(args) < 4 {
			return 2
		}
		n, _ := strconv.Atoi(args[3])
		var mu sync.Mutex
		counts := map[string]int{}
		var wg sync.WaitGroup
		conns := make(chan net.Conn, n)
		for range n {
			wg.Go(func() {
				status := "error"
				defer func() { mu.Lock(); counts[status]++; mu.Unlock() }()
				c, err := net.DialTimeout("tcp", args[1], 10*time.Second)
				if err != nil {
					return
				}
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := io.WriteString(c, "CONNECT "+args[2]+" HTTP/1.1\r\nHost: "+args[2]+"\r\n\r\n"); err != nil {
					c.Close()
					return
				}
				line, err := bufio.NewReader(c).ReadString('\n')
				if f := strings.Fields(line); err == nil && len(f) > 1 {
					status = f[1]
				}
				conns <- c // held open until every attempt is answered
			})
		}
		wg.Wait()
		close(conns)
		for c := range conns {
			c.Close()
		}
		fmt.Println(counts)
		return 0
	case "serve":
		if len(args) < 3 {
			return 2
		}
		ln, err := net.Listen("tcp", args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				return 1
			}
			_, _ = io.WriteString(c, args[2])
			c.Close()
		}
	}
	fmt.Fprintln(os.Stderr, "net: unknown attack", args[0])
	return 2
}
