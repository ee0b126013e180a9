package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/autonomic-kernel/autonomic/kernel/mcp"
)

// mcpCmd serves the operator API's reads as MCP tools (kernel/mcp) to an
// orchestrating agent: on stdio, or as streamable HTTP on a Unix socket
// that only this account can open. Every tool call is an API call made as
// the account that runs this command.
func mcpCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o := newOpFlags("mcp", stderr)
	listen := o.fs.String("listen", "", "serve streamable HTTP on this Unix socket (made 0600) instead of stdio")
	pos, err := o.parse(args)
	if err != nil || len(pos) != 0 {
		fmt.Fprintln(stderr, "usage: autonomic mcp [--socket PATH | --config FILE] [--listen UNIX_SOCKET]")
		return 2
	}
	c, err := o.client()
	if err != nil {
		return opFail(stderr, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv := mcp.New(c)
	if *listen == "" {
		err = srv.Run(ctx, &sdk.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}})
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
			fmt.Fprintln(stderr, "autonomic: mcp:", err)
			return 1
		}
		return 0
	}
	ln, err := listenPrivate(*listen)
	if err != nil {
		fmt.Fprintln(stderr, "autonomic: mcp:", err)
		return 1
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}()
	fmt.Fprintf(stderr, "autonomic: mcp serving streamable HTTP on %s\n", *listen)
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(stderr, "autonomic: mcp:", err)
		return 1
	}
	return 0
}

// listenPrivate binds a Unix socket only this account may connect to: the
// socket is made under a umask that leaves no group or other bits, so
// there is no moment at which another account could connect.
func listenPrivate(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		os.Remove(path)
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	return ln, nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
