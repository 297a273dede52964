package dedupprocessor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// A source is who sent a record, as source.key names it: attributes of the
// record's resource (the SDK or agent that made it), or the request's client
// (its authenticated identity, its metadata, its address). Records are named
// by resource, not one by one: a resource's records share their sender, so
// naming costs one lookup per resource of a batch.

// sourceFrom is where a part of a source's name is read.
type sourceFrom uint8

const (
	fromResource sourceFrom = iota // resource.attributes["k"]
	fromAuth                       // auth.<attribute>: client.Info.Auth
	fromMetadata                   // metadata.<key>: client.Info.Metadata
	fromAddress                    // client.address: the peer's IP
)

// sourcePart is one entry of source.key.
type sourcePart struct {
	from sourceFrom
	name string // the attribute or metadata key
}

const (
	// noSource stands for a part with no value.
	noSource = "(none)"
	// maxSourceLen bounds a source's name, a label value, in bytes.
	maxSourceLen = 256
)

// sourceHint says what a source.key entry may be.
const sourceHint = `name a resource attribute (resource.attributes["service.name"]), ` +
	`an attribute of the authenticated client (auth.subject), a client metadata key (metadata.x-scope-orgid) or client.address`

// parseSourcePart reads a source.key entry: an OTTL resource attribute path,
// or the request context as the attributes processor's from_context names it.
func parseSourcePart(expr string) (sourcePart, error) {
	e := strings.TrimSpace(expr)
	if p, ok := parsePlainPath(e, nil); ok {
		if p.field != "resource.attributes" {
			return sourcePart{}, errors.New("a record's own attributes do not name its sender: " + sourceHint)
		}
		return sourcePart{from: fromResource, name: p.key}, nil
	}
	switch {
	case e == "client.address":
		return sourcePart{from: fromAddress}, nil
	case strings.HasPrefix(e, "auth.") && len(e) > len("auth."):
		return sourcePart{from: fromAuth, name: e[len("auth."):]}, nil
	case strings.HasPrefix(e, "metadata.") && len(e) > len("metadata."):
		return sourcePart{from: fromMetadata, name: e[len("metadata."):]}, nil
	}
	if fieldPathRE.MatchString(e) && !strings.HasSuffix(e, ".") { // a bare attribute name, e.g. host.name
		return sourcePart{}, fmt.Errorf("not a source (the resource attribute is resource.attributes[%q]): %s", e, sourceHint)
	}
	return sourcePart{}, errors.New("not a source: " + sourceHint)
}

// sourceKey names the sources of a processor's records.
type sourceKey struct {
	parts       []sourcePart
	fromRequest bool // some part is the request's client
}

// newSourceKey returns the key of source.key (validated), nil if it is empty.
func newSourceKey(exprs []string) *sourceKey {
	if len(exprs) == 0 {
		return nil
	}
	k := &sourceKey{}
	for _, expr := range exprs {
		p, _ := parseSourcePart(expr)
		k.parts = append(k.parts, p)
		k.fromRequest = k.fromRequest || p.from != fromResource
	}
	return k
}

// request returns the values of the request's parts, in order (the resource
// parts' are empty), or nil if no part is the request's.
func (k *sourceKey) request(ctx context.Context) []string {
	if !k.fromRequest {
		return nil
	}
	info := client.FromContext(ctx)
	vals := make([]string, len(k.parts))
	for i, p := range k.parts {
		switch p.from {
		case fromAuth:
			if info.Auth != nil {
				vals[i] = authValue(info.Auth.GetAttribute(p.name))
			}
		case fromMetadata:
			vals[i] = strings.Join(info.Metadata.Get(p.name), ",")
		case fromAddress:
			if info.Addr != nil {
				vals[i] = info.Addr.String()
				if host, _, err := net.SplitHostPort(vals[i]); err == nil {
					vals[i] = host // a port per connection would make a source of each
				}
			}
		}
	}
	return vals
}

// authValue renders an authenticator's attribute: strings for most, a list
// of groups for membership, decoded JSON for custom claims.
func authValue(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	case []string:
		return strings.Join(t, ",")
	}
	return fmt.Sprint(v)
}

// name names the sender of res's records in a request whose values are req:
// the parts' values joined by "/", a part without one as noSource.
func (k *sourceKey) name(res pcommon.Resource, req []string) string {
	if len(k.parts) == 1 {
		return sourceName(k.part(0, res, req))
	}
	var sb strings.Builder
	for i := range k.parts {
		if i > 0 {
			sb.WriteByte('/')
		}
		sb.WriteString(orNone(k.part(i, res, req)))
	}
	return sourceName(sb.String())
}

func (k *sourceKey) part(i int, res pcommon.Resource, req []string) string {
	if k.parts[i].from != fromResource {
		return req[i]
	}
	v, ok := res.Attributes().Get(k.parts[i].name)
	switch {
	case !ok:
		return ""
	case v.Type() == pcommon.ValueTypeStr:
		return v.Str() // no copy: the summary copies the names it keeps
	}
	return v.AsString()
}

func orNone(s string) string {
	if s == "" {
		return noSource
	}
	return s
}

// sourceName makes s a label value: not empty, valid UTF-8, at most
// maxSourceLen bytes.
func sourceName(s string) string {
	if len(s) <= maxSourceLen && utf8.ValidString(s) {
		return orNone(s)
	}
	if len(s) > maxSourceLen {
		s = s[:maxSourceLen]
	}
	return orNone(strings.ToValidUTF8(s, ""))
}
