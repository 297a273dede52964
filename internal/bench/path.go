package bench

import (
	"context"
	"io"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/otelcol-dedup/otelcol-dedup/cmd/dedupload/loadgen"
)

// PathResult compares, in-process on one goroutine, the CPU a collector
// spends per record with and without dedup: decode the OTLP request (as the
// receiver does) and hand it to the next consumer, which is nothing (the
// pass-through pipeline) or the dedup processor (default config: content
// identity, 10^6 cache entries). It leaves out the gRPC transport and the
// collector's pipeline plumbing, which cost the same in both.
type PathResult struct {
	Records           int64
	DecodeNsPerRecord float64 // decode only
	DedupNsPerRecord  float64 // decode + dedup
}

// PathLoad is loadgen's stream for the in-process path run: the end-to-end
// load's shape (30% duplicates, batches of 1000, 4 senders, content copies).
func PathLoad(records int64) loadgen.Config {
	return loadgen.Config{Records: records, Duplicates: 0.3, Batch: 1000, Senders: 4, Key: loadgen.KeyContent}.Defaults()
}

// encodedBatches returns loadgen's batches for cfg as OTLP protobuf
// requests, as they arrive at the receiver.
func encodedBatches(cfg loadgen.Config) ([][]byte, int64, error) {
	gen, err := loadgen.NewGenerator(cfg)
	if err != nil {
		return nil, 0, err
	}
	out := make([][]byte, gen.Batches())
	for b := range out {
		body, err := plogotlp.NewExportRequestFromLogs(gen.Batch(int64(b)).Logs).MarshalProto()
		if err != nil {
			return nil, 0, err
		}
		out[b] = body
	}
	return out, gen.Records(), nil
}

// decodeAndConsume decodes every request and passes it to next, rounds
// times, each round under a new pass context, and returns the CPU time the
// process spent (garbage collection included): on a shared machine, CPU time
// is what the run cost, where wall time would include other processes' turns.
func decodeAndConsume(next consumer.Logs, reqs [][]byte, rounds int, pass *int) (time.Duration, error) {
	runtime.GC()
	start, err := selfCPU()
	if err != nil {
		return 0, err
	}
	for range rounds {
		*pass++
		ctx := PassContext("path-" + strconv.Itoa(*pass))
		for _, body := range reqs {
			req := plogotlp.NewExportRequest()
			if err := req.UnmarshalProto(body); err != nil {
				return 0, err
			}
			if err := next.ConsumeLogs(ctx, req.Logs()); err != nil {
				return 0, err
			}
		}
	}
	end, err := selfCPU()
	return end - start, err
}

// selfCPU is the process's user + system time so far.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// RunPath measures decode-only and decode+dedup over records records
// (replayed rounds times), and if profile is not nil writes a CPU profile of
// the decode+dedup loop to it. The caller decides GOMAXPROCS.
func RunPath(ctx context.Context, records int64, rounds int, profile io.Writer) (PathResult, error) {
	reqs, n, err := encodedBatches(PathLoad(records))
	if err != nil {
		return PathResult{}, err
	}
	res := PathResult{Records: n * int64(rounds)}
	pass := 0
	// Warm both paths once, untimed.
	if _, err := decodeAndConsume(&CountingConsumer{}, reqs, 1, &pass); err != nil {
		return res, err
	}
	d, err := decodeAndConsume(&CountingConsumer{}, reqs, rounds, &pass)
	if err != nil {
		return res, err
	}
	res.DecodeNsPerRecord = float64(d.Nanoseconds()) / float64(res.Records)

	p, err := NewProcessor(ctx, ProcOptions{Key: KeyContent})
	if err != nil {
		return res, err
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	if _, err := decodeAndConsume(p, reqs, 1, &pass); err != nil {
		return res, err
	}
	if profile != nil {
		if err := pprof.StartCPUProfile(profile); err != nil {
			return res, err
		}
	}
	d, err = decodeAndConsume(p, reqs, rounds, &pass)
	if profile != nil {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return res, err
	}
	res.DedupNsPerRecord = float64(d.Nanoseconds()) / float64(res.Records)
	return res, nil
}

// OwnCPU is the CPU time of this process and of its children that have
// been waited for (test binaries, collectors once stopped).
func OwnCPU() (time.Duration, error) {
	self, err := selfCPU()
	if err != nil {
		return 0, err
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0, err
	}
	return self + time.Duration(ru.Utime.Nano()+ru.Stime.Nano()), nil
}
