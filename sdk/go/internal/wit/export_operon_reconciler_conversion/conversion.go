//go:build wasip1

package export_operon_reconciler_conversion

import (
	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"operon.dev/sdk/go/internal/abi"
	guest "operon.dev/sdk/go/internal/wit/export_operon_reconciler_guest"
)

const notExported = "operon: operon.toml says the world exports conversion but the exported reconciler does not implement operon.Converter"

// Convert is the `convert` export.
func Convert(objects []string, desiredAPIVersion string) witTypes.Result[[]string, string] {
	if abi.Exports.Convert == nil {
		panic(notExported)
	}
	converted, refusal := abi.Exports.Convert(guest.Host, objects, desiredAPIVersion)
	if refusal != nil {
		return witTypes.Err[[]string](*refusal)
	}
	return witTypes.Ok[[]string, string](converted)
}
