// The host's outcome rules (contract/src/rules.json), for the test runner.
// Generated: a test of operon-contract fails when it drifts.
export const RULES = {
  "about": "The host's rules for an outcome (operon-contract's rules.rs), as data for every SDK's test runner. Each SDK carries a copy (sdk_copies in rules.rs); a test of operon-contract fails when one drifts. The cases beside this file are the verdicts every runner must give.",
  "maxDesired": 500,
  "maxEvents": 50,
  "maxObjectBytes": 1048576,
  "maxReasonBytes": 128,
  "maxNameBytes": 253,
  "reserved": [
    {"group": "operon.dev", "why": "operon.dev kinds belong to the host"},
    {"group": "coordination.k8s.io", "kind": "Lease", "why": "Leases carry leader election"},
    {"group": "rbac.authorization.k8s.io", "why": "RBAC objects would let a plugin grant itself rights"},
    {"group": "admissionregistration.k8s.io", "why": "webhook configurations are managed by the host"}
  ],
  "clusterScoped": [
    {"group": "", "kind": "Namespace"},
    {"group": "", "kind": "Node"},
    {"group": "", "kind": "PersistentVolume"},
    {"group": "rbac.authorization.k8s.io", "kind": "ClusterRole"},
    {"group": "rbac.authorization.k8s.io", "kind": "ClusterRoleBinding"},
    {"group": "storage.k8s.io", "kind": "StorageClass"},
    {"group": "storage.k8s.io", "kind": "CSIDriver"},
    {"group": "storage.k8s.io", "kind": "CSINode"},
    {"group": "storage.k8s.io", "kind": "VolumeAttachment"},
    {"group": "apiextensions.k8s.io", "kind": "CustomResourceDefinition"},
    {"group": "scheduling.k8s.io", "kind": "PriorityClass"},
    {"group": "networking.k8s.io", "kind": "IngressClass"},
    {"group": "node.k8s.io", "kind": "RuntimeClass"},
    {"group": "certificates.k8s.io", "kind": "CertificateSigningRequest"},
    {"group": "admissionregistration.k8s.io"}
  ]
};
