package window

import (
	"testing"
	"time"
)

// TestSharedExportImport: a replica's exported buckets, imported by
// another, merge into the same totals; touched buckets that age out
// unexported are counted.
func TestSharedExportImport(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := NewShared[Moments](time.Second, 10, nil)
	b := NewShared[Moments](time.Second, 10, nil)
	for i := range 5 {
		a.Bucket(t0.Add(time.Duration(i) * time.Second)).Add(1)
		b.Bucket(t0.Add(time.Duration(i) * time.Second)).Add(2)
	}
	enc, err := a.Export()
	if err != nil || len(enc) != 5 {
		t.Fatalf("export: %d buckets, %v", len(enc), err)
	}
	if again, _ := a.Export(); len(again) != 0 {
		t.Errorf("a second export repeats %d buckets", len(again))
	}
	for _, e := range enc {
		if err := b.Import("a", e); err != nil {
			t.Fatal(err)
		}
		if err := b.Import("a", e); err != nil { // re-imports replace, never add
			t.Fatal(err)
		}
	}
	m, err := b.Merged()
	if err != nil {
		t.Fatal(err)
	}
	all, _ := m.Range(t0, t0.Add(5*time.Second))
	if all.Count() != 10 || all.Mean() != 1.5 {
		t.Errorf("merged: %d values, mean %v; want 10, 1.5", all.Count(), all.Mean())
	}
	// b never exports; 20 more seconds push its touched buckets out.
	b.Bucket(t0.Add(25 * time.Second)).Add(1)
	if d := b.Dropped(); d != 5 {
		t.Errorf("dropped = %d, want the 5 unexported buckets", d)
	}
}
