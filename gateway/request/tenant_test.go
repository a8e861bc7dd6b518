package request

import (
	"net/http"
	"strings"
	"testing"
)

func TestTenants(t *testing.T) {
	var labelled []string
	label := func(v string) string { labelled = append(labelled, v); return v }
	r, _ := http.NewRequest("GET", "/", nil)
	tn := NewTenants("x-tenant", label)
	r.Header.Set("X-Tenant", "team-a")
	if got := tn.Of(r); got != "team-a" {
		t.Errorf("plain tenant = %q, want team-a", got)
	}
	for _, v := range []string{"team a", "sk-abc", "Bearer abc", strings.Repeat("a", maxTenantLen+1)} {
		r.Header.Set("X-Tenant", v)
		if got := tn.Of(r); got != hashTenant(v) {
			t.Errorf("tenant %q = %q, want its hash %q", v, got, hashTenant(v))
		}
	}
	r.Header.Set("Authorization", "Bearer sk-secret-key-0123456789")
	if got := NewTenants("authorization", label).Of(r); got != "sha256:fe9dff2e2230" {
		t.Errorf("credential tenant = %q, want sha256:fe9dff2e2230", got)
	}
	if len(labelled) != 6 {
		t.Errorf("label called for %q, want each of the 6 tenants", labelled)
	}
	r.Header.Del("X-Tenant")
	if got := tn.Of(r); got != "" {
		t.Errorf("no header: %q, want empty", got)
	}
	if got := NewTenants("", label).Of(r); got != "" {
		t.Errorf("no tenant header configured: %q", got)
	}
	if h := hashTenant("Bearer abc"); h != hashTenant("abc") || len(h) != len("sha256:")+12 || strings.Contains(h, "abc") {
		t.Errorf("hashTenant = %q", h)
	}
}
