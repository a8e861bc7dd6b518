package sim

// planOne sizes the one choice of a request of the Responses or Messages
// API, which have no n and one prompt: as chat does, maxTokens (nil for
// none) is the length to generate, else Knobs.OutputTokens, cut at the
// context length; field is the name of maxTokens in the request, topK the
// number of alternatives listed per token.
func planOne(k Knobs, m lm, prompt, field string, maxTokens *int, topK int) (*choiceState, *apiError) {
	sp := sampling{n: 1, maxTokens: maxTokens, topK: topK, promptK: -1}
	if maxTokens != nil && *maxTokens < 1 {
		return nil, badRequest("%s must be at least 1, got %d.", field, *maxTokens)
	}
	plans, e := plan(k, []promptText{{text: prompt}}, sp)
	if e != nil {
		return nil, e
	}
	return startChoices(m, plans, 1, topK)[0], nil
}
