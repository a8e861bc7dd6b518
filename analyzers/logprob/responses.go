package logprob

// This file walks the OpenAI Responses API (/v1/responses) as OpenAI and
// vLLM write it, when the client asked for logprobs (include:
// ["message.output_text.logprobs"], top_logprobs):
//
//	response      {id, object: "response", model, status, incomplete_details: {reason}, output: [item], usage: {input_tokens, output_tokens}}
//	item          {type: "message", role, content: [{type: "output_text", text, logprobs: [entry]}]}
//	stream event  {type, sequence_number, ...}: response.created / in_progress / completed / incomplete / failed carry
//	              {response}; response.output_text.delta carries {delta, logprobs: [entry]}
//	entry         as chat's: {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}
//
// A stream repeats its tokens: in response.output_text.done,
// response.content_part.done, response.output_item.done and the whole
// response of response.completed. Each is counted once: in a stream from
// the output_text.delta events only (the response objects of the
// response.* events give the id, model, usage and status), in a plain
// body from output[].content[].logprobs. Other event types are skipped.

// Kinds of a Responses object, by its "type".
const (
	respUnknown = iota // no type (a plain body) or not yet seen
	respDelta          // response.output_text.delta
	respOther          // any other event type
)

// responses reads a Responses body or stream event.
func (a *Accumulator) responses(s *scanner) bool {
	if !s.object() {
		return false
	}
	kind := respUnknown
	var lps scanner
	haveLps := false
	n := 0
	for s.Member(&n) {
		ok := true
		switch string(s.Key()) {
		case "type":
			var raw []byte
			var valid bool
			if raw, valid, ok = s.rawString(); valid {
				kind = respOther
				if string(raw) == "response.output_text.delta" {
					kind = respDelta
				}
			}
		case "logprobs":
			switch {
			case kind == respDelta:
				ok = a.textLogprobs(s)
			case kind == respUnknown && !haveLps:
				// The type may follow (no server writes it so).
				lps, haveLps = s.span(), true
				ok = s.OK()
			default:
				ok = s.Skip()
			}
		case "response":
			ok = a.response(s)
		case "output":
			// Only a plain body has output at the top: events nest it in
			// their response.
			ok = a.output(s)
		case "id", "model", "usage", "status", "incomplete_details":
			ok = a.member(s, &responsesDialect)
		default:
			// Skipped here, not in member: the call would cost each of a
			// delta event's other keys.
			ok = s.Skip()
		}
		if !ok {
			return false
		}
	}
	if !s.OK() {
		return false
	}
	if haveLps && kind == respDelta {
		a.textLogprobs(&lps)
	}
	return true
}

// response reads the response object of a response.* stream event; its
// output is skipped, as it repeats the deltas' tokens.
func (a *Accumulator) response(s *scanner) bool {
	if !s.Enter('{') {
		return s.OK()
	}
	n := 0
	for s.Member(&n) {
		if !a.member(s, &responsesDialect) {
			return false
		}
	}
	return s.OK()
}

// status reads a response's status: "completed" is the finish reason
// "stop"; an incomplete response's reason comes from incomplete_details.
func (a *Accumulator) status(s *scanner) bool {
	raw, valid, ok := s.rawString()
	if valid && string(raw) == "completed" {
		a.s.FinishReason = "stop"
	}
	return ok
}

// incomplete reads incomplete_details: {reason}, "max_output_tokens" being
// chat's "length".
func (a *Accumulator) incomplete(s *scanner) bool {
	if !s.Enter('{') {
		return s.OK()
	}
	n := 0
	for s.Member(&n) {
		if string(s.Key()) != "reason" {
			if !s.Skip() {
				return false
			}
			continue
		}
		raw, valid, ok := s.rawString()
		if !ok {
			return false
		}
		if valid {
			if string(raw) == "max_output_tokens" {
				a.s.FinishReason = "length"
			} else {
				a.s.FinishReason = finishOf(raw, a.s.FinishReason)
			}
		}
	}
	return s.OK()
}

// output reads output: [item], each item's content parts' logprobs (only
// output_text parts have them).
func (a *Accumulator) output(s *scanner) bool { return a.each(s, "content") }

// each reads the member key of each object of an array: of an output item
// its content, an array whose parts' "logprobs" each reads in turn.
func (a *Accumulator) each(s *scanner, key string) bool {
	if !s.Enter('[') {
		return s.OK()
	}
	n := 0
	for s.Element(&n) {
		if !s.Enter('{') {
			if !s.OK() {
				return false
			}
			continue
		}
		m := 0
		for s.Member(&m) {
			var ok bool
			switch {
			case string(s.Key()) != key:
				ok = s.Skip()
			case key == "content":
				ok = a.each(s, "logprobs")
			default:
				ok = a.textLogprobs(s)
			}
			if !ok {
				return false
			}
		}
		if !s.OK() {
			return false
		}
	}
	return s.OK()
}

// textLogprobs reads the logprobs of an output text: chat entries, of the
// one choice a response has.
func (a *Accumulator) textLogprobs(s *scanner) bool {
	a.s.Choices = max(a.s.Choices, 1)
	return a.chatEntries(s)
}
