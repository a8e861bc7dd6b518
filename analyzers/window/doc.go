// Package window holds bounded-memory, mergeable summaries of what a gateway
// sees, and a ring of time buckets to keep them in.
//
// The summaries are Moments (count, mean, variance, extremes), Sketch (a
// DDSketch quantile sketch), Reservoir (a uniform sample of vectors) and
// Counts (bounded categorical counts). Each has Add, Merge and Reset, and a
// compact binary encoding (MarshalBinary, UnmarshalBinary) so that gateway
// replicas can publish their buckets to a shared store and any of them can
// merge the lot into one picture.
//
// Merge is the point of the package, so it obeys the algebra that makes
// merging in any order safe:
//
//   - commutative: a.Merge(b) and b.Merge(a) leave equal summaries;
//   - associative: (a+b)+c equals a+(b+c);
//   - an empty summary is the identity.
//
// For Sketch, Reservoir and Counts these hold exactly (bit for bit, encoding
// for encoding), and merging equals adding every value to one summary. For
// Moments, Merge is exactly commutative, while associativity holds up to
// floating-point rounding of the mean and second moment (tested to 1e-12
// relative).
//
// Memory is bounded whatever the traffic: a Sketch keeps at most MaxBuckets
// buckets per sign, a Reservoir at most its capacity of rows, Counts at most
// its bound of categories, and a Series at most span buckets.
//
// None of the types is safe for concurrent use: each is owned by one
// goroutine, or its owner serializes access. Add paths do not allocate in
// steady state.
//
// # Encoding
//
// Every encoding starts with one version byte whose high nibble names the type
// (1 Moments, 2 Sketch, 3 Reservoir, 4 Counts) and whose low nibble is the
// format version, so that a blob decoded as the wrong type is rejected.
// Integers are unsigned or zig-zag varints; floats are 8-byte little-endian
// IEEE 754. UnmarshalBinary rejects truncated, trailing or inconsistent input
// with an error wrapping ErrCorrupt (or ErrVersion for an unknown version),
// and never panics.
package window
