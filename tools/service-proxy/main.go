// Command service-proxy is the local tier's STAND-IN for cluster DNS and kube-proxy: an HTTP
// forward proxy that sends a request for a Service name (broker-ingress.knative-eventing.svc.
// cluster.local, tenant-install.kubeopera-system.svc.cluster.local, ...) to the loopback port that
// serves it, keeping the Host header, and tunnels `CONNECT host:443` (a function asking a
// vCluster's API) to the port that serves that host, the TLS inside end to end.
//
// testbed/standins/service_proxy.py drives it, one JSON object a line each way:
//
//	stdin:  {"op": "route"|"suffix"|"tunnel"|"tunnel_suffix", "host": h, "address": a, "port": p, "seq": n}
//	        {"op": "tap", "seq": n}  (from now on, each hop carries its headers and bodies in full)
//	stdout: {"kind": "listening", "address": "127.0.0.1:port"}, once, first
//	        {"kind": "ack", "seq": n}, once the op applies to the next request
//	        {"kind": "begin"} when a forward starts, {"kind": "hop", ...} when it has been answered
//	        (a tunnel's hop when it closes)
//
// It exits when its stdin closes, so it never outlives the test bed process that started it.
// It replaces a Python proxy that cost about 1.1 ms of CPU a request in a burst (9% of the burst's
// CPU on two cores; this one 0.5 ms, bench/RESULTS.md 2026-12-07 19:07); in a cluster this
// forwarding is the kernel's and costs next to nothing.
//
// Forwarding keeps the Python proxy's rules: hop-by-hop headers (RFC 9110 section 7.6.1) are
// dropped, the body is sent whole with its length, no header is added (no User-Agent, no
// Accept-Encoding, no X-Forwarded-For), an unknown host is answered 502 with a message, and the
// exchange with the Service runs to its end even if the client gives up, so the hop records what
// the Service answered. A POST is never sent twice: Go's transport retries only a request it
// knows was not written, and idle connections are dropped (4 s) before gunicorn's keep-alive (5 s)
// closes them under a request.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	tunnelIdle    = 60 * time.Second
	answerTimeout = 900 * time.Second
)

// Headers of one hop only, never forwarded (Content-Length is set anew).
var hopByHop = map[string]bool{
	"connection": true, "proxy-connection": true, "keep-alive": true, "transfer-encoding": true,
	"te": true, "trailer": true, "upgrade": true, "proxy-authorization": true,
	"proxy-authenticate": true, "content-length": true,
}

// What a hop keeps of a request besides its ce-* headers, and of a response.
var keptRequest = map[string]bool{"traceparent": true, "prefer": true, "kn-namespace": true}
var keptResponse = map[string]bool{"retry-after": true}

// routes maps a host to "address:port": exact names first, then the first matching suffix.
type routes struct {
	mu       sync.RWMutex
	exact    map[string]string
	suffixes [][2]string
}

func normal(host string) string { return strings.TrimSuffix(strings.ToLower(host), ".") }

func (r *routes) add(host, target string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exact[normal(host)] = target
}

func (r *routes) addSuffix(suffix, target string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.suffixes = append(r.suffixes, [2]string{strings.ToLower(suffix), target})
}

func (r *routes) lookup(host string) (string, bool) {
	host = normal(host)
	r.mu.RLock()
	defer r.mu.RUnlock()
	if target, ok := r.exact[host]; ok {
		return target, true
	}
	for _, s := range r.suffixes {
		if strings.HasSuffix(host, s[0]) {
			return s[1], true
		}
	}
	return "", false
}

// hop is one answered request (or one closed tunnel), as the Python side's Hop reads it.
type hop struct {
	Kind     string            `json:"kind"`
	Started  float64           `json:"started"`
	Finished float64           `json:"finished"`
	Method   string            `json:"method"`
	Host     string            `json:"host"`
	Path     string            `json:"path"`
	Status   int               `json:"status"`
	Counted  bool              `json:"counted"` // a forward: it was announced by a "begin"
	Request  map[string]string `json:"request"`
	Response map[string]string `json:"response"`
	// With "tap" on, a forward that reached its Service carries the exchange in full.
	Target          string      `json:"target,omitempty"`
	RequestHeaders  [][2]string `json:"request_headers,omitempty"`
	RequestBody     []byte      `json:"request_body,omitempty"`
	ResponseHeaders [][2]string `json:"response_headers,omitempty"`
	ResponseBody    []byte      `json:"response_body,omitempty"`
}

// out writes one JSON line at a time to stdout.
type out struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (o *out) emit(v any) {
	line, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "service-proxy: cannot encode a record: %v\n", err)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(line)
	o.w.WriteByte('\n')
	if err := o.w.Flush(); err != nil {
		os.Exit(0) // the test bed is gone
	}
}

type proxy struct {
	routes    routes
	tunnels   routes
	tap       atomic.Bool
	out       *out
	transport *http.Transport
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	p.forward(w, r)
}

// kept is what a hop records of a header set: ce-* and the named ones, keys in lower case.
func kept(headers http.Header, named map[string]bool) map[string]string {
	result := map[string]string{}
	for key, values := range headers {
		lower := strings.ToLower(key)
		if (strings.HasPrefix(lower, "ce-") || named[lower]) && len(values) > 0 {
			result[lower] = values[0]
		}
	}
	return result
}

// endToEnd is a header set without its hop-by-hop headers.
func endToEnd(headers http.Header) http.Header {
	result := http.Header{}
	for key, values := range headers {
		if !hopByHop[strings.ToLower(key)] {
			result[key] = values
		}
	}
	return result
}

func pairs(headers http.Header) [][2]string {
	result := [][2]string{}
	for key, values := range headers {
		for _, value := range values {
			result = append(result, [2]string{key, value})
		}
	}
	return result
}

func (p *proxy) forward(w http.ResponseWriter, r *http.Request) {
	started := now()
	host := r.URL.Hostname()
	if host == "" {
		host, _, _ = strings.Cut(r.Host, ":")
	}
	path := r.URL.RequestURI()
	body, readErr := io.ReadAll(r.Body) // the server has undone a chunked encoding
	headers := endToEnd(r.Header)
	p.out.emit(map[string]string{"kind": "begin"})
	record := hop{Kind: "hop", Method: r.Method, Host: strings.ToLower(host), Path: path, Status: http.StatusBadGateway,
		Counted: true, Request: kept(headers, keptRequest), Response: map[string]string{}}
	var replyHeaders http.Header
	var data []byte
	target, found := p.routes.lookup(host)
	switch {
	case readErr != nil:
		data = []byte(fmt.Sprintf("service proxy: reading the request: %v\n", readErr))
	case !found:
		data = []byte(fmt.Sprintf("service proxy: no Service answers for '%s'\n", host))
	default:
		record.Status, replyHeaders, data = p.exchange(r, target, path, headers, body)
		record.Response = kept(replyHeaders, keptResponse)
		if p.tap.Load() {
			record.Target = target
			record.RequestHeaders = append([][2]string{{"Host", r.Host}}, pairs(headers)...)
			record.RequestBody = body
			record.ResponseHeaders = pairs(replyHeaders)
			record.ResponseBody = data
		}
	}
	answer := w.Header()
	for key, values := range endToEnd(replyHeaders) {
		answer[key] = values
	}
	answer["Date"] = nil // nothing the Service did not say
	if replyHeaders == nil {
		answer.Set("Content-Type", "text/plain; charset=utf-8")
	} else if _, ok := replyHeaders["Content-Type"]; !ok {
		answer["Content-Type"] = nil // no sniffing either
	}
	answer.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(record.Status)
	if r.Method != http.MethodHead {
		w.Write(data) // a client that gave up is its own business; the hop is recorded all the same
	}
	http.NewResponseController(w).Flush() // the answer goes out before the record, as it would on the wire
	record.Started, record.Finished = started, now()
	p.out.emit(record)
}

// exchange sends the request to the Service and reads its whole answer; 502 and a message when
// the Service cannot be reached or breaks off.
func (p *proxy) exchange(r *http.Request, target, path string, headers http.Header, body []byte) (int, http.Header, []byte) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), answerTimeout)
	defer cancel()
	failed := func(err error) (int, http.Header, []byte) {
		return http.StatusBadGateway, nil, []byte(fmt.Sprintf("service proxy: %s: %v\n", target, err))
	}
	outgoing, err := http.NewRequestWithContext(ctx, r.Method, "http://"+target+path, bytes.NewReader(body))
	if err != nil {
		return failed(err)
	}
	outgoing.Host = r.Host
	outgoing.Header = headers.Clone()
	if _, ok := outgoing.Header["User-Agent"]; !ok {
		outgoing.Header["User-Agent"] = []string{""} // none, as the client sent none
	}
	response, err := p.transport.RoundTrip(outgoing)
	if err != nil {
		return failed(err)
	}
	defer response.Body.Close()
	data, err := io.ReadAll(response.Body)
	if err != nil {
		return failed(err)
	}
	return response.StatusCode, response.Header, data
}

// tunnel answers CONNECT host:port with a byte tunnel to where the tunnel routes map the host.
func (p *proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	started := now()
	host := r.Host
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		host = h
	}
	record := hop{Kind: "hop", Method: "CONNECT", Host: strings.ToLower(host), Status: http.StatusBadGateway,
		Request: map[string]string{}, Response: map[string]string{}}
	defer func() {
		record.Started, record.Finished = started, now()
		p.out.emit(record)
	}()
	var upstream net.Conn
	if target, ok := p.tunnels.lookup(host); ok {
		upstream, _ = net.DialTimeout("tcp", target, 10*time.Second)
	}
	if upstream == nil {
		http.Error(w, fmt.Sprintf("service proxy: no Service answers for '%s'", host), http.StatusBadGateway)
		return
	}
	defer upstream.Close()
	client, buffered, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "service proxy: cannot take over the connection", http.StatusInternalServerError)
		return
	}
	defer client.Close()
	record.Status = http.StatusOK
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		return
	}
	if n := buffered.Reader.Buffered(); n > 0 { // what the client sent right after its CONNECT
		early, _ := buffered.Reader.Peek(n)
		if _, err := upstream.Write(early); err != nil {
			return
		}
	}
	relay(client, upstream)
}

// relay copies bytes both ways until either side closes, or nothing moves either way for
// tunnelIdle.
func relay(a, b net.Conn) {
	var moved atomic.Int64
	moved.Store(time.Now().UnixNano())
	done := make(chan struct{}, 2)
	copyOne := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 64*1024)
		for {
			src.SetReadDeadline(time.Now().Add(tunnelIdle))
			n, err := src.Read(buf)
			if n > 0 {
				moved.Store(time.Now().UnixNano())
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				if e, ok := err.(net.Error); ok && e.Timeout() && time.Since(time.Unix(0, moved.Load())) < tunnelIdle {
					continue // the other way is busy: the tunnel is not idle
				}
				return
			}
		}
	}
	go copyOne(a, b)
	go copyOne(b, a)
	<-done
	a.Close() // the other way's Read returns at once (closing again later is harmless)
	b.Close()
	<-done
}

type op struct {
	Op      string `json:"op"`
	Host    string `json:"host"`
	Address string `json:"address"`
	Port    int    `json:"port"`
	Seq     int    `json:"seq"`
}

// control applies the ops that come on stdin, and ends the process when stdin closes.
func (p *proxy) control(input io.Reader) {
	scanner := bufio.NewScanner(input)
	for scanner.Scan() {
		var o op
		if err := json.Unmarshal(scanner.Bytes(), &o); err != nil {
			fmt.Fprintf(os.Stderr, "service-proxy: not an op: %q: %v\n", scanner.Text(), err)
			continue
		}
		target := net.JoinHostPort(o.Address, strconv.Itoa(o.Port))
		switch o.Op {
		case "route":
			p.routes.add(o.Host, target)
		case "suffix":
			p.routes.addSuffix(o.Host, target)
		case "tunnel":
			p.tunnels.add(o.Host, target)
		case "tunnel_suffix":
			p.tunnels.addSuffix(o.Host, target)
		case "tap":
			p.tap.Store(true)
		default:
			fmt.Fprintf(os.Stderr, "service-proxy: unknown op %q\n", o.Op)
		}
		p.out.emit(map[string]any{"kind": "ack", "seq": o.Seq})
	}
	os.Exit(0)
}

func main() {
	port := "0"
	if len(os.Args) > 1 {
		port = os.Args[1]
	}
	listener, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		fmt.Fprintf(os.Stderr, "service-proxy: %v\n", err)
		os.Exit(1)
	}
	p := &proxy{
		routes:  routes{exact: map[string]string{}},
		tunnels: routes{exact: map[string]string{}},
		out:     &out{w: bufio.NewWriterSize(os.Stdout, 64*1024)},
		transport: &http.Transport{
			Proxy:                 nil, // the Services are on loopback: never through another proxy
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       4 * time.Second,
			ResponseHeaderTimeout: answerTimeout,
			DisableCompression:    true,
		},
	}
	p.out.emit(map[string]string{"kind": "listening", "address": listener.Addr().String()})
	go p.control(os.Stdin)
	server := &http.Server{Handler: p}
	if err := server.Serve(listener); err != nil {
		fmt.Fprintf(os.Stderr, "service-proxy: %v\n", err)
		os.Exit(1)
	}
}
