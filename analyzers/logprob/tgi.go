package logprob

// This file walks TGI's native responses (router/src/lib.rs):
//
//	/generate         {generated_text, details: {finish_reason, generated_tokens, seed, prefill, tokens: [token], top_tokens: [[token]], best_of_sequences}}
//	/generate_stream  {index, token, top_tokens: [token], generated_text, details: null | {finish_reason, generated_tokens, seed, input_length}}
//	token             {id, text, logprob, special}
//
// top_tokens is omitted when empty (top_n_tokens unset). TGI writes a NaN
// logprob as null (serde_json), which counts as Invalid. best_of_sequences
// and prefill are ignored.

// tgiTok is a token object as read: id is its raw number text.
type tgiTok struct {
	id      []byte
	lp      float64
	kind    numKind
	haveID  bool
	special bool
	present bool
}

func (a *Accumulator) tgi(s *scanner) bool {
	if s.peek() == '[' {
		// TGI's "/" route answers a non-streaming request with an array.
		s.enter('[')
		n := 0
		for s.elem(&n) {
			if !a.tgiObject(s) {
				return false
			}
		}
		return s.err == nil
	}
	return a.tgiObject(s)
}

// tgiObject reads a /generate body or a /generate_stream event: both
// shapes share the walker, their keys do not clash.
func (a *Accumulator) tgiObject(s *scanner) bool {
	if !s.enter('{') {
		if s.err == nil {
			s.syntax("expected a JSON object")
		}
		return false
	}
	a.s.Choices = max(a.s.Choices, 1)
	var tok tgiTok
	var top scanner
	var haveTop, inline bool
	n := 0
	for s.member(&n) {
		ok := true
		switch string(s.key) {
		case "token":
			tok, ok = tgiToken(s)
		case "top_tokens":
			if tok.present && !inline && !haveTop {
				inline = true
				a.startAlts()
				ok = a.listTop(s, keyID, tok.id, tok.haveID, tok.lp, tok.kind)
			} else {
				top, haveTop = s.span(), true
				ok = s.err == nil
			}
		case "details":
			ok = a.tgiDetails(s)
		default:
			ok = s.skip()
		}
		if !ok {
			return false
		}
	}
	if s.err != nil {
		return false
	}
	if tok.present {
		if !inline {
			a.startAlts()
			if haveTop {
				a.listTop(&top, keyID, tok.id, tok.haveID, tok.lp, tok.kind)
			}
		}
		a.tgiPosition(tok)
	}
	return true
}

func tgiToken(s *scanner) (tgiTok, bool) {
	var t tgiTok
	if !s.enter('{') {
		return t, s.err == nil
	}
	t.present = true
	n := 0
	for s.member(&n) {
		ok := true
		switch string(s.key) {
		case "id":
			t.id, t.haveID, ok = s.rawNumber()
		case "logprob":
			t.lp, t.kind, ok = s.float()
		case "special":
			if s.peek() == 't' {
				t.special, ok = true, s.lit("true")
			} else {
				ok = s.skip()
			}
		default:
			ok = s.skip()
		}
		if !ok {
			return t, false
		}
	}
	return t, s.err == nil
}

func (a *Accumulator) tgiPosition(t tgiTok) {
	if t.special {
		a.special()
		return
	}
	a.token(t.lp, t.kind)
}

// tgiDetails reads details of either shape. tokens and top_tokens are
// parallel arrays, walked in step like the legacy completions arrays.
func (a *Accumulator) tgiDetails(s *scanner) bool {
	if !s.enter('{') {
		return s.err == nil
	}
	var toks, tops scanner
	var haveToks, haveTops, zipped bool
	n := 0
	ok := true
	for ok && s.member(&n) {
		var have bool
		switch string(s.key) {
		case "finish_reason":
			ok = setFinish(s, &a.s.FinishReason)
		case "generated_tokens":
			ok = setCount(s, &a.s.OutputTokens, &a.haveOut)
		case "input_length", "prompt_tokens":
			ok = setCount(s, &a.s.PromptTokens, &have)
		case "tokens":
			toks, haveToks = s.span(), true
			ok = s.err == nil
		case "top_tokens":
			if haveToks && !zipped {
				zipped = true
				ok = a.tgiZip(&toks, s)
			} else {
				tops, haveTops = s.span(), true
				ok = s.err == nil
			}
		default:
			ok = s.skip()
		}
	}
	// As for legacy completions, a cut before top_tokens counts nothing.
	if haveToks && !zipped && s.err == nil {
		a.tgiZip(&toks, optional(&tops, haveTops))
	}
	return s.err == nil
}

// tgiZip walks details.tokens (toks) and details.top_tokens (top, nil if
// absent; it may be the payload's scanner) in step.
func (a *Accumulator) tgiZip(toks, top *scanner) bool {
	if !toks.enter('[') {
		if top != nil {
			return top.skip()
		}
		return true
	}
	topOpen := top != nil && top.enter('[')
	if top != nil && top.err != nil {
		return false
	}
	var nt, np int
	for toks.elem(&nt) {
		t, ok := tgiToken(toks)
		if !ok {
			break
		}
		a.startAlts()
		if topOpen {
			if top.elem(&np) {
				if !a.listTop(top, keyID, t.id, t.haveID, t.lp, t.kind) {
					return false
				}
			} else if topOpen = false; top.err != nil {
				return false
			}
		}
		a.tgiPosition(t)
	}
	if topOpen {
		for top.elem(&np) {
			if !top.skip() {
				return false
			}
		}
	}
	return top == nil || top.err == nil
}
