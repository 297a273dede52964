// Command dedupissuer is an OpenID Connect issuer on 127.0.0.1 for trying
// authenticated tenants on one machine (examples/tenants-local.yaml): it
// serves the discovery document and key set the collector's oidc extension
// reads, writes the issuer's URL and an ID token per subject named on the
// command line (audience otelcol-dedup, valid for an hour) as shell
// variables, and serves until interrupted.
//
//	go run ./cmd/dedupissuer -env issuer.env acme globex
//
// writes OIDC_ISSUER_URL, OIDC_AUDIENCE, TOKEN_ACME and TOKEN_GLOBEX to
// issuer.env (to standard output without -env).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
)

const audience = "otelcol-dedup"

func main() {
	env := flag.String("env", "", "write the shell variables to this file instead of standard output")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: dedupissuer [-env FILE] SUBJECT...")
		os.Exit(2)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	if err := run(*env, flag.Args(), stop); err != nil {
		fmt.Fprintf(os.Stderr, "dedupissuer: %v\n", err)
		os.Exit(1)
	}
}

// run serves the issuer until stop, once it wrote the variables to env.
func run(env string, subjects []string, stop <-chan os.Signal) error {
	iss, err := e2e.NewIssuer()
	if err != nil {
		return err
	}
	defer iss.Close()
	text := fmt.Sprintf("export OIDC_ISSUER_URL=%s OIDC_AUDIENCE=%s\n", iss.URL, audience)
	for _, sub := range subjects {
		tok, err := iss.Token(audience, sub, nil)
		if err != nil {
			return err
		}
		text += fmt.Sprintf("export TOKEN_%s=%s\n", strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(sub)), tok)
	}
	if env == "" {
		fmt.Print(text)
	} else if err := os.WriteFile(env+".tmp", []byte(text), 0o600); err != nil {
		return err
	} else if err := os.Rename(env+".tmp", env); err != nil { // whole: a reader waiting for the file never sees half
		return err
	}
	fmt.Fprintf(os.Stderr, "dedupissuer: issuer %s serving until interrupted\n", iss.URL)
	<-stop
	return nil
}
