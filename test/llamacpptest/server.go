package llamacpptest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/test/proctest"
)

// EnvDir names the environment variable that holds the directory whose
// node_modules has node-llama-cpp 3.21.1; ./test/run installs it (npm ci of
// test/llamacpp/package-lock.json) into a cache and sets the variable.
const EnvDir = "VIGIL_LLAMACPP_DIR"

// startAttempts bounds retries when another process takes the chosen port
// before the server binds it.
const startAttempts = 3

// Server is a running llama.cpp server (test/llamacpp/server.mjs) owned by
// one test: a vLLM-compatible subset of the OpenAI API over one model. It
// serves one request at a time; its methods are safe for concurrent use.
type Server struct {
	url  string
	name string
}

// URL returns the server's base URL, e.g. "http://127.0.0.1:41234"; the
// API is under /v1, /tokenize and /health.
func (s *Server) URL() string { return s.url }

// Name returns the model name the server answers to (the "model" field).
func (s *Server) Name() string { return s.name }

// Start runs server.mjs with the GGUF model at modelPath served as name on
// a free 127.0.0.1 port and waits until /health answers; the server stops
// at the end of the test. It skips the test when $VIGIL_LLAMACPP_DIR is
// unset and fails it when node or the install is missing.
func Start(t testing.TB, modelPath, name string) *Server {
	t.Helper()
	node, dir := nodeAndDir(t)
	script := filepath.Join(scriptDir(t), "server.mjs")
	return proctest.Start(t, startAttempts, func() (*Server, error) {
		addrs, err := proctest.FreePorts(1)
		if err != nil {
			return nil, err
		}
		_, port, _ := strings.Cut(addrs[0], ":")
		s := &Server{url: "http://" + addrs[0], name: name}
		err = proctest.Run(t, proctest.Service{
			Name:         "llamacpp server (" + name + ")",
			Path:         node,
			Args:         []string{script, "--model", modelPath, "--name", name, "--port", port},
			Env:          append(os.Environ(), EnvDir+"="+dir),
			Ready:        func() bool { return proctest.HTTPOK(s.url + "/health") },
			ReadyTimeout: 60 * time.Second,
		})
		return s, err
	})
}

// Divergence is llama.cpp's own full-vocabulary comparison of a model with
// its full-precision reference, teacher-forced over the same tokens.
type Divergence struct {
	Sequences int `json:"sequences"`
	// Positions is the number of compared positions: every token of every
	// sequence, each predicting the next one.
	Positions int `json:"positions"`
	// KLMean and KLMax are the mean and largest KL(reference ‖ other) in
	// nats over all positions.
	KLMean float64 `json:"kl_mean"`
	KLMax  float64 `json:"kl_max"`
	// Top1Agreement is the share of positions where both models' most
	// likely next tokens are the same.
	Top1Agreement float64 `json:"top1_agreement"`
	// RefTop1Prob is the reference's mean top-1 probability, which says how
	// peaked its distributions are.
	RefTop1Prob float64 `json:"reference_top1_prob_mean"`
	// Tokens holds each sequence's length in tokens.
	Tokens []int `json:"tokens"`
}

// Reference runs test/llamacpp/kl.mjs: each text, tokenized by the
// reference with BOS first, is evaluated on both GGUF files, and the
// full-vocabulary next-token distributions are compared at every position.
// It skips the test when $VIGIL_LLAMACPP_DIR is unset.
func Reference(t testing.TB, refPath, otherPath string, texts ...string) Divergence {
	t.Helper()
	return compare(t, map[string]any{"reference": refPath, "other": otherPath, "texts": texts})
}

// ReferenceTokens is Reference over token id sequences, evaluated exactly
// as given (no BOS is added).
func ReferenceTokens(t testing.TB, refPath, otherPath string, seqs ...[]int) Divergence {
	t.Helper()
	return compare(t, map[string]any{"reference": refPath, "other": otherPath, "token_ids": seqs})
}

func compare(t testing.TB, req map[string]any) Divergence {
	t.Helper()
	node, dir := nodeAndDir(t)
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), node, filepath.Join(scriptDir(t), "kl.mjs"))
	cmd.Env = append(os.Environ(), EnvDir+"="+dir)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kl.mjs: %v\n%s", err, stderr.Bytes())
	}
	var d Divergence
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("kl.mjs output %q: %v", out, err)
	}
	return d
}

// String formats d for logs and READMEs.
func (d Divergence) String() string {
	return fmt.Sprintf("KL mean %.4g nats (max %.3g), top-1 agreement %.1f%% over %d positions (reference top-1 p̄ %.2f)",
		d.KLMean, d.KLMax, 100*d.Top1Agreement, d.Positions, d.RefTop1Prob)
}

// nodeAndDir returns the node binary and the node-llama-cpp install
// directory, skipping the test when the directory is not configured.
func nodeAndDir(t testing.TB) (node, dir string) {
	t.Helper()
	dir = os.Getenv(EnvDir)
	if dir == "" {
		t.Skip(EnvDir + " unset: run ./test/run, which installs node-llama-cpp (llama.cpp) for these tests")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-llama-cpp", "package.json")); err != nil {
		t.Fatalf("%s=%s: node-llama-cpp is not installed there: %v", EnvDir, dir, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node (v20 or newer) is not on PATH; ./test/run installs it: %v", err)
	}
	return node, dir
}

// scriptDir returns test/llamacpp, found from this source file so that
// tests of any package can start the server.
func scriptDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("llamacpptest: cannot locate its source file")
	}
	return filepath.Join(filepath.Dir(file), "..", "llamacpp")
}
