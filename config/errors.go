package config

import (
	"errors"
	"strconv"
	"strings"
)

// ErrUnknownKey is wrapped by the [FieldError] of a key that is not in the schema.
var ErrUnknownKey = errors.New("unknown key")

// A FieldError is a problem with one configuration value. [Load], [Config.Validate]
// and [Config.ValidateServe] return FieldErrors, joined with [errors.Join] when there
// are several.
type FieldError struct {
	// File is the configuration file. Empty: not from a file.
	File string
	// Line is the line in File, from 1. Zero: unknown.
	Line int
	// Path is the key's path, e.g. "backends[1].url", or for [Config.ApplyEnv] the
	// variable, e.g. "VIGIL_BACKENDS[1].url". Empty: the whole document.
	Path string
	// Err says what is wrong.
	Err error
}

// Error formats e as "file:line: path: message", leaving out what is unknown.
func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		if e.File != "" {
			b.WriteString(e.File)
			b.WriteByte(':')
		} else {
			b.WriteString("line ")
		}
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns e.Err.
func (e *FieldError) Unwrap() error { return e.Err }

// joinPath appends p to prefix: "a" + "b" is "a.b", "a" + "[1]" is "a[1]".
func joinPath(prefix, p string) string {
	switch {
	case prefix == "":
		return p
	case p == "":
		return prefix
	case p[0] == '[':
		return prefix + p
	}
	return prefix + "." + p
}

func indexPath(prefix string, i int) string {
	return prefix + "[" + strconv.Itoa(i) + "]"
}

// errList collects FieldErrors in order.
type errList []error

// add records err, if not nil, as the error of path.
func (l *errList) add(path string, err error) {
	if err != nil {
		*l = append(*l, &FieldError{Path: path, Err: err})
	}
}

// nest records err, the result of a nested Validate, with its paths put under prefix.
// Joined errors are flattened so that each line names its full path.
func (l *errList) nest(prefix string, err error) {
	switch e := err.(type) {
	case nil:
	case interface{ Unwrap() []error }:
		for _, c := range e.Unwrap() {
			l.nest(prefix, c)
		}
	case *FieldError:
		c := *e
		c.Path = joinPath(prefix, e.Path)
		*l = append(*l, &c)
	default:
		l.add(prefix, err)
	}
}

// err returns the collected errors joined, or nil.
func (l errList) err() error { return errors.Join(l...) }
