package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Environment handling.
//
// With Options.Getenv nil, the SDK and the OTLP exporter read the process
// environment themselves, with their standard rules (OTEL_TRACES_SAMPLER*,
// OTEL_EXPORTER_OTLP_*, OTEL_BSP_*); Vigil only decides whether to pass a
// sampler. The resource variables are always read here, through getenv,
// with the rules of the SDK's own detector (go.opentelemetry.io/otel/sdk
// v1.47.0 resource/env.go).
//
// With Options.Getenv set (tests, embedding), the sampler and exporter
// variables below are read through it and handed to the SDK as explicit
// options, which take precedence over the process environment. Variables
// not listed (TLS certificates, compression, OTEL_BSP_*) still come from
// the process environment.

const (
	envServiceName        = "OTEL_SERVICE_NAME"
	envResourceAttributes = "OTEL_RESOURCE_ATTRIBUTES"
	envTracesSampler      = "OTEL_TRACES_SAMPLER"
	envTracesSamplerArg   = "OTEL_TRACES_SAMPLER_ARG"
)

// envResource is a resource.Detector for OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES read through getenv. OTEL_SERVICE_NAME wins
// over a service.name in OTEL_RESOURCE_ATTRIBUTES, as in the SDK.
type envResource struct{ getenv func(string) string }

var _ resource.Detector = envResource{}

// Detect implements resource.Detector.
func (d envResource) Detect(context.Context) (*resource.Resource, error) {
	var attrs []attribute.KeyValue
	var invalid []string
	if s := strings.TrimSpace(d.getenv(envResourceAttributes)); s != "" {
		for p := range strings.SplitSeq(s, ",") {
			k, v, ok := strings.Cut(p, "=")
			if !ok {
				invalid = append(invalid, p)
				continue
			}
			v = strings.TrimSpace(v)
			if u, err := url.PathUnescape(v); err == nil {
				v = u
			}
			attrs = append(attrs, attribute.String(strings.TrimSpace(k), v))
		}
	}
	if s := strings.TrimSpace(d.getenv(envServiceName)); s != "" {
		attrs = append(attrs, attribute.String("service.name", s))
	}
	res := resource.NewSchemaless(attrs...) // later duplicates win
	if len(invalid) > 0 {
		return res, fmt.Errorf("%w: %s: missing value in %q", resource.ErrPartialResource, envResourceAttributes, invalid)
	}
	return res, nil
}

// samplerFromEnv mirrors the SDK's reading of OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG (go.opentelemetry.io/otel/sdk v1.47.0
// trace/sampler_env.go) for a getenv other than os.Getenv. Like the SDK it
// returns a usable sampler (or nil: the SDK default) together with any
// error, which the caller reports and otherwise ignores.
func samplerFromEnv(getenv func(string) string) (sdktrace.Sampler, error) {
	name := strings.ToLower(strings.TrimSpace(getenv(envTracesSampler)))
	arg := strings.TrimSpace(getenv(envTracesSamplerArg))
	ratio := func() (sdktrace.Sampler, error) {
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1), nil
		}
		v, err := strconv.ParseFloat(arg, 64)
		switch {
		case err != nil:
			return sdktrace.TraceIDRatioBased(1), fmt.Errorf("%s: %w", envTracesSamplerArg, err)
		case v < 0 || v > 1:
			return sdktrace.TraceIDRatioBased(1), fmt.Errorf("%s: trace id ratio %v outside [0, 1]", envTracesSamplerArg, v)
		}
		return sdktrace.TraceIDRatioBased(v), nil
	}
	switch name {
	case "":
		return nil, nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return ratio()
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		s, err := ratio()
		return sdktrace.ParentBased(s), err
	default:
		return nil, fmt.Errorf("%s: unsupported sampler %q", envTracesSampler, name)
	}
}

// otlpOptionsFromEnv reads the OTLP exporter variables through getenv
// (the per-signal TRACES_ variant wins over the general one, as in the
// exporter) and turns them into explicit exporter options.
func otlpOptionsFromEnv(getenv func(string) string) ([]otlptracegrpc.Option, error) {
	get := func(name string) string {
		if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_" + name)); v != "" {
			return v
		}
		return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_" + name))
	}
	var opts []otlptracegrpc.Option
	var errs []error
	if v := get("ENDPOINT"); v != "" {
		if strings.Contains(v, "://") {
			// http:// means plaintext, https:// TLS, as in the exporter.
			opts = append(opts, otlptracegrpc.WithEndpointURL(v))
		} else {
			opts = append(opts, otlptracegrpc.WithEndpoint(v))
		}
	}
	if v := get("INSECURE"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("OTEL_EXPORTER_OTLP_INSECURE: %w", err))
		} else if b {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
	}
	if v := get("HEADERS"); v != "" {
		h := map[string]string{}
		for p := range strings.SplitSeq(v, ",") {
			k, val, ok := strings.Cut(p, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				errs = append(errs, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: bad entry %q", p))
				continue
			}
			if u, err := url.PathUnescape(strings.TrimSpace(val)); err == nil {
				val = u
			}
			h[k] = val
		}
		opts = append(opts, otlptracegrpc.WithHeaders(h))
	}
	if v := get("TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			errs = append(errs, fmt.Errorf("OTEL_EXPORTER_OTLP_TIMEOUT: %q is not a number of milliseconds", v))
		} else {
			opts = append(opts, otlptracegrpc.WithTimeout(time.Duration(ms)*time.Millisecond))
		}
	}
	return opts, errors.Join(errs...)
}
