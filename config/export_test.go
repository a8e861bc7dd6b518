package config

// DefaultBackend is defaultBackend, for the external tests: the default
// of a key of a list element ("backends[].weight") is the element's own.
var DefaultBackend = defaultBackend
