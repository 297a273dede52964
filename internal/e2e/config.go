package e2e

import (
	"encoding/json"
	"os"

	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
)

// Names of the sink exporters BaseConfig defines; a pipeline uses one of them.
const (
	SinkGRPCExporter = "otlp_grpc/sink"
	SinkHTTPExporter = "otlp_http/sink"
)

// BaseConfig is the part of an e2e collector config that is about where
// things listen and where they go, for the collector to merge with the
// configs that say what it does (later --config files override earlier ones;
// lists are replaced, maps merged):
//   - health_check on ports.Health, enabled in the service;
//   - the otlp receiver, gRPC on ports.OTLPGRPC and HTTP on ports.OTLPHTTP;
//   - internal metrics at level detailed, Prometheus text on ports.Metrics,
//     names exactly as the instruments write them (no unit or _total suffix,
//     no otel_scope_* labels);
//   - two exporters to sink, SinkGRPCExporter and SinkHTTPExporter, with
//     retry_on_failure and sending_queue disabled, so an export error goes
//     straight back up the pipeline to the processor and the sender.
//
// It defines no pipeline. JSON is YAML, so the result can be written to a
// .yaml file as is.
func BaseConfig(ports Ports, sink *otlp.Sink) ([]byte, error) {
	noRetry := map[string]any{
		"retry_on_failure": map[string]any{"enabled": false},
		"sending_queue":    map[string]any{"enabled": false},
	}
	grpcExp := map[string]any{
		"endpoint": sink.GRPCEndpoint(),
		"tls":      map[string]any{"insecure": true},
	}
	httpExp := map[string]any{
		"endpoint": sink.HTTPEndpoint(),
	}
	for k, v := range noRetry {
		grpcExp[k] = v
		httpExp[k] = v
	}
	cfg := listenConfig(ports)
	cfg["exporters"] = map[string]any{
		SinkGRPCExporter: grpcExp,
		SinkHTTPExporter: httpExp,
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// listenConfig is what every collector a test starts has: health_check, the
// otlp receiver (gRPC and HTTP) and its own metrics on the ports given.
func listenConfig(ports Ports) map[string]any {
	return map[string]any{
		"extensions": map[string]any{
			"health_check": map[string]any{"endpoint": Addr(ports.Health)},
		},
		"receivers": map[string]any{
			"otlp": map[string]any{
				"protocols": map[string]any{
					"grpc": map[string]any{"endpoint": Addr(ports.OTLPGRPC)},
					"http": map[string]any{"endpoint": Addr(ports.OTLPHTTP)},
				},
			},
		},
		"service": map[string]any{
			"extensions": []string{"health_check"},
			"telemetry":  Telemetry("detailed", ports.Metrics),
		},
	}
}

// Telemetry is the service.telemetry section every test collector uses: its
// own metrics at level on 127.0.0.1:port, named exactly as the instruments
// are written (no unit or type suffix, no scope labels).
func Telemetry(level string, port int) map[string]any {
	return map[string]any{
		"metrics": map[string]any{
			"level": level,
			"readers": []any{map[string]any{
				"pull": map[string]any{"exporter": map[string]any{"prometheus": map[string]any{
					"host":                "127.0.0.1",
					"port":                port,
					"without_units":       true,
					"without_type_suffix": true,
					"without_scope_info":  true,
				}}},
			}},
		},
	}
}

// WriteFile writes a config file readable only by its owner.
func WriteFile(path string, data []byte) error {
	return os.WriteFile(path, data, 0o600)
}
