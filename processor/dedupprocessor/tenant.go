package dedupprocessor

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
)

// tenantDigest is the digest of the partition a request's records belong
// to, part of every identity so that partitions never suppress each other's
// data. It is made of the auth_attributes values the receiver's
// authenticator put in client.Info.Auth, then the metadata_keys values. All
// zero when neither is configured.
//
// identified is false when auth_attributes is set and the request lacks one
// of them (no authenticator ran, or it did not set that attribute). Such
// requests share one partition of their own, apart from every identity:
// they are deduplicated among themselves and can never suppress, or be
// suppressed by, an authenticated sender's data.
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

// encodeAuth encodes the named attributes of auth, opened by 1, or only a 0
// if one of them has no value: every request without the identity then
// shares one encoding, which no identity's encoding can equal.
func encodeAuth(enc *identity.Encoder, auth client.AuthData, names []string) bool {
	for _, name := range names {
		if auth == nil || !hasValue(auth.GetAttribute(name)) {
			enc.Uint(0)
			return false
		}
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

// serverAuthenticator is the method of extensionauth.Server, the kind of
// extension a receiver's auth.authenticator names; matched by shape so the
// processor needs no module for it.
type serverAuthenticator interface {
	Authenticate(ctx context.Context, sources map[string][]string) (context.Context, error)
}

// checkAuthenticator refuses auth_attributes on a collector with no server
// authenticator extension: every request would lack the identity. Whether
// the receivers in front of this processor use it cannot be seen from here;
// requests without it are counted (unidentified_records).
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
