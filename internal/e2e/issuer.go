package e2e

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"time"
)

// Issuer is an OpenID Connect issuer on 127.0.0.1, as the collector's oidc
// authenticator extension sees one: a discovery document and a key set
// (JWKS) over HTTP, and ID tokens signed with a key made at start. Tokens
// are made with the standard library (RS256), so the tests need no JWT
// module.
type Issuer struct {
	// URL is the issuer's URL, the oidc extension's issuer_url.
	URL string

	srv *httptest.Server
	key *rsa.PrivateKey
}

const issuerKeyID = "e2e"

// NewIssuer starts an issuer on a free loopback port; Close stops it.
func NewIssuer() (*Issuer, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	iss := &Issuer{key: key}
	mux := http.NewServeMux()
	// The discovery document's fields the oidc extension (go-oidc) reads:
	// it verifies tokens and never sends a user to log in.
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"issuer": iss.URL, "jwks_uri": iss.URL + "/jwks",
			"id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"keys": []any{map[string]any{
			"kty": "RSA", "use": "sig", "alg": "RS256", "kid": issuerKeyID,
			"n": b64(key.N.Bytes()),
			"e": b64(big.NewInt(int64(key.E)).Bytes()),
		}}})
	})
	iss.srv = httptest.NewServer(mux) // listens on 127.0.0.1
	iss.URL = iss.srv.URL
	return iss, nil
}

// Close stops the issuer's server.
func (i *Issuer) Close() { i.srv.Close() }

// Token returns an ID token for subject with audience, valid for an hour,
// with the extra claims given (e.g. "groups", "team").
func (i *Issuer) Token(audience, subject string, extra map[string]any) (string, error) {
	now := time.Now()
	claims := map[string]any{
		"iss": i.URL, "sub": subject, "aud": audience,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
	for k, v := range extra {
		claims[k] = v
	}
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": issuerKeyID}) // cannot fail
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	signed := b64(header) + "." + b64(payload)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(nil, i.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("e2e: sign token: %w", err)
	}
	return signed + "." + b64(sig), nil
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
