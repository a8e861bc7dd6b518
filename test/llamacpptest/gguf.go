// Package llamacpptest runs a real inference engine, llama.cpp through the
// npm package node-llama-cpp, behind a small vLLM-compatible HTTP server
// (test/llamacpp/server.mjs), on tiny random-weight llama models that it
// writes itself: the same weights at f32, q8_0 and q4_0, so that tests see
// real per-token probabilities and real quantization divergence offline.
package llamacpptest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// The model's shape: small enough that two CPU cores evaluate a 64-token
// prompt in milliseconds, large enough that every 2-D weight matrix has
// rows of whole 32-value quantization blocks.
const (
	nEmbd    = 64
	nLayer   = 2
	nHead    = 4
	nFF      = 128
	nCtx     = 1024
	normEps  = 1e-5
	ropeBase = 10000
)

// Special token ids of the vocabulary (SentencePiece's usual layout).
const (
	UnkID = 0
	BOSID = 1
	EOSID = 2
)

// Models are the paths of the three GGUF files WriteModels writes: the same
// random weights at three precisions.
type Models struct {
	Dir  string // the directory holding the files
	F32  string // tiny-f32.gguf, the full-precision reference
	Q8_0 string // tiny-q8_0.gguf: layer matrices, embedding and output in q8_0
	Q4_0 string // tiny-q4_0.gguf: layer matrices, embedding and output in q4_0
	// VocabSize is the number of tokens, byte fallbacks included.
	VocabSize int
}

// WriteModels writes tiny-f32.gguf, tiny-q8_0.gguf and tiny-q4_0.gguf into
// dir: a two-layer llama (n_embd 64) with a SentencePiece-style vocabulary
// (byte fallback plus a few hundred word pieces), whose random weights are
// a deterministic function of seed. The quantized files hold every 2-D
// matrix in ggml's q8_0 or q4_0 blocks, made by ggml's reference
// quantizers; norms stay f32. It takes a few milliseconds.
func WriteModels(dir string, seed uint64) (Models, error) {
	vocab := buildVocab()
	weights := randomWeights(seed, len(vocab.tokens))
	m := Models{
		Dir:       dir,
		F32:       filepath.Join(dir, "tiny-f32.gguf"),
		Q8_0:      filepath.Join(dir, "tiny-q8_0.gguf"),
		Q4_0:      filepath.Join(dir, "tiny-q4_0.gguf"),
		VocabSize: len(vocab.tokens),
	}
	for _, f := range []struct {
		path string
		typ  ggmlType
	}{{m.F32, typeF32}, {m.Q8_0, typeQ8_0}, {m.Q4_0, typeQ4_0}} {
		if err := writeGGUF(f.path, vocab, weights, f.typ); err != nil {
			return Models{}, fmt.Errorf("write %s: %w", filepath.Base(f.path), err)
		}
	}
	return m, nil
}

// ---- vocabulary ----

type vocab struct {
	tokens []string
	scores []float32
	types  []int32
}

// SentencePiece token types as llama.cpp reads tokenizer.ggml.token_type.
const (
	tokNormal  = 1
	tokUnknown = 2
	tokControl = 3
	tokByte    = 6
)

// words become "▁word" pieces, each with every prefix ("▁w", "▁wo", ...),
// because llama.cpp's SentencePiece tokenizer only reaches a piece by
// merging adjacent pieces that are themselves in the vocabulary.
var words = strings.Fields(`the of and to in is it that was for on are as with
his they at be this from have or by one had not but what all were when we there
can an your which their said if do will each about how up out them then she many
some so these would other into has more her two like him see time could no make
than first been its who now people my made over did down only way find use may
water long little very after words called just where most know model token hello
world yes`)

func buildVocab() vocab {
	var v vocab
	add := func(s string, score float32, typ int32) {
		v.tokens = append(v.tokens, s)
		v.scores = append(v.scores, score)
		v.types = append(v.types, typ)
	}
	add("<unk>", 0, tokUnknown)
	add("<s>", 0, tokControl)
	add("</s>", 0, tokControl)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 0, tokByte)
	}
	seen := map[string]bool{}
	piece := func(s string) {
		if seen[s] {
			return
		}
		seen[s] = true
		// Longer pieces score higher, so that merging prefers whole words.
		add(s, -1000+float32(len([]rune(s)))*10-float32(len(v.tokens))/1000, tokNormal)
	}
	piece("▁")
	for c := 'a'; c <= 'z'; c++ {
		piece(string(c))
	}
	for _, p := range []string{".", ",", "?", "!", "'", ":", "0", "1", "2", "3"} {
		piece(p)
	}
	for _, w := range words {
		r := []rune("▁" + w)
		for n := 2; n <= len(r); n++ {
			piece(string(r[:n]))
		}
	}
	return v
}

// ---- weights ----

// tensor is one named weight in ggml's dimension order: ne[0] is the row
// length (the contiguous dimension).
type tensor struct {
	name string
	ne   []uint64
	data []float32
}

// rng is splitmix64, so that a seed gives the same weights on every Go
// version (math/rand/v2 does not promise its NormFloat64 stays the same).
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func (r *rng) float() float64 { return (float64(r.next()>>11) + 0.5) / (1 << 53) }

// norm returns a standard normal value (Box–Muller).
func (r *rng) norm() float64 {
	return math.Sqrt(-2*math.Log(r.float())) * math.Cos(2*math.Pi*r.float())
}

// Weight scales. outputStd sets the spread of the logits (the final norm
// makes the hidden state's RMS 1): 2 nats over ~530 tokens gives top-1
// probabilities of mostly 0.05–0.5 (mean ≈ 0.15), and with it llama.cpp's
// full-vocabulary KL against f32 of ≈ 0.002 nats for q8_0 and ≈ 0.3 for
// q4_0, the order real models show.
const (
	embdStd   = 1.0
	outputStd = 2.0
)

func randomWeights(seed uint64, nVocab int) []tensor {
	r := &rng{s: seed}
	mat := func(name string, cols, rows int, std float64) tensor {
		d := make([]float32, cols*rows)
		for i := range d {
			d[i] = float32(r.norm() * std)
		}
		return tensor{name, []uint64{uint64(cols), uint64(rows)}, d}
	}
	norm := func(name string) tensor {
		d := make([]float32, nEmbd)
		for i := range d {
			d[i] = float32(1 + 0.1*r.norm())
		}
		return tensor{name, []uint64{nEmbd}, d}
	}
	in := 1 / math.Sqrt(nEmbd)
	ts := []tensor{mat("token_embd.weight", nEmbd, nVocab, embdStd)}
	for l := range nLayer {
		p := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			norm(p+"attn_norm.weight"),
			mat(p+"attn_q.weight", nEmbd, nEmbd, 2*in),
			mat(p+"attn_k.weight", nEmbd, nEmbd, 2*in),
			mat(p+"attn_v.weight", nEmbd, nEmbd, in),
			mat(p+"attn_output.weight", nEmbd, nEmbd, in),
			norm(p+"ffn_norm.weight"),
			mat(p+"ffn_gate.weight", nEmbd, nFF, 2*in),
			mat(p+"ffn_up.weight", nEmbd, nFF, in),
			mat(p+"ffn_down.weight", nFF, nEmbd, 1/math.Sqrt(nFF)),
		)
	}
	ts = append(ts, norm("output_norm.weight"), mat("output.weight", nEmbd, nVocab, outputStd*in))
	return ts
}

// ---- ggml quantization ----

type ggmlType uint32

// ggml's type ids as GGUF stores them.
const (
	typeF32  ggmlType = 0
	typeQ4_0 ggmlType = 2
	typeQ8_0 ggmlType = 8
)

const qk = 32 // values per q8_0 / q4_0 block

// fileType is general.file_type (llama_ftype) for a file whose matrices
// are of type t.
func fileType(t ggmlType) uint32 {
	switch t {
	case typeQ4_0:
		return 2 // LLAMA_FTYPE_MOSTLY_Q4_0
	case typeQ8_0:
		return 7 // LLAMA_FTYPE_MOSTLY_Q8_0
	}
	return 0 // LLAMA_FTYPE_ALL_F32
}

// encode returns the bytes of data stored as t.
func encode(data []float32, t ggmlType) []byte {
	switch t {
	case typeQ8_0:
		return quantizeQ8_0(data)
	case typeQ4_0:
		return quantizeQ4_0(data)
	}
	out := make([]byte, 4*len(data))
	for i, x := range data {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

// quantizeQ8_0 follows ggml's quantize_row_q8_0_ref: per block of 32, an
// fp16 scale d = max|x|/127 and 32 int8 values round(x/d).
func quantizeQ8_0(x []float32) []byte {
	out := make([]byte, 0, len(x)/qk*(2+qk))
	for b := 0; b < len(x); b += qk {
		blk := x[b : b+qk]
		var amax float32
		for _, v := range blk {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		out = binary.LittleEndian.AppendUint16(out, fp16(d))
		for _, v := range blk {
			out = append(out, byte(int8(roundf(v*id))))
		}
	}
	return out
}

// quantizeQ4_0 follows ggml's quantize_row_q4_0_ref: per block of 32, an
// fp16 scale d = max/-8, where max is the value of largest magnitude with
// its sign, and 4-bit values q = min(15, int8(x/d + 8.5)) that decode as
// (q-8)*d; byte j holds value j in its low nibble and value j+16 in its
// high nibble.
func quantizeQ4_0(x []float32) []byte {
	out := make([]byte, 0, len(x)/qk*(2+qk/2))
	for b := 0; b < len(x); b += qk {
		blk := x[b : b+qk]
		var amax, vmax float32
		for _, v := range blk {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax, vmax = a, v
			}
		}
		d := vmax / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		out = binary.LittleEndian.AppendUint16(out, fp16(d))
		for j := range qk / 2 {
			q0 := min(15, int8(float32(blk[j]*id)+8.5)) // no FMA: ggml rounds the product first
			q1 := min(15, int8(float32(blk[j+qk/2]*id)+8.5))
			out = append(out, byte(q0)|byte(q1)<<4)
		}
	}
	return out
}

// roundf rounds half away from zero, like C's roundf.
func roundf(x float32) float32 { return float32(math.Round(float64(x))) }

// fp16 converts f to IEEE 754 binary16, rounding to nearest even (what
// ggml's GGML_FP32_TO_FP16 does on the CPUs llama.cpp targets).
func fp16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case b&0x7fffffff == 0:
		return sign
	case b>>23&0xff == 0xff: // inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp >= 0x1f:
		return sign | 0x7c00
	case exp <= 0: // subnormal half (or zero)
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		h := mant >> shift
		rem := mant & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
		h++ // may carry into the exponent, which is still correct
	}
	return sign | uint16(h)
}

// ---- GGUF v3 ----

// GGUF metadata value types.
const (
	ggufUint32  = 4
	ggufInt32   = 5
	ggufFloat32 = 6
	ggufBool    = 7
	ggufString  = 8
	ggufArray   = 9
)

const ggufAlignment = 32

// ggufWriter appends little-endian GGUF values to a buffer.
type ggufWriter struct{ b []byte }

func (w *ggufWriter) u32(v uint32)  { w.b = binary.LittleEndian.AppendUint32(w.b, v) }
func (w *ggufWriter) u64(v uint64)  { w.b = binary.LittleEndian.AppendUint64(w.b, v) }
func (w *ggufWriter) f32(v float32) { w.u32(math.Float32bits(v)) }
func (w *ggufWriter) str(s string)  { w.u64(uint64(len(s))); w.b = append(w.b, s...) }

func (w *ggufWriter) kv(key string, v any) {
	w.str(key)
	switch v := v.(type) {
	case uint32:
		w.u32(ggufUint32)
		w.u32(v)
	case float32:
		w.u32(ggufFloat32)
		w.f32(v)
	case bool:
		w.u32(ggufBool)
		if v {
			w.b = append(w.b, 1)
		} else {
			w.b = append(w.b, 0)
		}
	case string:
		w.u32(ggufString)
		w.str(v)
	case []string:
		w.u32(ggufArray)
		w.u32(ggufString)
		w.u64(uint64(len(v)))
		for _, s := range v {
			w.str(s)
		}
	case []float32:
		w.u32(ggufArray)
		w.u32(ggufFloat32)
		w.u64(uint64(len(v)))
		for _, x := range v {
			w.f32(x)
		}
	case []int32:
		w.u32(ggufArray)
		w.u32(ggufInt32)
		w.u64(uint64(len(v)))
		for _, x := range v {
			w.u32(uint32(x))
		}
	default:
		panic(fmt.Sprintf("gguf: unsupported value %T for %s", v, key))
	}
}

func (w *ggufWriter) pad() {
	for len(w.b)%ggufAlignment != 0 {
		w.b = append(w.b, 0)
	}
}

func writeGGUF(path string, v vocab, weights []tensor, quant ggmlType) error {
	type kv struct {
		k string
		v any
	}
	name := map[ggmlType]string{typeF32: "f32", typeQ8_0: "q8_0", typeQ4_0: "q4_0"}[quant]
	kvs := []kv{
		{"general.architecture", "llama"},
		{"general.name", "vigil-tiny-" + name},
		{"general.file_type", fileType(quant)},
		{"general.alignment", uint32(ggufAlignment)},
		{"llama.context_length", uint32(nCtx)},
		{"llama.embedding_length", uint32(nEmbd)},
		{"llama.block_count", uint32(nLayer)},
		{"llama.feed_forward_length", uint32(nFF)},
		{"llama.attention.head_count", uint32(nHead)},
		{"llama.attention.head_count_kv", uint32(nHead)},
		{"llama.rope.dimension_count", uint32(nEmbd / nHead)},
		{"llama.rope.freq_base", float32(ropeBase)},
		{"llama.attention.layer_norm_rms_epsilon", float32(normEps)},
		{"llama.vocab_size", uint32(len(v.tokens))},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", v.tokens},
		{"tokenizer.ggml.scores", v.scores},
		{"tokenizer.ggml.token_type", v.types},
		{"tokenizer.ggml.unknown_token_id", uint32(UnkID)},
		{"tokenizer.ggml.bos_token_id", uint32(BOSID)},
		{"tokenizer.ggml.eos_token_id", uint32(EOSID)},
		{"tokenizer.ggml.add_bos_token", true},
		{"tokenizer.ggml.add_eos_token", false},
	}

	var h ggufWriter
	h.b = append(h.b, "GGUF"...)
	h.u32(3)
	h.u64(uint64(len(weights)))
	h.u64(uint64(len(kvs)))
	for _, e := range kvs {
		h.kv(e.k, e.v)
	}
	datas := make([][]byte, len(weights))
	var offset uint64
	for i, t := range weights {
		typ := typeF32
		if len(t.ne) == 2 {
			typ = quant
		}
		datas[i] = encode(t.data, typ)
		h.str(t.name)
		h.u32(uint32(len(t.ne)))
		for _, n := range t.ne {
			h.u64(n)
		}
		h.u32(uint32(typ))
		h.u64(offset)
		offset += uint64(len(datas[i]))
		offset = (offset + ggufAlignment - 1) / ggufAlignment * ggufAlignment
	}
	h.pad()

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	_, err = bw.Write(h.b)
	for _, d := range datas {
		if err != nil {
			break
		}
		if _, err = bw.Write(d); err == nil {
			_, err = bw.Write(make([]byte, (ggufAlignment-len(d)%ggufAlignment)%ggufAlignment))
		}
	}
	if err == nil {
		err = bw.Flush()
	}
	return errors.Join(err, f.Close())
}
