package affinity

import (
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/internal/jsonscan"
)

// The rendering is the request's leading content as the model server will
// see it, near enough: per operation, the parts that come first in the
// prompt its chat template makes, in that order, with separators between
// them so that text moved across a boundary (from the system prompt into
// the first user message, from one content part into the next) changes
// the hash. Strings are taken raw, escapes undecoded: two clients that
// escape the same text differently hash differently, which costs a cache
// hit, never a wrong answer.
//
//	chat         tools, then messages in order
//	completions  prompt (the first prompt of an array)
//	responses    instructions, tools, then input (a string or items)
//	messages     system, tools, then messages
//
// A message renders as its role and its content: a string, or each part's
// text, or the raw JSON of a part that has no text (an image, a tool
// result); an assistant's tool_calls follow as raw JSON, and an item with
// neither role nor content (a Responses function_call) is its raw JSON.
const (
	sepSegment = 0x1d // before a leading segment: tools, system, instructions
	sepMessage = 0x1e // before each message or input item
	sepField   = 0x1f // between a message's role and each part of its content
)

var seps = [...]byte{sepSegment, sepMessage, sepField}

func sep(c byte) []byte { return seps[c-sepSegment : c-sepSegment+1] }

// anchorSeed and affinitySeed keep the anchor's hash and an affinity
// key's apart from the chain's block hashes.
const (
	anchorSeed   = 0x616e63686f72 // "anchor"
	affinitySeed = 0x6166666e74   // "affnt"
)

// Compute fills k with the request's chain and anchor: op is the request's
// operation, body its JSON body (already read; not retained), session the
// value of the configured session header ("" when absent). An explicit
// affinity key (the body's prompt_cache_key, else session) seeds the chain
// and is the anchor. It reports false, with k.N 0, for an operation that
// has no prompt to hash or a body it cannot walk: such a request is routed
// by load. It does not allocate, and hashes at most max_chars bytes of
// rendering; walking the body's top level to find the members is linear in
// the body's size.
func (h *Hasher) Compute(k *Key, op exchange.Operation, body []byte, session string) bool {
	k.N, k.Chars, k.Anchor, k.Affinity = 0, 0, 0, false
	switch op {
	case exchange.OpChat, exchange.OpCompletion, exchange.OpResponses, exchange.OpMessages:
	default:
		return false
	}
	var top members
	s := jsonscan.New(body, jsonscan.Options{})
	if !s.Enter('{') {
		return false
	}
	for n := 0; s.Member(&n); {
		switch string(s.Key()) {
		case "messages":
			top.messages, top.has.messages = s.Span(), true
		case "tools":
			top.tools, top.has.tools = s.Value()
		case "system":
			top.system, top.has.system = s.Span(), true
		case "instructions":
			top.instructions, top.has.instructions = s.Span(), true
		case "input":
			top.input, top.has.input = s.Span(), true
		case "prompt":
			top.prompt, top.has.prompt = s.Span(), true
		case "prompt_cache_key":
			if s.Peek() == '"' {
				top.cacheKey, _ = s.Str()
			} else {
				s.Skip()
			}
		default:
			s.Skip()
		}
	}
	if !s.OK() {
		return false
	}
	r := render{h: h, k: k}
	r.block.fnv, r.anchor.fnv = h.fnv, h.fnv
	seed := uint64(0)
	switch {
	case len(top.cacheKey) > 0:
		seed = h.Hash(top.cacheKey) ^ affinitySeed
	case session != "":
		seed = h.HashString(session) ^ affinitySeed
	}
	if seed != 0 {
		k.Anchor, k.Affinity = seed, true
	} else {
		r.anchorOpen = true
		r.anchor.reset(anchorSeed)
	}
	r.block.reset(seed)
	ok := true
	switch op {
	case exchange.OpChat:
		r.tools(top.tools)
		ok = r.messages(&top.messages, top.has.messages)
	case exchange.OpMessages:
		if top.has.system {
			r.write(sep(sepSegment))
			r.write([]byte("system"))
			ok = r.content(&top.system)
			r.stable = true
		}
		r.tools(top.tools)
		ok = ok && r.messages(&top.messages, top.has.messages)
	case exchange.OpResponses:
		if top.has.instructions {
			r.write(sep(sepSegment))
			r.write([]byte("instructions"))
			ok = r.content(&top.instructions)
			r.stable = true
		}
		r.tools(top.tools)
		if ok && top.has.input {
			if top.input.Peek() == '[' {
				ok = r.messages(&top.input, true)
			} else {
				// A string input is the user's turn: in the anchor
				// only when nothing stable precedes it.
				if r.stable {
					r.closeAnchor()
				}
				r.write(sep(sepMessage))
				ok = r.content(&top.input)
				r.closeAnchor()
			}
		}
	case exchange.OpCompletion:
		r.anchorOpen = false // the anchor is the first block
		ok = r.prompt(&top.prompt)
	}
	if !ok {
		k.N = 0
		return false
	}
	r.closeAnchor()
	if op == exchange.OpCompletion && !k.Affinity {
		k.Anchor = 0
		if k.N > 0 {
			k.Anchor = k.Blocks[0]
		}
	}
	return true
}

// members are the top-level members of a body that the rendering reads.
type members struct {
	messages, system, instructions, input, prompt jsonscan.Scanner
	tools                                         []byte
	cacheKey                                      []byte
	has                                           struct{ messages, tools, system, instructions, input, prompt bool }
}

// render hashes the rendering as it is written, block by block, without
// keeping it.
type render struct {
	h     *Hasher
	k     *Key
	block digest // the current block's, seeded with the previous block's hash
	fill  int    // bytes in the current block
	// anchor hashes the stable leading segment while anchorOpen; stable
	// reports that the segment has something in it (tools, a system
	// prompt), so that the first user message is not added to it.
	anchor     digest
	anchorOpen bool
	stable     bool
}

// full reports that max_chars bytes were rendered: the rest is not read.
func (r *render) full() bool { return r.k.Chars >= r.h.max }

func (r *render) write(b []byte) {
	if room := r.h.max - r.k.Chars; len(b) > room {
		b = b[:room]
	}
	if len(b) == 0 {
		return
	}
	r.k.Chars += len(b)
	if r.anchorOpen {
		r.anchor.write(b)
	}
	for len(b) > 0 {
		n := min(r.h.block-r.fill, len(b))
		r.block.write(b[:n])
		r.fill += n
		b = b[n:]
		if r.fill == r.h.block {
			sum := r.block.sum()
			r.k.Blocks[r.k.N] = sum
			r.k.N++
			r.block.reset(sum)
			r.fill = 0
		}
	}
}

func (r *render) closeAnchor() {
	if r.anchorOpen {
		r.k.Anchor = r.anchor.sum()
		r.anchorOpen = false
	}
}

func (r *render) tools(raw []byte) {
	if len(raw) == 0 || raw[0] == 'n' {
		return
	}
	r.write(sep(sepSegment))
	r.write([]byte("tools"))
	r.write(sep(sepField))
	r.write(raw)
	r.stable = true
}

// messages renders an array of messages (or Responses input items),
// closing the anchor after the leading system and developer messages, or
// after the first message when nothing stable came before it.
func (r *render) messages(s *jsonscan.Scanner, present bool) bool {
	if !present {
		return true
	}
	if !s.Enter('[') {
		return s.OK() // null or another type: no messages
	}
	for n := 0; !r.full() && s.Element(&n); {
		if !r.item(s) {
			return false
		}
	}
	return s.OK()
}

// item renders one message or input item. A message's content is rendered
// as it is read when its role came first (as clients write it), so that
// the common case reads the body once; otherwise it is read again, once
// the role is known. Once max_chars are rendered it returns at once,
// leaving the rest unread.
func (r *render) item(s *jsonscan.Scanner) bool {
	start := s.Pos()
	if s.Peek() != '{' {
		raw, ok := s.Value()
		r.begin(nil, false)
		r.write(raw)
		r.end(false)
		return ok
	}
	s.Enter('{')
	var (
		role, kind         []byte
		content, toolCalls jsonscan.Scanner
		hasContent, hasTC  bool
		begun, lead        bool
	)
	for n := 0; s.Member(&n); {
		switch string(s.Key()) {
		case "role":
			if s.Peek() == '"' && !begun {
				role, _ = s.Str()
			} else {
				s.Skip()
			}
		case "type":
			if s.Peek() == '"' {
				kind, _ = s.Str()
			} else {
				s.Skip()
			}
		case "content":
			if len(role) == 0 || begun {
				content, hasContent = s.Span(), true
				continue
			}
			lead = isLead(role)
			r.begin(role, lead)
			begun = true
			if !r.content(s) {
				return false
			}
			if r.full() {
				return true
			}
		case "tool_calls":
			toolCalls, hasTC = s.Span(), true
		default:
			s.Skip()
		}
	}
	if !s.OK() {
		return false
	}
	if !begun {
		lead = isLead(role)
		switch {
		case len(role) == 0 && !hasContent:
			// A function call, its output, a reasoning item: all of it.
			r.begin(nil, false)
			r.write(s.Bytes()[start:s.Pos()])
		case len(role) > 0:
			r.begin(role, lead)
		default:
			r.begin(kind, false)
		}
		if hasContent && !r.content(&content) {
			return false
		}
	}
	if hasTC && toolCalls.Peek() != 'n' {
		r.write(sep(sepField))
		r.write(toolCalls.Bytes())
	}
	r.end(lead)
	return true
}

func isLead(role []byte) bool { return string(role) == "system" || string(role) == "developer" }

// begin starts a message: it closes the anchor before a message that is
// not part of the stable leading segment when that segment has something
// in it.
func (r *render) begin(role []byte, lead bool) {
	if r.anchorOpen && !lead && r.stable {
		r.closeAnchor()
	}
	r.write(sep(sepMessage))
	r.write(role)
}

// end ends a message: a leading one extends the stable segment, any other
// closes the anchor (it was the first message, nothing stable before it).
func (r *render) end(lead bool) {
	if lead {
		r.stable = true
	} else {
		r.closeAnchor()
	}
}

// content renders a content value: a string, or an array of parts, each
// its text or, without one, its raw JSON; anything else raw.
func (r *render) content(s *jsonscan.Scanner) bool {
	switch s.Peek() {
	case '"':
		raw, ok := s.Str()
		r.write(sep(sepField))
		r.write(raw)
		return ok
	case 'n':
		return s.Null()
	case '[':
	default:
		raw, ok := s.Value()
		r.write(sep(sepField))
		r.write(raw)
		return ok
	}
	s.Enter('[')
	for n := 0; s.Element(&n); {
		if r.full() {
			return true // the rest is not read
		}
		part := s.Span()
		if !s.OK() {
			return false
		}
		text, ok := partText(part)
		r.write(sep(sepField))
		if ok {
			r.write(text)
		} else {
			r.write(part.Bytes())
		}
	}
	return s.OK()
}

// partText returns the text of a content part: its "text" member when that
// is a string (OpenAI's text and input_text parts, Anthropic's text
// blocks), or a string part itself.
func partText(p jsonscan.Scanner) ([]byte, bool) {
	switch p.Peek() {
	case '"':
		return p.Str()
	case '{':
	default:
		return nil, false
	}
	p.Enter('{')
	var text []byte
	found := false
	for n := 0; p.Member(&n); {
		if string(p.Key()) == "text" && p.Peek() == '"' {
			text, found = p.Str()
			continue
		}
		p.Skip()
	}
	return text, found && p.OK()
}

// prompt renders a completion's prompt: a string, or the first of an
// array of strings, or the raw JSON of token ids (one array of them, or
// the first of several).
func (r *render) prompt(s *jsonscan.Scanner) bool {
	switch s.Peek() {
	case '"':
		raw, ok := s.Str()
		r.write(raw)
		return ok
	case '[':
	default:
		return s.Skip() // absent, null or a number: nothing to hash
	}
	whole := s.Span()
	v := whole
	v.Enter('[')
	n := 0
	if !v.Element(&n) {
		return v.OK()
	}
	switch v.Peek() {
	case '"':
		raw, ok := v.Str()
		r.write(raw)
		return ok
	case '[':
		raw, ok := v.Value()
		r.write(raw)
		return ok
	default:
		r.write(whole.Bytes())
		return true
	}
}
