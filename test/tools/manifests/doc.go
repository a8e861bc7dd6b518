// Package manifests has no code of its own: its tests check the files in
// deploy/ offline, with the parsers of the programs that read them, since
// neither a cluster nor a Docker engine runs where Vigil is built. The
// Kubernetes manifests are decoded strictly into k8s.io/api's
// typed objects, docker-compose.yaml is loaded by compose-spec's own loader
// and the Prometheus rules and config by Prometheus's packages; then the
// references between them are followed (selectors, ports, probes, mounted
// files, service names). They live in the test/tools module so that the main
// go.mod does not carry Kubernetes, Compose or Prometheus.
//
//	go test -C test/tools -count=1 ./manifests/
//	go test -C test/tools -count=1 ./manifests/ -deploy=/abs/path/to/deploy
//
// The second form checks another copy of deploy/ (its parent must hold the
// Dockerfile that docker-compose.yaml builds).
package manifests
