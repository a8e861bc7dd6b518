package affinity

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/vigil-gw/vigil/exchange"
)

func mustHasher(tb testing.TB, hash string) *Hasher {
	tb.Helper()
	h, err := NewHasher(Options{BlockChars: 64, MaxChars: 64 * MaxBlocks, Hash: hash})
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// chat builds a chat request body from role/content pairs.
func chat(tools string, msgs ...string) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[`)
	for i := 0; i+1 < len(msgs); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		c, _ := json.Marshal(msgs[i+1])
		fmt.Fprintf(&b, `{"role":%q,"content":%s}`, msgs[i], c)
	}
	b.WriteString(`]`)
	if tools != "" {
		b.WriteString(`,"tools":` + tools)
	}
	b.WriteString(`}`)
	return []byte(b.String())
}

func compute(t *testing.T, h *Hasher, op exchange.Operation, body []byte, session string) Key {
	t.Helper()
	var k Key
	if !h.Compute(&k, op, body, session) {
		t.Fatalf("Compute(%s) failed on %s", op, body)
	}
	return k
}

// common returns the number of leading blocks two chains share.
func common(a, b *Key) int {
	n := 0
	for n < a.N && n < b.N && a.Blocks[n] == b.Blocks[n] {
		n++
	}
	return n
}

var (
	system = strings.Repeat("You are a careful assistant for the ACME support desk. ", 20) // ~1.1 KB
	turn1  = strings.Repeat("My printer shows error 42 whenever I print. ", 8)
	turn2  = strings.Repeat("It still fails after a restart, what next? ", 8)
	answer = strings.Repeat("Try unplugging it for thirty seconds. ", 8)
)

func TestChain(t *testing.T) {
	for _, hash := range []string{HashXXH, HashFNV} {
		t.Run(hash, func(t *testing.T) {
			h := mustHasher(t, hash)
			base := compute(t, h, exchange.OpChat, chat("", "system", system, "user", turn1), "")
			if base.N == 0 || base.N != base.Chars/64 {
				t.Fatalf("N %d for %d chars", base.N, base.Chars)
			}
			same := compute(t, h, exchange.OpChat, chat("", "system", system, "user", turn1), "")
			if common(&base, &same) != base.N || same.N != base.N {
				t.Error("the same request hashed differently")
			}
			// Another model, member order and white space: the same prompt.
			moved := compute(t, h, exchange.OpChat, []byte(`{ "messages" : [ {"content":`+quote(system)+`, "role":"system"}, {"role":"user","content":`+quote(turn1)+`} ], "model":"other"}`), "")
			if common(&base, &moved) != base.N {
				t.Errorf("reordered members share %d of %d blocks", common(&base, &moved), base.N)
			}
			// A changed first message changes every block after it.
			early := compute(t, h, exchange.OpChat, chat("", "system", "Z"+system[1:], "user", turn1), "")
			if n := common(&base, &early); n != 0 {
				t.Errorf("changed first byte: %d blocks still shared", n)
			}
			for i := 0; i < min(base.N, early.N); i++ {
				if base.Blocks[i] == early.Blocks[i] {
					t.Errorf("block %d unchanged after the first message changed", i)
				}
			}
			// A changed last message leaves the blocks before it.
			late := compute(t, h, exchange.OpChat, chat("", "system", system, "user", turn2), "")
			full := (len(system) + 2 + len("system") + 1) / 64 // blocks wholly within the system message
			if n := common(&base, &late); n < full || n == base.N {
				t.Errorf("changed last message: %d blocks shared, want >= %d and < %d", n, full, base.N)
			}
			// Text moved across the message boundary changes the hash.
			shifted := compute(t, h, exchange.OpChat, chat("", "system", system+turn1[:10], "user", turn1[10:]), "")
			if common(&base, &shifted) == base.N {
				t.Error("moving text across a message boundary left the chain as it was")
			}
			// An affinity key changes every block.
			keyed := compute(t, h, exchange.OpChat, chat("", "system", system, "user", turn1), "session-1")
			if n := common(&base, &keyed); n != 0 || !keyed.Affinity || keyed.Anchor == base.Anchor {
				t.Errorf("session key: %d blocks shared, affinity %v", n, keyed.Affinity)
			}
			other := compute(t, h, exchange.OpChat, chat("", "system", system, "user", turn1), "session-2")
			if common(&keyed, &other) != 0 || other.Anchor == keyed.Anchor {
				t.Error("two session keys share blocks or an anchor")
			}
			body := chat("", "system", system, "user", turn1)
			body = append([]byte(`{"prompt_cache_key":"session-1",`), body[1:]...)
			cacheKey := compute(t, h, exchange.OpChat, body, "")
			if common(&keyed, &cacheKey) != keyed.N || cacheKey.Anchor != keyed.Anchor {
				t.Error("prompt_cache_key and the session header with the same key differ")
			}
		})
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestAnchor: all turns of a conversation, and every user of a system
// prompt, share the anchor; other system prompts or tools do not.
func TestAnchor(t *testing.T) {
	h := mustHasher(t, HashXXH)
	tools := `[{"type":"function","function":{"name":"lookup","parameters":{}}}]`
	anchor := func(op exchange.Operation, body string) uint64 {
		t.Helper()
		k := compute(t, h, op, []byte(body), "")
		return k.Anchor
	}
	same := func(name string, want bool, a, b uint64) {
		t.Helper()
		if (a == b) != want {
			t.Errorf("%s: anchors equal %v, want %v", name, a == b, want)
		}
	}
	c1 := anchor(exchange.OpChat, string(chat("", "system", system, "user", turn1)))
	c2 := anchor(exchange.OpChat, string(chat("", "system", system, "user", turn1, "assistant", answer, "user", turn2)))
	c3 := anchor(exchange.OpChat, string(chat("", "system", system, "user", turn2)))
	same("chat: next turn", true, c1, c2)
	same("chat: another user of the system prompt", true, c1, c3)
	same("chat: another system prompt", false, c1, anchor(exchange.OpChat, string(chat("", "system", system+"!", "user", turn1))))
	same("chat: tools", false, c1, anchor(exchange.OpChat, string(chat(tools, "system", system, "user", turn1))))
	same("chat: developer message too", false, c1, anchor(exchange.OpChat, string(chat("", "system", system, "developer", "be brief", "user", turn1))))
	t1 := anchor(exchange.OpChat, string(chat(tools, "user", turn1)))
	same("chat: tools alone", true, t1, anchor(exchange.OpChat, string(chat(tools, "user", turn2))))
	// No system prompt: the first message is the anchor.
	u1 := anchor(exchange.OpChat, string(chat("", "user", turn1)))
	same("chat: first message, next turn", true, u1, anchor(exchange.OpChat, string(chat("", "user", turn1, "assistant", answer, "user", turn2))))
	same("chat: another first message", false, u1, anchor(exchange.OpChat, string(chat("", "user", turn2))))

	msgs := func(extra string) string {
		return `{"model":"m","system":` + quote(system) + `,"max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":` + quote(turn1) + `}]}` + extra + `]}`
	}
	m1 := anchor(exchange.OpMessages, msgs(""))
	same("messages: next turn", true, m1, anchor(exchange.OpMessages, msgs(`,{"role":"assistant","content":"ok"},{"role":"user","content":"more"}`)))
	same("messages: another system", false, m1, anchor(exchange.OpMessages, `{"system":"x","messages":[{"role":"user","content":"hi"}]}`))

	r1 := anchor(exchange.OpResponses, `{"model":"m","instructions":`+quote(system)+`,"input":`+quote(turn1)+`}`)
	same("responses: another input", true, r1, anchor(exchange.OpResponses, `{"model":"m","instructions":`+quote(system)+`,"input":[{"role":"user","content":[{"type":"input_text","text":"x"}]}]}`))
	same("responses: another instructions", false, r1, anchor(exchange.OpResponses, `{"model":"m","instructions":"x","input":`+quote(turn1)+`}`))
	in1 := anchor(exchange.OpResponses, `{"input":`+quote(turn1)+`}`)
	same("responses: input alone", false, in1, anchor(exchange.OpResponses, `{"input":`+quote(turn2)+`}`))

	p := compute(t, h, exchange.OpCompletion, []byte(`{"prompt":`+quote(system+turn1)+`}`), "")
	if p.N == 0 || p.Anchor != p.Blocks[0] {
		t.Errorf("completions: anchor %x, want the first block %x", p.Anchor, p.Blocks[0])
	}
}

// TestRenderings: what each operation hashes, by the chains of
// equivalent and different requests.
func TestRenderings(t *testing.T) {
	h := mustHasher(t, HashXXH)
	long := quote(system + turn1)
	tests := []struct {
		name string
		op   exchange.Operation
		a, b string
		same bool // a and b have the same chain
	}{
		{"completion prompt array: first prompt", exchange.OpCompletion, `{"prompt":` + long + `}`, `{"prompt":[` + long + `,"other"]}`, true},
		{"completion token ids", exchange.OpCompletion, `{"prompt":[1,` + strings.Repeat("1234,", 100) + `1]}`, `{"prompt":[2,` + strings.Repeat("1234,", 100) + `1]}`, false},
		{"completion token id arrays: first", exchange.OpCompletion, `{"prompt":[[` + strings.Repeat("1234,", 100) + `1],[5]]}`, `{"prompt":[[` + strings.Repeat("1234,", 100) + `1]]}`, true},
		{"chat string and text part", exchange.OpChat, `{"messages":[{"role":"user","content":` + long + `}]}`, `{"messages":[{"role":"user","content":[{"type":"text","text":` + long + `}]}]}`, true},
		{"chat image part counts", exchange.OpChat,
			`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:a"}},{"type":"text","text":` + long + `}]}]}`,
			`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:b"}},{"type":"text","text":` + long + `}]}]}`, false},
		{"text moved across a part boundary", exchange.OpChat,
			`{"messages":[{"role":"user","content":[{"type":"text","text":` + quote(system) + `},{"type":"text","text":` + quote(turn1) + `}]}]}`,
			`{"messages":[{"role":"user","content":[{"type":"text","text":` + quote(system+turn1[:5]) + `},{"type":"text","text":` + quote(turn1[5:]) + `}]}]}`, false},
		{"chat roles count", exchange.OpChat, `{"messages":[{"role":"user","content":` + long + `}]}`, `{"messages":[{"role":"assistant","content":` + long + `}]}`, false},
		{"chat other ops ignore members", exchange.OpChat, `{"messages":[{"role":"user","content":` + long + `}],"prompt":"x","system":"y"}`, `{"messages":[{"role":"user","content":` + long + `}]}`, true},
		{"messages system blocks", exchange.OpMessages, `{"system":` + long + `,"messages":[]}`, `{"system":[{"type":"text","text":` + long + `,"cache_control":{"type":"ephemeral"}}],"messages":[]}`, true},
		{"responses function call items", exchange.OpResponses,
			`{"input":[{"type":"function_call","call_id":"a","name":"f","arguments":` + long + `}]}`,
			`{"input":[{"type":"function_call","call_id":"b","name":"f","arguments":` + long + `}]}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := compute(t, h, tt.op, []byte(tt.a), "")
			b := compute(t, h, tt.op, []byte(tt.b), "")
			if a.N == 0 {
				t.Fatal("no blocks")
			}
			if got := common(&a, &b) == a.N && a.N == b.N; got != tt.same {
				t.Errorf("same chain %v, want %v (%d of %d/%d blocks shared)", got, tt.same, common(&a, &b), a.N, b.N)
			}
		})
	}
}

// TestBadInput: nothing to hash, and malformed or hostile bodies, give no
// blocks and no panic.
func TestBadInput(t *testing.T) {
	h := mustHasher(t, HashXXH)
	for _, tt := range []struct {
		op   exchange.Operation
		body string
		ok   bool
	}{
		{exchange.OpEmbeddings, `{"input":"x"}`, false},
		{exchange.OpChat, ``, false},
		{exchange.OpChat, `[]`, false},
		{exchange.OpChat, `{"messages":[{"role":"user","content":"x"`, false},
		{exchange.OpChat, `{"messages":null}`, true},
		{exchange.OpChat, `{"messages":"nope"}`, true},
		{exchange.OpChat, `{"messages":[1,"x",null,{"role":5,"content":{"a":1}}]}`, true},
		{exchange.OpChat, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", true},
		{exchange.OpCompletion, `{"prompt":""}`, true},
		{exchange.OpCompletion, `{"prompt":[]}`, true},
		{exchange.OpCompletion, `{"prompt":7}`, true},
	} {
		var k Key
		if got := h.Compute(&k, tt.op, []byte(tt.body), ""); got != tt.ok || (!got && k.N != 0) {
			t.Errorf("Compute(%s, %q) = %v with %d blocks, want %v", tt.op, tt.body, got, k.N, tt.ok)
		}
	}
	// A prompt past max_chars: bounded.
	huge := compute(t, h, exchange.OpCompletion, []byte(`{"prompt":"`+strings.Repeat("a", 1<<20)+`"}`), "")
	if huge.N != MaxBlocks || huge.Chars != 64*MaxBlocks {
		t.Errorf("huge prompt: %d blocks, %d chars", huge.N, huge.Chars)
	}
}

func TestNewHasher(t *testing.T) {
	for _, o := range []Options{
		{BlockChars: 0, MaxChars: 10, Hash: HashXXH},
		{BlockChars: 10, MaxChars: 5, Hash: HashXXH},
		{BlockChars: 10, MaxChars: 10 * (MaxBlocks + 1), Hash: HashXXH},
		{BlockChars: 10, MaxChars: 100, Hash: "md5"},
	} {
		if _, err := NewHasher(o); err == nil {
			t.Errorf("NewHasher(%+v): no error", o)
		}
	}
}

func TestComputeDoesNotAllocate(t *testing.T) {
	for _, hash := range []string{HashXXH, HashFNV} {
		h := mustHasher(t, hash)
		body := chatBody(32 << 10)
		var k Key
		if n := testing.AllocsPerRun(100, func() { h.Compute(&k, exchange.OpChat, body, "s") }); n != 0 {
			t.Errorf("%s: %v allocations per Compute", hash, n)
		}
	}
}

// chatBody returns a chat request of about size bytes: a system prompt,
// then user and assistant turns.
func chatBody(size int) []byte {
	msgs := []string{"system", system}
	for n := len(system); n < size; n += len(turn1) + len(answer) {
		msgs = append(msgs, "user", turn1, "assistant", answer)
	}
	return chat(`[{"type":"function","function":{"name":"lookup","parameters":{"type":"object"}}}]`, msgs...)
}

func BenchmarkCompute(b *testing.B) {
	for _, size := range []int{2 << 10, 32 << 10} {
		for _, hash := range []string{HashXXH, HashFNV} {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, hash), func(b *testing.B) {
				h, err := NewHasher(Options{BlockChars: 256, MaxChars: 64 << 10, Hash: hash})
				if err != nil {
					b.Fatal(err)
				}
				body := chatBody(size)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				var k Key
				for b.Loop() {
					h.Compute(&k, exchange.OpChat, body, "")
				}
			})
		}
	}
}

func FuzzCompute(f *testing.F) {
	f.Add(uint8(0), []byte(chat("", "system", "s", "user", "u")), "")
	f.Add(uint8(1), []byte(`{"prompt":["a","b"]}`), "k")
	f.Add(uint8(2), []byte(`{"instructions":"i","tools":[],"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"x"}]}]}`), "")
	f.Add(uint8(3), []byte(`{"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`), "")
	ops := []exchange.Operation{exchange.OpChat, exchange.OpCompletion, exchange.OpResponses, exchange.OpMessages, exchange.OpOther}
	h, err := NewHasher(Options{BlockChars: 4, MaxChars: 4 * 64, Hash: HashXXH})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, op uint8, body []byte, session string) {
		var k Key
		ok := h.Compute(&k, ops[int(op)%len(ops)], body, session)
		if k.N > 64 || k.Chars > 4*64 || k.N != k.Chars/4 && ok {
			t.Fatalf("ok %v, %d blocks of %d chars: past the bounds", ok, k.N, k.Chars)
		}
		if !ok && k.N != 0 {
			t.Fatalf("failed with %d blocks", k.N)
		}
		var again Key
		if h.Compute(&again, ops[int(op)%len(ops)], body, session) != ok || again.N != k.N || again.Anchor != k.Anchor || common(&k, &again) != k.N {
			t.Fatal("not deterministic")
		}
	})
}
