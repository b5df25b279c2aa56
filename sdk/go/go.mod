module operon.dev/sdk/go

go 1.25

require go.bytecodealliance.org/pkg v0.2.1
