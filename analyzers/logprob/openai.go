package logprob

import "bytes"

// This file walks OpenAI-shaped responses, as OpenAI and vLLM write them:
//
//	chat.completion        {id, model, choices: [{index, message, logprobs: {content: [entry], refusal: [entry]}, finish_reason}], usage}
//	chat.completion.chunk  {id, model, choices: [{index, delta, logprobs, finish_reason}], usage}; the usage chunk has choices: []
//	entry                  {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}
//	text_completion        {id, model, choices: [{index, text, logprobs: {tokens, token_logprobs, top_logprobs, text_offset}, finish_reason}], usage}
//
// Keys are matched on their raw bytes: a key written with escapes is not
// recognised (no server does that).

func (a *Accumulator) openAI(s *scanner) bool {
	if !s.enter('{') {
		if s.err == nil {
			s.syntax("expected a JSON object")
		}
		return false
	}
	n := 0
	for s.member(&n) {
		var ok bool
		switch string(s.key) {
		case "id":
			ok = setString(s, &a.s.ID)
		case "model":
			ok = a.setModel(s)
		case "choices":
			ok = a.choices(s)
		case "usage":
			ok = a.usage(s)
		default:
			ok = s.skip()
		}
		if !ok {
			return false
		}
	}
	return s.err == nil
}

func (a *Accumulator) setModel(s *scanner) bool {
	raw, valid, ok := s.rawString()
	if valid {
		m := a.model
		if bytes.IndexByte(raw, '\\') >= 0 {
			m = unescape(raw)
		} else if string(raw) != m {
			m = string(raw)
		}
		a.model, a.s.Model = m, m
	}
	return ok
}

func (a *Accumulator) choices(s *scanner) bool {
	if !s.enter('[') {
		return s.err == nil
	}
	n := 0
	for s.elem(&n) {
		if !a.choice(s) {
			return false
		}
	}
	return s.err == nil
}

func (a *Accumulator) choice(s *scanner) bool {
	if !s.enter('{') {
		return s.err == nil
	}
	a.s.Choices = max(a.s.Choices, 1)
	n := 0
	for s.member(&n) {
		var ok bool
		switch string(s.key) {
		case "index":
			var i int
			var have bool
			if ok = setCount(s, &i, &have); have {
				a.s.Choices = max(a.s.Choices, i+1)
			}
		case "logprobs":
			ok = a.logprobs(s)
		case "finish_reason":
			ok = setFinish(s, &a.s.FinishReason)
		default:
			ok = s.skip()
		}
		if !ok {
			return false
		}
	}
	return s.err == nil
}

func (a *Accumulator) usage(s *scanner) bool {
	if !s.enter('{') {
		return s.err == nil
	}
	n := 0
	for s.member(&n) {
		var ok bool
		var have bool
		switch string(s.key) {
		case "completion_tokens":
			ok = setCount(s, &a.s.OutputTokens, &a.haveOut)
		case "prompt_tokens":
			ok = setCount(s, &a.s.PromptTokens, &have)
		default:
			ok = s.skip()
		}
		if !ok {
			return false
		}
	}
	return s.err == nil
}

// logprobs reads a choice's logprobs object in either shape. The legacy
// shape is three parallel arrays: token_logprobs and tokens are kept as
// spans (sub-slices, no copy) and walked in step with top_logprobs when it
// comes, as it does after them in both OpenAI's and vLLM's field order; in
// any other order the spans are walked at the end of the object. When the
// payload is cut short inside top_logprobs, the positions whose entry was
// wholly read still count.
func (a *Accumulator) logprobs(s *scanner) bool {
	if !s.enter('{') {
		return s.err == nil
	}
	var lps, toks, tops scanner
	var haveLps, haveToks, haveTops, zipped bool
	n := 0
	ok := true
	for ok && s.member(&n) {
		switch string(s.key) {
		case "content", "refusal":
			ok = a.chatEntries(s)
		case "token_logprobs":
			lps, haveLps = s.span(), true
			ok = s.err == nil
		case "tokens":
			toks, haveToks = s.span(), true
			ok = s.err == nil
		case "top_logprobs":
			if haveLps && !zipped {
				zipped = true
				ok = a.legacy(&lps, optional(&toks, haveToks), s)
			} else {
				tops, haveTops = s.span(), true
				ok = s.err == nil
			}
		default:
			ok = s.skip()
		}
	}
	// Cut short before top_logprobs, the positions stay uncounted: whether
	// they had alternatives is unknown, and counting them without would make
	// a longer cut count fewer tokens.
	if haveLps && !zipped && s.err == nil {
		a.legacy(&lps, optional(&toks, haveToks), optional(&tops, haveTops))
	}
	return s.err == nil
}

func optional(s *scanner, have bool) *scanner {
	if have {
		return s
	}
	return nil
}

// legacy walks the legacy arrays in step: lps over token_logprobs, toks
// over tokens (nil if absent), top over top_logprobs (nil if absent; it may
// be the payload's own scanner, whose error then ends the walk). It counts
// a position once its top_logprobs entry, if any, is wholly read.
func (a *Accumulator) legacy(lps, toks, top *scanner) bool {
	if !lps.enter('[') {
		if top != nil {
			return top.skip()
		}
		return true
	}
	if toks != nil && !toks.enter('[') {
		toks = nil
	}
	topOpen := top != nil && top.enter('[')
	if top != nil && top.err != nil {
		return false
	}
	var nl, nt, np int
	for lps.elem(&nl) {
		lp, kind, ok := lps.float()
		if !ok {
			break
		}
		var tok []byte
		haveTok := false
		if toks != nil {
			if !toks.elem(&nt) {
				toks = nil
			} else if tok, haveTok, ok = toks.rawString(); !ok {
				toks = nil
			}
		}
		a.startAlts()
		if topOpen {
			if top.elem(&np) {
				if !a.legacyTop(top, tok, haveTok, lp, kind) {
					return false
				}
			} else if topOpen = false; top.err != nil {
				return false
			}
		}
		a.token(lp, kind)
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

// legacyTop reads one top_logprobs dict {token: logprob}. The chosen token
// is recognised by its key, or by its logprob when tokens is absent.
func (a *Accumulator) legacyTop(s *scanner, tok []byte, haveTok bool, clp float64, ck numKind) bool {
	if !s.enter('{') {
		return s.err == nil
	}
	limit := a.o.MaxTopK + 1
	n := 0
	for s.member(&n) {
		if n > limit {
			if !s.skip() {
				return false
			}
			continue
		}
		key := s.key
		lp, kind, ok := s.float()
		if !ok {
			return false
		}
		var chosen bool
		if haveTok {
			chosen = bytes.Equal(key, tok)
		} else {
			chosen = usable(clp, ck) && kind == numFinite && lp == clp
		}
		a.alternative(lp, kind, chosen)
	}
	return s.err == nil
}

func (a *Accumulator) chatEntries(s *scanner) bool {
	if !s.enter('[') {
		return s.err == nil
	}
	n := 0
	for s.elem(&n) {
		if !a.chatEntry(s) {
			return false
		}
	}
	return s.err == nil
}

// chatEntry reads one logprobs.content entry. top_logprobs is read in the
// same pass when token came before it (OpenAI's and vLLM's order), else
// kept as a span and read at the end of the entry. The position counts
// only once the entry is wholly read.
func (a *Accumulator) chatEntry(s *scanner) bool {
	if !s.enter('{') {
		return s.err == nil
	}
	var tok []byte
	var top scanner
	var haveTok, haveTop, inline bool
	lp, kind := 0.0, numMissing
	n := 0
	for s.member(&n) {
		ok := true
		switch string(s.key) {
		case "token":
			tok, haveTok, ok = s.rawString()
		case "logprob":
			lp, kind, ok = s.float()
		case "top_logprobs":
			if haveTok && !inline && !haveTop {
				inline = true
				a.startAlts()
				ok = a.listTop(s, keyToken, tok, true, 0, numMissing)
			} else {
				top, haveTop = s.span(), true
				ok = s.err == nil
			}
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
	if !inline {
		a.startAlts()
		if haveTop {
			a.listTop(&top, keyToken, tok, haveTok, lp, kind)
		}
	}
	a.token(lp, kind)
	return true
}

// Names of the key that identifies a listed token.
const (
	keyToken = "token" // OpenAI: the token text
	keyID    = "id"    // TGI: the token id
)

// listTop reads a list of alternatives [{<keyName>, logprob, ...}] (chat
// top_logprobs, TGI top_tokens), at most MaxTopK of them. The chosen token
// is recognised by its key when it has one, else by its logprob.
func (a *Accumulator) listTop(s *scanner, keyName string, chosenKey []byte, haveKey bool, clp float64, ck numKind) bool {
	if !s.enter('[') {
		return s.err == nil
	}
	limit := a.o.MaxTopK
	n := 0
	for s.elem(&n) {
		if n > limit {
			if !s.skip() {
				return false
			}
			continue
		}
		if !s.enter('{') {
			if s.err != nil {
				return false
			}
			continue
		}
		var key []byte
		var haveK bool
		lp, kind := 0.0, numMissing
		m := 0
		for s.member(&m) {
			ok := true
			switch {
			case string(s.key) == "logprob":
				lp, kind, ok = s.float()
			case string(s.key) == keyName && keyName == keyID:
				key, haveK, ok = s.rawNumber()
			case string(s.key) == keyName:
				key, haveK, ok = s.rawString()
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
		var chosen bool
		if haveKey {
			chosen = haveK && bytes.Equal(key, chosenKey)
		} else {
			chosen = usable(clp, ck) && kind == numFinite && lp == clp
		}
		a.alternative(lp, kind, chosen)
	}
	return s.err == nil
}
