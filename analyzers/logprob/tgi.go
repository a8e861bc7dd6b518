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
	if s.Peek() == '[' {
		// TGI's "/" route answers a non-streaming request with an array.
		s.Enter('[')
		n := 0
		for s.Element(&n) {
			if !a.tgiObject(s) {
				return false
			}
		}
		return s.OK()
	}
	return a.tgiObject(s)
}

// tgiObject reads a /generate body or a /generate_stream event: both
// shapes share the walker, their keys do not clash.
func (a *Accumulator) tgiObject(s *scanner) bool {
	if !s.object() {
		return false
	}
	a.s.Choices = max(a.s.Choices, 1)
	var tok tgiTok
	var top scanner
	var haveTop, inline bool
	n := 0
	for s.Member(&n) {
		ok := true
		switch string(s.Key()) {
		case "token":
			tok, ok = tgiToken(s)
		case "top_tokens":
			if tok.present && !inline && !haveTop {
				inline = true
				a.startAlts()
				ok = a.listTop(s, keyID, tok.id, tok.haveID, tok.lp, tok.kind)
			} else {
				top, haveTop = s.span(), true
				ok = s.OK()
			}
		case "details":
			ok = a.tgiDetails(s)
		default:
			ok = s.Skip()
		}
		if !ok {
			return false
		}
	}
	if !s.OK() {
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
	if !s.Enter('{') {
		return t, s.OK()
	}
	t.present = true
	n := 0
	for s.Member(&n) {
		ok := true
		switch string(s.Key()) {
		case "id":
			t.id, t.haveID, ok = s.rawNumber()
		case "logprob":
			t.lp, t.kind, ok = s.float()
		case "special":
			if s.Peek() == 't' {
				t.special, ok = true, s.Literal("true")
			} else {
				ok = s.Skip()
			}
		default:
			ok = s.Skip()
		}
		if !ok {
			return t, false
		}
	}
	return t, s.OK()
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
	if !s.Enter('{') {
		return s.OK()
	}
	var toks, tops scanner
	var haveToks, haveTops, zipped bool
	n := 0
	ok := true
	for ok && s.Member(&n) {
		var have bool
		switch string(s.Key()) {
		case "finish_reason":
			ok = setFinish(s, &a.s.FinishReason)
		case "generated_tokens":
			ok = setCount(s, &a.s.OutputTokens, &a.haveOut)
		case "input_length", "prompt_tokens":
			ok = setCount(s, &a.s.PromptTokens, &have)
		case "tokens":
			toks, haveToks = s.span(), true
			ok = s.OK()
		case "top_tokens":
			if haveToks && !zipped {
				zipped = true
				ok = a.tgiZip(&toks, s)
			} else {
				tops, haveTops = s.span(), true
				ok = s.OK()
			}
		default:
			ok = s.Skip()
		}
	}
	// As for legacy completions, a cut before top_tokens counts nothing.
	if haveToks && !zipped && s.OK() {
		a.tgiZip(&toks, optional(&tops, haveTops))
	}
	return s.OK()
}

// tgiZip walks details.tokens (toks) and details.top_tokens (top, nil if
// absent; it may be the payload's scanner) in step.
func (a *Accumulator) tgiZip(toks, top *scanner) bool {
	if !toks.Enter('[') {
		if top != nil {
			return top.Skip()
		}
		return true
	}
	topOpen := top != nil && top.Enter('[')
	if top != nil && !top.OK() {
		return false
	}
	var nt, np int
	for toks.Element(&nt) {
		t, ok := tgiToken(toks)
		if !ok {
			break
		}
		a.startAlts()
		if topOpen {
			if top.Element(&np) {
				if !a.listTop(top, keyID, t.id, t.haveID, t.lp, t.kind) {
					return false
				}
			} else if topOpen = false; !top.OK() {
				return false
			}
		}
		a.tgiPosition(t)
	}
	if topOpen {
		for top.Element(&np) {
			if !top.Skip() {
				return false
			}
		}
	}
	return top == nil || top.OK()
}
