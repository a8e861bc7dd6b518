package matrix

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// TestRelay: bytes go both ways through the relay; Cut breaks the open
// connection and refuses new ones; Restore serves the same address again.
func TestRelay(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	r, err := newRelay(echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	roundTrip := func(c net.Conn) error {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil && line != "ping\n" {
			t.Errorf("echo: got %q", line)
		}
		return err
	}
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c); err != nil {
		t.Fatalf("through the relay: %v", err)
	}

	r.Cut()
	if !r.IsCut() {
		t.Error("IsCut false after Cut")
	}
	if err := roundTrip(c); err == nil {
		t.Error("an open connection still works after Cut")
	}
	if c2, err := net.Dial("tcp", r.Addr()); err == nil {
		c2.Close()
		t.Error("a new connection was accepted while cut")
	}
	r.Cut() // twice: nothing more

	if err := r.Restore(); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if r.IsCut() {
		t.Error("IsCut true after Restore")
	}
	c3, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatalf("dial after Restore: %v", err)
	}
	defer c3.Close()
	if err := roundTrip(c3); err != nil {
		t.Fatalf("through the restored relay: %v", err)
	}
	if err := r.Restore(); err != nil { // not cut: nothing to do
		t.Errorf("Restore of a relay that is not cut: %v", err)
	}
}
