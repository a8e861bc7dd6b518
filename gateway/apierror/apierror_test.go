package apierror

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/vigil-gw/vigil/exchange"
)

func TestWriteShape(t *testing.T) {
	for _, c := range []struct {
		status int
		typ    string
	}{
		{400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
		{404, "not_found_error"}, {408, "timeout_error"}, {409, "invalid_request_error"},
		{413, "request_too_large"}, {429, "rate_limit_error"}, {500, "api_error"}, {502, "api_error"},
		{503, "overloaded_error"}, {504, "timeout_error"},
	} {
		rec := httptest.NewRecorder()
		WriteShape(rec, New(c.status, "x", "y", "the message", exchange.ClassBadRequest), ShapeAnthropic)
		var b struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if rec.Code != c.status || json.Unmarshal(rec.Body.Bytes(), &b) != nil || b.Type != "error" || b.Error.Type != c.typ || b.Error.Message != "the message" {
			t.Errorf("%d: %d %s", c.status, rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	WriteShape(rec, BadRequest("bad"), ShapeOpenAI)
	if rec.Code != http.StatusBadRequest || rec.Body.String() != `{"error":{"message":"bad","type":"invalid_request_error","code":"invalid_request"}}` {
		t.Errorf("OpenAI shape: %d %s", rec.Code, rec.Body)
	}
}
