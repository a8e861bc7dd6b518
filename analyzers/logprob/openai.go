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
	if !s.object() {
		return false
	}
	n := 0
	for s.Member(&n) {
		var ok bool
		switch string(s.Key()) {
		case "choices":
			ok = a.choices(s)
		case "id", "model", "usage":
			ok = a.member(s, &chatDialect)
		default:
			// Skipped here, not in member: the call would cost each of a
			// chunk's other keys.
			ok = s.Skip()
		}
		if !ok {
			return false
		}
	}
	return s.OK()
}

// member reads a member that the response objects of the OpenAI APIs
// share: id, model and usage, and for the Responses API status and
// incomplete_details. Any other is skipped.
func (a *Accumulator) member(s *scanner, d *dialect) bool {
	switch string(s.Key()) {
	case "id":
		return setString(s, &a.s.ID)
	case "model":
		return a.setModel(s)
	case "usage":
		return a.usage(s, d)
	case "status":
		if d.status {
			return a.status(s)
		}
	case "incomplete_details":
		if d.status {
			return a.incomplete(s)
		}
	}
	return s.Skip()
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
	if !s.Enter('[') {
		return s.OK()
	}
	n := 0
	for s.Element(&n) {
		if !a.choice(s) {
			return false
		}
	}
	return s.OK()
}

func (a *Accumulator) choice(s *scanner) bool {
	if !s.Enter('{') {
		return s.OK()
	}
	a.s.Choices = max(a.s.Choices, 1)
	n := 0
	for s.Member(&n) {
		var ok bool
		switch string(s.Key()) {
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
			ok = s.Skip()
		}
		if !ok {
			return false
		}
	}
	return s.OK()
}

// dialect is how the response objects of an OpenAI API name their
// members: the two counts of usage, and whether they have a status.
type dialect struct {
	out, prompt string
	status      bool
}

var (
	chatDialect      = dialect{out: "completion_tokens", prompt: "prompt_tokens"}
	responsesDialect = dialect{out: "output_tokens", prompt: "input_tokens", status: true}
)

// usage reads usage: {<d.out>, <d.prompt>}.
func (a *Accumulator) usage(s *scanner, d *dialect) bool {
	if !s.Enter('{') {
		return s.OK()
	}
	n := 0
	for s.Member(&n) {
		var ok, have bool
		switch key := s.Key(); {
		case string(key) == d.out:
			ok = setCount(s, &a.s.OutputTokens, &a.haveOut)
		case string(key) == d.prompt:
			ok = setCount(s, &a.s.PromptTokens, &have)
		default:
			ok = s.Skip()
		}
		if !ok {
			return false
		}
	}
	return s.OK()
}

// logprobs reads a choice's logprobs object in either shape. The legacy
// shape is three parallel arrays: token_logprobs and tokens are kept as
// spans (sub-slices, no copy) and walked in step with top_logprobs when it
// comes, as it does after them in both OpenAI's and vLLM's field order; in
// any other order the spans are walked at the end of the object. When the
// payload is cut short inside top_logprobs, the positions whose entry was
// wholly read still count.
func (a *Accumulator) logprobs(s *scanner) bool {
	if !s.Enter('{') {
		return s.OK()
	}
	var lps, toks, tops scanner
	var haveLps, haveToks, haveTops, zipped bool
	n := 0
	ok := true
	for ok && s.Member(&n) {
		switch string(s.Key()) {
		case "content", "refusal":
			ok = a.chatEntries(s)
		case "token_logprobs":
			lps, haveLps = s.span(), true
			ok = s.OK()
		case "tokens":
			toks, haveToks = s.span(), true
			ok = s.OK()
		case "top_logprobs":
			if haveLps && !zipped {
				zipped = true
				ok = a.legacy(&lps, optional(&toks, haveToks), s)
			} else {
				tops, haveTops = s.span(), true
				ok = s.OK()
			}
		default:
			ok = s.Skip()
		}
	}
	// Cut short before top_logprobs, the positions stay uncounted: whether
	// they had alternatives is unknown, and counting them without would make
	// a longer cut count fewer tokens.
	if haveLps && !zipped && s.OK() {
		a.legacy(&lps, optional(&toks, haveToks), optional(&tops, haveTops))
	}
	return s.OK()
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
	if !lps.Enter('[') {
		if top != nil {
			return top.Skip()
		}
		return true
	}
	if toks != nil && !toks.Enter('[') {
		toks = nil
	}
	topOpen := top != nil && top.Enter('[')
	if top != nil && !top.OK() {
		return false
	}
	var nl, nt, np int
	for lps.Element(&nl) {
		lp, kind, ok := lps.float()
		if !ok {
			break
		}
		var tok []byte
		haveTok := false
		if toks != nil {
			if !toks.Element(&nt) {
				toks = nil
			} else if tok, haveTok, ok = toks.rawString(); !ok {
				toks = nil
			}
		}
		a.startAlts()
		if topOpen {
			if top.Element(&np) {
				if !a.legacyTop(top, tok, haveTok, lp, kind) {
					return false
				}
			} else if topOpen = false; !top.OK() {
				return false
			}
		}
		a.token(lp, kind)
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

// legacyTop reads one top_logprobs dict {token: logprob}. The chosen token
// is recognised by its key, or by its logprob when tokens is absent.
func (a *Accumulator) legacyTop(s *scanner, tok []byte, haveTok bool, clp float64, ck numKind) bool {
	if !s.Enter('{') {
		return s.OK()
	}
	limit := a.o.MaxTopK + 1
	n := 0
	for s.Member(&n) {
		if n > limit {
			if !s.Skip() {
				return false
			}
			continue
		}
		key := s.Key()
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
	return s.OK()
}

func (a *Accumulator) chatEntries(s *scanner) bool {
	if !s.Enter('[') {
		return s.OK()
	}
	n := 0
	for s.Element(&n) {
		if !a.chatEntry(s) {
			return false
		}
	}
	return s.OK()
}

// chatEntry reads one logprobs.content entry. top_logprobs is read in the
// same pass when token came before it (OpenAI's and vLLM's order), else
// kept as a span and read at the end of the entry. The position counts
// only once the entry is wholly read.
func (a *Accumulator) chatEntry(s *scanner) bool {
	if !s.Enter('{') {
		return s.OK()
	}
	var tok []byte
	var top scanner
	var haveTok, haveTop, inline bool
	lp, kind := 0.0, numMissing
	n := 0
	for s.Member(&n) {
		ok := true
		switch string(s.Key()) {
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
				ok = s.OK()
			}
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
	if !s.Enter('[') {
		return s.OK()
	}
	limit := a.o.MaxTopK
	n := 0
	for s.Element(&n) {
		if n > limit {
			if !s.Skip() {
				return false
			}
			continue
		}
		if !s.Enter('{') {
			if !s.OK() {
				return false
			}
			continue
		}
		var key []byte
		var haveK bool
		lp, kind := 0.0, numMissing
		m := 0
		for s.Member(&m) {
			ok := true
			switch {
			case string(s.Key()) == "logprob":
				lp, kind, ok = s.float()
			case string(s.Key()) == keyName && keyName == keyID:
				key, haveK, ok = s.rawNumber()
			case string(s.Key()) == keyName:
				key, haveK, ok = s.rawString()
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
		var chosen bool
		if haveKey {
			chosen = haveK && bytes.Equal(key, chosenKey)
		} else {
			chosen = usable(clp, ck) && kind == numFinite && lp == clp
		}
		a.alternative(lp, kind, chosen)
	}
	return s.OK()
}
