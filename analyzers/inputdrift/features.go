// Package inputdrift turns prompt features into signal 1, input drift: a
// reference window of prompts against the current one, tested per feature
// (KS and PSI for numeric features, chi-square and PSI for categorical ones)
// and jointly (share of current prompts beyond the reference's robust
// Mahalanobis cutoff).
package inputdrift

import (
	"encoding/json"
	"errors"
	"math"
	"unicode"
	"unicode/utf8"

	"github.com/vigil-gw/vigil/analyzers/inputdrift/content"
)

// Numeric features, in the order of Features.Vector.
const (
	FeatChars       = iota // characters (runes) of all prompt text
	FeatTokens             // prompt tokens, estimated as ceil(chars/4): read as the prompt is sent, before a backend counts them
	FeatMessages           // chat messages (1 for a plain prompt); a top-level system text counts as one
	FeatLatin              // share of characters that are Latin letters
	FeatCJK                // share that are Han, Hiragana, Katakana or Hangul
	FeatCyrillic           // share that are Cyrillic letters
	FeatDigits             // share that are decimal digits
	FeatPunct              // share that are punctuation or symbols
	FeatSpace              // share that are white space
	FeatMaxTokens          // max_tokens / max_completion_tokens / max_new_tokens / max_output_tokens; NaN when absent
	FeatTemperature        // NaN when absent
	FeatTopP               // NaN when absent
	NumFeatures
)

// Categorical features.
const (
	CatSystemPrompt = iota // "true" when a system (or developer) message is present
	CatCodeBlock           // "true" when the text contains a ``` code fence
	CatModel               // the requested model
	NumCategorical
)

// FeatureNames are the names of the numeric features, as used in config,
// metrics labels and /admin/signals.
var FeatureNames = [NumFeatures]string{
	"prompt_chars", "prompt_tokens", "message_count", "script_latin", "script_cjk",
	"script_cyrillic", "script_digits", "script_punct", "script_space",
	"max_tokens", "temperature", "top_p",
}

// CategoricalNames are the names of the categorical features.
var CategoricalNames = [NumCategorical]string{"system_prompt", "code_block", "model"}

// Features describe one prompt. The zero value is an empty prompt.
type Features struct {
	Vector [NumFeatures]float64
	System bool
	Code   bool
	Model  string
	// Content is what the prompt is about, when ExtractText read it: the
	// caller's Doc. Nil otherwise.
	Content *content.Doc
}

// Category returns categorical feature i as a string.
func (f *Features) Category(i int) string {
	switch i {
	case CatSystemPrompt:
		return boolString(f.System)
	case CatCodeBlock:
		return boolString(f.Code)
	case CatModel:
		return f.Model
	}
	return ""
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// ErrNoPrompt means the body has no prompt text field that Extract knows.
var ErrNoPrompt = errors.New("no prompt in request body")

// API is the request format a body is read as.
type API uint8

// The request formats ExtractAPI reads.
const (
	// Chat is what Extract reads: OpenAI chat and completions, embeddings
	// and TGI generate requests.
	Chat API = iota
	// Responses is the OpenAI Responses API (POST /v1/responses):
	// instructions count as a system message; input is a string (one user
	// message) or a list of items. Every item counts as a message, as
	// chat's tool and assistant messages do; its text is that of its
	// content (a string or input_text parts), so items without content
	// (function_call, function_call_output, ...) add a message without
	// text. max_output_tokens is the max_tokens feature.
	Responses
	// Messages is the Anthropic Messages API (POST /v1/messages): system
	// (a string or text blocks) counts as a system message; messages are
	// read as chat's, only text blocks adding text (image, tool_use and
	// tool_result blocks add none).
	Messages
)

// Extract computes the features of an OpenAI chat or completions request,
// an embeddings request or a TGI generate request. It reads the JSON once;
// text is classified as it is scanned, without copying it, so the cost is
// one allocation per message, never per character.
func Extract(body []byte) (Features, error) { return ExtractAPI(Chat, body) }

// ExtractAPI is Extract for a body of the given format. The same prompt
// (system text, messages, sampling parameters) gives the same features
// whichever API carries it.
func ExtractAPI(api API, body []byte) (Features, error) {
	if f, decided, err := extractFast(api, body); decided {
		return f, err
	}
	return extractJSON(api, body)
}

// ExtractText is ExtractAPI that also reads what the prompt is about into
// d, through r (both the caller's, reused: no allocation), keeping the
// terms' text when keepText; Features.Content is then d. A body only
// encoding/json can read (a key with an escape, a key twice: see fast.go)
// gets its features but no content.
func ExtractText(api API, body []byte, r *content.Reader, d *content.Doc, keepText bool) (Features, error) {
	r.Reset(d, keepText)
	req := request{api: api}
	req.text.rd = r
	if req.scanFast(body) {
		f, err := req.features()
		if err == nil {
			r.Finish()
			f.Content = d
		}
		return f, err
	}
	r.Reset(d, keepText)
	return extractJSON(api, body)
}

// extractJSON is ExtractAPI with encoding/json: the reference that the
// fast path (fast.go) must agree with, and what decides where it gives up.
func extractJSON(api API, body []byte) (Features, error) {
	r := request{api: api}
	if err := json.Unmarshal(body, &r); err != nil {
		return Features{}, err
	}
	return r.features()
}

// features computes the features of a decoded request.
func (r *request) features() (Features, error) {
	var f Features
	t := &r.text
	switch {
	case r.messages > 0:
		f.Vector[FeatMessages] = float64(r.messages)
	case t.seen:
		f.Vector[FeatMessages] = 1
	default:
		return f, ErrNoPrompt
	}
	f.Vector[FeatChars] = float64(t.chars)
	f.Vector[FeatTokens] = math.Ceil(float64(t.chars) / 4)
	share := func(n int) float64 {
		if t.chars == 0 {
			return 0
		}
		return float64(n) / float64(t.chars)
	}
	f.Vector[FeatLatin] = share(t.latin)
	f.Vector[FeatCJK] = share(t.cjk)
	f.Vector[FeatCyrillic] = share(t.cyrillic)
	f.Vector[FeatDigits] = share(t.digits)
	f.Vector[FeatPunct] = share(t.punct)
	f.Vector[FeatSpace] = share(t.space)
	p := r.Parameters
	f.Vector[FeatMaxTokens] = first(r.MaxTokens, r.MaxCompletionTokens, p.MaxNewTokens)
	f.Vector[FeatTemperature] = first(r.Temperature, p.Temperature)
	f.Vector[FeatTopP] = first(r.TopP, p.TopP)
	f.System = r.system
	f.Code = t.code
	f.Model = r.Model
	return f, nil
}

func first(vs ...*float64) float64 {
	for _, v := range vs {
		if v != nil {
			return *v
		}
	}
	return math.NaN()
}

// request is what Extract decodes. Text fields decode into the shared
// textStats through scanner types that never build strings.
type request struct {
	Model               string   `json:"model"`
	MaxTokens           *float64 `json:"max_tokens"`
	MaxCompletionTokens *float64 `json:"max_completion_tokens"`
	Temperature         *float64 `json:"temperature"`
	TopP                *float64 `json:"top_p"`
	Parameters          struct {
		MaxNewTokens *float64 `json:"max_new_tokens"`
		Temperature  *float64 `json:"temperature"`
		TopP         *float64 `json:"top_p"`
	} `json:"parameters"`

	text     textStats
	messages int
	system   bool
	api      API // the format being read
}

// UnmarshalJSON decodes the scalar fields normally and scans the text ones.
func (r *request) UnmarshalJSON(b []byte) error {
	switch r.api {
	case Responses:
		return r.unmarshalResponses(b)
	case Messages:
		return r.unmarshalMessages(b)
	}
	type plain request // without this method
	var v struct {
		*plain
		Messages []message `json:"messages"`
		Prompt   textField `json:"prompt"`
		Input    textField `json:"input"`
		Inputs   textField `json:"inputs"`
	}
	v.plain = (*plain)(r)
	v.Prompt.t, v.Input.t, v.Inputs.t = &r.text, &r.text, &r.text
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	r.addMessages(v.Messages)
	return nil
}

// unmarshalResponses decodes an OpenAI Responses request.
func (r *request) unmarshalResponses(b []byte) error {
	var v struct {
		Model           string     `json:"model"`
		Instructions    systemText `json:"instructions"`
		Input           itemsField `json:"input"`
		MaxOutputTokens *float64   `json:"max_output_tokens"`
		Temperature     *float64   `json:"temperature"`
		TopP            *float64   `json:"top_p"`
	}
	v.Instructions.t, v.Input.r = &r.text, r
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	r.Model, r.MaxTokens, r.Temperature, r.TopP = v.Model, v.MaxOutputTokens, v.Temperature, v.TopP
	r.addSystem(v.Instructions.present)
	return nil
}

// unmarshalMessages decodes an Anthropic Messages request.
func (r *request) unmarshalMessages(b []byte) error {
	var v struct {
		Model       string     `json:"model"`
		System      systemText `json:"system"`
		Messages    []message  `json:"messages"`
		MaxTokens   *float64   `json:"max_tokens"`
		Temperature *float64   `json:"temperature"`
		TopP        *float64   `json:"top_p"`
	}
	v.System.t = &r.text
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	r.Model, r.MaxTokens, r.Temperature, r.TopP = v.Model, v.MaxTokens, v.Temperature, v.TopP
	r.addMessages(v.Messages)
	r.addSystem(v.System.present)
	return nil
}

// addMessages counts msgs as the request's messages.
func (r *request) addMessages(msgs []message) {
	r.messages = len(msgs)
	for i := range msgs {
		if msgs[i].system {
			r.system = true
		}
		r.text.merge(&msgs[i].text)
	}
}

// addSystem counts a top-level system text (Responses instructions,
// Messages system) as one more message, a system one, as chat carries it.
func (r *request) addSystem(present bool) {
	if present {
		r.messages++
		r.system = true
	}
}

// systemText is a top-level system text: present unless absent or null,
// its text scanned as a textField's.
type systemText struct {
	t       *textStats
	present bool
}

func (f *systemText) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	f.present = true
	return (&textField{f.t}).UnmarshalJSON(b)
}

// itemsField is a Responses input: a string is one user message, an array
// a list of items read as chat messages; other values add nothing.
type itemsField struct{ r *request }

func (f *itemsField) UnmarshalJSON(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	switch b[0] {
	case '"':
		f.r.text.scan(b)
		f.r.messages = 1
	case '[':
		var items []message
		if err := json.Unmarshal(b, &items); err != nil {
			return err
		}
		f.r.addMessages(items)
	}
	return nil
}

// message is one chat message.
type message struct {
	system bool
	text   textStats
}

func (m *message) UnmarshalJSON(b []byte) error {
	var v struct {
		Role    roleField `json:"role"`
		Content textField `json:"content"`
	}
	v.Content.t = &m.text
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	m.system = bool(v.Role)
	return nil
}

// roleField is true for the system and developer roles.
type roleField bool

func (r *roleField) UnmarshalJSON(b []byte) error {
	s := string(b) // the compiler does not allocate for this comparison
	*r = s == `"system"` || s == `"developer"`
	return nil
}

// textField scans a JSON string, an array of strings, or an array of
// content parts ({"type": "text", "text": "..."}) into t. Other values
// (token id arrays, null) add nothing.
type textField struct{ t *textStats }

func (f *textField) UnmarshalJSON(b []byte) error {
	if f.t == nil || len(b) == 0 {
		return nil
	}
	switch b[0] {
	case '"':
		f.t.scan(b)
	case '[':
		var parts []partField
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		for i := range parts {
			f.t.merge(&parts[i].text)
		}
		f.t.seen = true
	}
	return nil
}

// partField is one element of a text array: a string or a content part.
type partField struct{ text textStats }

func (p *partField) UnmarshalJSON(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	switch b[0] {
	case '"':
		p.text.scan(b)
	case '{':
		var v struct {
			Text textField `json:"text"`
		}
		v.Text.t = &p.text
		return json.Unmarshal(b, &v)
	}
	return nil
}

// textStats counts character classes of prompt text and, when rd is set,
// hands every character to the content reader.
type textStats struct {
	rd                                                       *content.Reader
	seen                                                     bool
	chars, latin, cjk, cyrillic, digits, punct, space, other int
	code                                                     bool
	ticks                                                    int // run of '`' in progress
}

func (t *textStats) merge(o *textStats) {
	t.seen = t.seen || o.seen
	t.chars += o.chars
	t.latin += o.latin
	t.cjk += o.cjk
	t.cyrillic += o.cyrillic
	t.digits += o.digits
	t.punct += o.punct
	t.space += o.space
	t.other += o.other
	t.code = t.code || o.code
}

// scan classifies the characters of a JSON string literal (quotes
// included), decoding escapes on the fly.
func (t *textStats) scan(lit []byte) {
	t.seen = true
	if len(lit) < 2 {
		return
	}
	s := lit[1 : len(lit)-1]
	for i := 0; i < len(s); {
		c := s[i]
		var r rune
		switch {
		case c == '\\' && i+1 < len(s):
			r, i = unescape(s, i)
		case c < utf8.RuneSelf:
			r = rune(c)
			i++
		default:
			var n int
			r, n = utf8.DecodeRune(s[i:])
			i += n
		}
		t.add(r)
		if t.rd != nil {
			t.rd.Rune(r)
		}
	}
	t.ticks = 0
	if t.rd != nil {
		t.rd.Break()
	}
}

// unescape decodes the escape at s[i] ('\\') and returns the rune and the
// index after it.
func unescape(s []byte, i int) (rune, int) {
	switch s[i+1] {
	case 'n':
		return '\n', i + 2
	case 't':
		return '\t', i + 2
	case 'r':
		return '\r', i + 2
	case 'b':
		return '\b', i + 2
	case 'f':
		return '\f', i + 2
	case 'u':
		r := hex4(s, i+2)
		if r < 0 {
			return utf8.RuneError, i + 2
		}
		if utf16IsHigh(r) && i+11 < len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
			if lo := hex4(s, i+8); lo >= 0xDC00 && lo <= 0xDFFF {
				return (r-0xD800)<<10 + (lo - 0xDC00) + 0x10000, i + 12
			}
		}
		return r, i + 6
	}
	return rune(s[i+1]), i + 2 // \" \\ \/
}

func utf16IsHigh(r rune) bool { return r >= 0xD800 && r <= 0xDBFF }

func hex4(s []byte, i int) rune {
	if i+4 > len(s) {
		return -1
	}
	var r rune
	for _, c := range s[i : i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return -1
		}
	}
	return r
}

func (t *textStats) add(r rune) {
	t.chars++
	if r == '`' {
		t.ticks++
		if t.ticks >= 3 {
			t.code = true
		}
	} else {
		t.ticks = 0
	}
	switch {
	case r < utf8.RuneSelf:
		switch c := byte(r); {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			t.latin++
		case c >= '0' && c <= '9':
			t.digits++
		case c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			t.space++
		case c > ' ' && c < 0x7f:
			t.punct++
		default:
			t.other++
		}
	case unicode.Is(unicode.Latin, r):
		t.latin++
	case unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul):
		t.cjk++
	case unicode.Is(unicode.Cyrillic, r):
		t.cyrillic++
	case unicode.IsDigit(r):
		t.digits++
	case unicode.IsSpace(r):
		t.space++
	case unicode.IsPunct(r) || unicode.IsSymbol(r):
		t.punct++
	default:
		t.other++
	}
}
