//go:build wasip1

package operon

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"

	// The generated exports (`//go:wasmexport`): linked into every
	// component that imports this package. `operon build` provides the
	// package's files.
	_ "operon.dev/sdk/go/internal/wit/wit_exports"
)

// A component may not call an import while the host is inside its
// cabi_realloc (lowering a request into guest memory). Go's collector reads
// the clock through WASI, so a collection started by an allocation there
// traps the call ("cannot leave component instance") after enough calls to
// fill the heap. The automatic collector is therefore off in a component,
// and the SDK collects at the end of an exported call instead — where
// imports are allowed — once 4 MiB were allocated since the last time.
func init() {
	debug.SetGCPercent(-1)
	afterCall = collectIfGrown
}

const collectEvery = 4 << 20

var (
	allocs          = []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	allocsAtCollect uint64
)

func collectIfGrown() {
	metrics.Read(allocs)
	now := allocs[0].Value.Uint64()
	if now-allocsAtCollect >= collectEvery {
		runtime.GC()
		metrics.Read(allocs)
		allocsAtCollect = allocs[0].Value.Uint64()
	}
}
