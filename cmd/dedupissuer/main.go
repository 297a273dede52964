// Command dedupissuer is an OpenID Connect issuer on 127.0.0.1 for trying
// authenticated tenants on one machine (examples/tenants-local.yaml): it
// serves the discovery document and key set the collector's oidc extension
// reads, writes the issuer's URL and an ID token per subject named on the
// command line (valid for an hour) as shell variables, and serves until
// interrupted.
//
//	go run ./cmd/dedupissuer -env issuer.env acme globex
//
// writes OIDC_ISSUER_URL, TOKEN_ACME and TOKEN_GLOBEX to issuer.env (to
// standard output without -env). -groups adds a groups claim to every token.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
)

func main() {
	env := flag.String("env", "", "write the shell variables to this file instead of standard output")
	audience := flag.String("audience", "otelcol-dedup", "the audience of the tokens (the oidc extension's audience)")
	groups := flag.String("groups", "", "comma-separated groups claim of every token (empty: none)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: dedupissuer [-env FILE] [-audience A] [-groups g1,g2] SUBJECT...")
		os.Exit(2)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	if err := run(*env, *audience, *groups, flag.Args(), stop); err != nil {
		fmt.Fprintf(os.Stderr, "dedupissuer: %v\n", err)
		os.Exit(1)
	}
}

// run serves the issuer until stop, once it wrote the variables to env.
func run(env, audience, groups string, subjects []string, stop <-chan os.Signal) error {
	iss, err := e2e.NewIssuer()
	if err != nil {
		return err
	}
	defer iss.Close()
	var claims map[string]any
	if groups != "" {
		claims = map[string]any{"groups": strings.Split(groups, ",")}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "export OIDC_ISSUER_URL=%s OIDC_AUDIENCE=%s\n", iss.URL, audience)
	for _, sub := range subjects {
		tok, err := iss.Token(audience, sub, claims)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "export TOKEN_%s=%s\n", strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(sub)), tok)
	}
	if err := write(env, b.String()); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "dedupissuer: issuer %s serving until interrupted\n", iss.URL)
	<-stop
	return nil
}

// write writes text to path, or to standard output when path is empty; the
// file appears whole (renamed into place), so a reader waiting for it never
// sees half of it.
func write(path, text string) error {
	if path == "" {
		_, err := io.WriteString(os.Stdout, text)
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
