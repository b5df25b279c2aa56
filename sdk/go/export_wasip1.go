//go:build wasip1

package operon

// The generated exports (`//go:wasmexport`): linked into every component
// that imports this package. `operon build` provides the package's files.
import _ "operon.dev/sdk/go/internal/wit/wit_exports"
