// A stand-in for contrib's pkg/semconvtest, which contrib does not publish on
// the module proxy: see the replaces of ../builder-config.yaml.
module github.com/open-telemetry/opentelemetry-collector-contrib/pkg/semconvtest

go 1.25
