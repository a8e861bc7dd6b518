package precision

import (
	"errors"
	"strconv"

	"github.com/vigil-gw/vigil/exchange"
)

// FromShadow compares the two sides of one shadow comparison (see
// exchange.Shadow): the greedy walk's two answers with Compare, a
// teacher-forced comparison's two scorings of the backend's continuation
// with CompareForced.
func FromShadow(sh *exchange.Shadow) (Comparison, error) {
	if sh.Method == exchange.ShadowTeacherForced {
		if len(sh.Continuation) == 0 {
			return Comparison{Method: MethodTeacherForced}, errors.New("precision: a teacher-forced comparison without its continuation")
		}
		b, err := ParsePromptLogprobs(sh.BackendBody, sh.PromptTokens)
		if err != nil {
			return Comparison{Method: MethodTeacherForced}, err
		}
		r, err := ParsePromptLogprobs(sh.ReferenceBody, sh.PromptTokens)
		if err != nil {
			return Comparison{Method: MethodTeacherForced}, err
		}
		// Each side's positions take their token from the continuation
		// both scored.
		cont := make([]Position, len(sh.Continuation))
		for i, id := range sh.Continuation {
			cont[i] = Position{Token: "token_id:" + strconv.Itoa(id)}
		}
		if err := alignForced(cont, b); err != nil {
			return Comparison{Method: MethodTeacherForced}, err
		}
		return CompareForced(b, r)
	}
	parse := ParseChat
	if sh.Operation == exchange.OpCompletion {
		parse = ParseCompletion
	}
	b, err := parse(sh.BackendBody)
	if err != nil {
		return Comparison{Method: MethodGreedyWalk}, err
	}
	r, err := parse(sh.ReferenceBody)
	if err != nil {
		return Comparison{Method: MethodGreedyWalk}, err
	}
	return Compare(b, r), nil
}
