package content

import "testing"

// TestReaderCapture: the Reader keeps the first characters of a prompt,
// its texts one a line, from the Reset after Capture on, and reuses its
// buffer.
func TestReaderCapture(t *testing.T) {
	var r Reader
	var d Doc
	r.Capture(13)
	for _, c := range []struct {
		texts []string
		want  string
	}{
		{[]string{"Hello, 世界", "bye"}, "Hello, 世界\nbye"},
		{[]string{"a much longer first text"}, "a much longer"},
	} {
		r.Reset(&d, false)
		for _, s := range c.texts {
			for _, ch := range s {
				r.Rune(ch)
			}
			r.Break()
		}
		r.Finish()
		if got := string(r.Text()); got != c.want {
			t.Errorf("kept %q, want %q", got, c.want)
		}
	}
	r.Capture(0)
	r.Reset(&d, false)
	r.Rune('x')
	if len(r.Text()) != 0 {
		t.Errorf("kept %q with Capture(0)", r.Text())
	}
	if n := testing.AllocsPerRun(100, func() {
		r.Capture(64)
		r.Reset(&d, false)
		for _, ch := range "the same short prompt" {
			r.Rune(ch)
		}
	}); n != 0 {
		t.Errorf("%v allocations per prompt once the buffer grew", n)
	}
}
