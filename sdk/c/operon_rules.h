/* The host's outcome rules (contract/src/rules.json), for the test runner.
 * Generated: a test of operon-contract fails when it drifts. */
#ifndef OPERON_RULES_H
#define OPERON_RULES_H
static const char OPERON_RULES_JSON[] =
    "{\n"
    "  \"about\": \"The host's rules for an outcome (operon-contract's rules.rs), as data for every SDK's test runner. Each SDK carries a copy (sdk_copies in rules.rs); a test of operon-contract fails when one drifts. The cases beside this file are the verdicts every runner must give.\",\n"
    "  \"maxDesired\": 500,\n"
    "  \"maxEvents\": 50,\n"
    "  \"maxObjectBytes\": 1048576,\n"
    "  \"maxReasonBytes\": 128,\n"
    "  \"maxNameBytes\": 253,\n"
    "  \"reserved\": [\n"
    "    {\"group\": \"operon.dev\", \"why\": \"operon.dev kinds belong to the host\"},\n"
    "    {\"group\": \"coordination.k8s.io\", \"kind\": \"Lease\", \"why\": \"Leases carry leader election\"},\n"
    "    {\"group\": \"rbac.authorization.k8s.io\", \"why\": \"RBAC objects would let a plugin grant itself rights\"},\n"
    "    {\"group\": \"admissionregistration.k8s.io\", \"why\": \"webhook configurations are managed by the host\"}\n"
    "  ],\n"
    "  \"clusterScoped\": [\n"
    "    {\"group\": \"\", \"kind\": \"Namespace\"},\n"
    "    {\"group\": \"\", \"kind\": \"Node\"},\n"
    "    {\"group\": \"\", \"kind\": \"PersistentVolume\"},\n"
    "    {\"group\": \"rbac.authorization.k8s.io\", \"kind\": \"ClusterRole\"},\n"
    "    {\"group\": \"rbac.authorization.k8s.io\", \"kind\": \"ClusterRoleBinding\"},\n"
    "    {\"group\": \"storage.k8s.io\", \"kind\": \"StorageClass\"},\n"
    "    {\"group\": \"storage.k8s.io\", \"kind\": \"CSIDriver\"},\n"
    "    {\"group\": \"storage.k8s.io\", \"kind\": \"CSINode\"},\n"
    "    {\"group\": \"storage.k8s.io\", \"kind\": \"VolumeAttachment\"},\n"
    "    {\"group\": \"apiextensions.k8s.io\", \"kind\": \"CustomResourceDefinition\"},\n"
    "    {\"group\": \"scheduling.k8s.io\", \"kind\": \"PriorityClass\"},\n"
    "    {\"group\": \"networking.k8s.io\", \"kind\": \"IngressClass\"},\n"
    "    {\"group\": \"node.k8s.io\", \"kind\": \"RuntimeClass\"},\n"
    "    {\"group\": \"certificates.k8s.io\", \"kind\": \"CertificateSigningRequest\"},\n"
    "    {\"group\": \"admissionregistration.k8s.io\"}\n"
    "  ]\n"
    "}\n";
#endif
