package gateway

// validTraceparent checks the version-00 form: 00-<32 hex>-<16 hex>-<2 hex>,
// with non-zero trace and parent ids.
func validTraceparent(tp string) bool {
	if len(tp) != 55 || tp[:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return false
	}
	if !isLowerHex(tp[3:35]) || !isLowerHex(tp[36:52]) || !isLowerHex(tp[53:55]) {
		return false
	}
	return tp[3:35] != "00000000000000000000000000000000" && tp[36:52] != "0000000000000000"
}

func isLowerHex(s string) bool {
	for i := range len(s) {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
