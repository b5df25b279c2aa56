module operon.dev/examples/go-webapp

go 1.25

require operon.dev/sdk/go v0.0.0

require go.bytecodealliance.org/pkg v0.2.1 // indirect

replace operon.dev/sdk/go => ../../sdk/go
