// Package export_operon_reconciler_conversion connects the generated bindings to the functions operon.Export
// registered (see ../doc.go). Its code is built only for GOOS=wasip1.
package export_operon_reconciler_conversion
