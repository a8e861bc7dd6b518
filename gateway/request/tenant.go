package request

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// Tenants names the caller of a request for the usage metrics and
// GET /admin/usage: the value of the configured header (usage.tenant_header),
// as a label value of bounded cardinality. It is safe for concurrent use.
//
// A credential never becomes a label: the value of Authorization,
// Proxy-Authorization, Api-Key or X-Api-Key (or of any header configured
// with such a value) is reduced to "sha256:" and 12 hex digits of its
// hash, enough to tell keys apart, not to recover one. So is any value
// longer than maxTenantLen or with characters other than letters, digits
// and "._-:@/". The label function given to NewTenants bounds the
// cardinality (the gateway's keeps the first distinct values; later ones
// are "other").
type Tenants struct {
	header     string // canonical header name; "" when no tenant is taken
	credential bool   // the header carries credentials: always hashed
	label      func(string) string
}

// maxTenantLen is the longest tenant value kept as it is.
const maxTenantLen = 64

// NewTenants takes the tenant from header ("" for none) and makes each
// value a label with label, which must be safe for concurrent use.
func NewTenants(header string, label func(string) string) *Tenants {
	h := http.CanonicalHeaderKey(header)
	switch h {
	case "Authorization", "Proxy-Authorization", "Api-Key", "X-Api-Key":
		return &Tenants{header: h, credential: true, label: label}
	}
	return &Tenants{header: h, label: label}
}

// Of returns r's tenant label; "" without the header.
func (t *Tenants) Of(r *http.Request) string {
	if t.header == "" {
		return ""
	}
	v := r.Header.Get(t.header)
	if v == "" {
		return ""
	}
	if t.credential || !plainTenant(v) {
		return t.label(hashTenant(v))
	}
	return t.label(v)
}

// plainTenant reports whether v may be a label value as it is.
func plainTenant(v string) bool {
	if len(v) > maxTenantLen {
		return false
	}
	for i := range len(v) {
		c := v[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("._-:@/", c) >= 0:
		default:
			return false
		}
	}
	// A value that looks like a bearer token or a key is hashed all the same.
	return !strings.HasPrefix(v, "sk-") && !strings.HasPrefix(strings.ToLower(v), "bearer")
}

// hashTenant returns a short, stable, one-way name for v. A bearer
// scheme is dropped first, so that a key hashes alike in any header.
func hashTenant(v string) string {
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		v = strings.TrimSpace(v[7:])
	}
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:6])
}
