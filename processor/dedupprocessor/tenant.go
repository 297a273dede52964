package dedupprocessor

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
)

// tenantDigest is the digest of a request's partition, part of every identity
// so that partitions never suppress each other's data: its auth_attributes,
// then metadata_keys values; zero when neither is set. Requests lacking an auth
// attribute (not identified) share one partition.
func tenantDigest(ctx context.Context, cfg *Config, enc *identity.Encoder) (d [digest.Size]byte, identified bool) {
	if len(cfg.AuthAttributes) == 0 && len(cfg.MetadataKeys) == 0 {
		return d, true
	}
	info := client.FromContext(ctx)
	enc.Reset()
	identified = true
	if len(cfg.AuthAttributes) > 0 {
		identified = encodeAuth(enc, info.Auth, cfg.AuthAttributes)
	}
	for _, k := range cfg.MetadataKeys {
		vals := info.Metadata.Get(k)
		enc.Uint(uint64(len(vals)))
		for _, v := range vals {
			enc.String(v)
		}
	}
	return enc.Digest().Bytes(), identified
}

// encodeAuth encodes the attributes after a 1, or just a 0 (no identity's
// encoding) if one lacks.
func encodeAuth(enc *identity.Encoder, auth client.AuthData, names []string) bool {
	if _, _, identified := whyUnidentified(auth, names); !identified {
		enc.Uint(0)
		return false
	}
	enc.Uint(1)
	for _, name := range names {
		switch v := auth.GetAttribute(name).(type) {
		case []string: // membership (oidc)
			enc.Uint(uint64(len(v)))
			for _, s := range v {
				enc.String(s)
			}
		default: // strings for most attributes; custom claims come as decoded JSON
			enc.Any(v)
		}
	}
	return true
}

// hasValue reports whether an auth attribute's value names an identity.
func hasValue(v any) bool {
	switch t := v.(type) {
	case nil:
		return false
	case string:
		return t != ""
	case []string:
		return len(t) > 0
	case []any:
		return len(t) > 0
	}
	return true
}

// unidentified is why a request lacks the identity (see unidentifiedFix): the
// counter's reason.
type unidentified int

const (
	unidentifiedUnauthenticated unidentified = iota
	unidentifiedMissingAttribute
	numUnidentified
)

var unidentifiedNames = [numUnidentified]string{"unauthenticated", "missing_attribute"}

// unidentifiedFix is the line logged for each reason: what happened, and what
// to change.
var unidentifiedFix = [numUnidentified]string{
	"dedup: a request reached dedup without an authenticated identity, so auth_attributes cannot partition it: its records share one partition with every such request. " +
		"Name the authenticator in auth.authenticator of every receiver of this pipeline, and put no batch processor before dedup (it keeps client metadata only)",
	"dedup: a request's authenticated identity has no value for an auth_attributes entry, so its records share one partition with every such request. " +
		"Name an attribute the authenticator sets for every sender (oidc: subject, or membership with groups_claim set; basicauth: username), or give every sender's token the claim",
}

// whyUnidentified says why auth lacks the identity of names, and which
// attribute, or that it has it.
func whyUnidentified(auth client.AuthData, names []string) (why unidentified, attr string, identified bool) {
	if auth == nil {
		return unidentifiedUnauthenticated, "", false
	}
	for _, name := range names {
		if !hasValue(auth.GetAttribute(name)) {
			return unidentifiedMissingAttribute, name, false
		}
	}
	return 0, "", true
}

// serverAuthenticator is extensionauth.Server, matched by shape: no module
// needed for it.
type serverAuthenticator interface {
	Authenticate(ctx context.Context, sources map[string][]string) (context.Context, error)
}

// checkAuthenticator refuses auth_attributes without a server authenticator:
// no request would have one.
func checkAuthenticator(cfg *Config, host component.Host) error {
	if len(cfg.AuthAttributes) == 0 {
		return nil
	}
	for _, ext := range host.GetExtensions() {
		if _, ok := ext.(serverAuthenticator); ok {
			return nil
		}
	}
	return fmt.Errorf("dedup: auth_attributes %v needs an authenticator, and the collector runs none: add one (e.g. oidc) to extensions and service.extensions and name it in the receivers' auth.authenticator, or remove auth_attributes", cfg.AuthAttributes)
}
