// Package inject changes request and response bodies on their way through
// the gateway, so that the gateway can ask a backend for more than the
// client did and still hand the client the bytes it would have got:
// logprob injection (Injector) and its stripper (NewStripper), usage
// injection (InjectUsage) and its stripper (NewUsageStripper). It works on
// bytes, never decoding a response chunk, and knows nothing of the
// gateway's server.
package inject
