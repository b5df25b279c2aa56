//! A real Kubernetes control plane on loopback for tests.
